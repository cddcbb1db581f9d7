"""The policy at a shape no bucket was ported for (docs/PACKS.md, "Shapes no bucket was ported
for"), which `PackedOp.choose` applies:

- config: a bucket of the same row width (and a row count within 4x) lends its tuned config;
  otherwise the config is *derived* for the shape by the module's own default rule
  (porter.codegen.heuristics, embedded in every generated module) with the device's warp width
  and thread limit, as `porter.codegen.variants.default_config` does for the port;
- eager: on a GPU, the reference op runs instead when the kernel-vs-eager ratio estimated
  from the nearest timed buckets of that dtype on either side of the row width (same kernel
  form: one block, looped or split_coop, the kept kernel's or the rule's config of that form
  timed beside it; where neither was timed, the other forms' ratios, halved) is under 1 +
  MARGIN_PER_OCTAVE per octave to the nearer (`versus_eager`). Logged once per (shape bucket,
  dtype); `describe()` says which config, why, and the estimate.
"""

from __future__ import annotations

import inspect
import math
from types import ModuleType
from typing import Any

import torch

from porter.packs.format import bucket_distance
from targets.dtypes import torch_dtype

# At a shape no bucket was ported for, a neighbour's kernel runs only where it beat eager there by
# this much per octave of distance (row width; a row-count octave counts a quarter, as in
# format.bucket_distance): a stated assumption, not a fit. Between ported widths a row-wise kernel
# keeps its efficiency only approximately, and eager's changes too, so a thin margin far away is
# no evidence of a win. bench/suite.py --unseen measures what it gets right.
MARGIN_PER_OCTAVE = 0.10
# A timed bucket whose rows' 16-byte alignment differs from the shape's (`rows_aligned`): its
# ratio counts divided by this. The one-block row kernels load 16 bytes at a time only where
# rows are aligned; softmax 4096 x 50257 bf16, looped before its SHIFT body, ran 0.79x eager on
# an H100 where the aligned 4096 x 128256 bucket ran 1.34x (a factor 1.7; bench/NOTES.md item
# 58). Kernels with a SHIFT body (the module's SHIFT_STRATEGIES) load 16 bytes at a time at
# either alignment, and their buckets count as they are (item 60). Cross-entropy's kernels ran
# 6-12x eager at either alignment, which the factor leaves clear.
UNALIGNED_FACTOR = 2.0
# Where no timed bucket of this dtype ran the kernel form the shape needs (`kernel_form`), the
# buckets of other forms count with their ratios divided by this: a form's speed says little
# about another's (a looped softmax reads each row twice: at most 2x the one-block kernel's
# traffic), but a kernel far ahead of eager in every form stays ahead. Cross-entropy's pack,
# its buckets all looped in one H100 port (6-12x eager), had run eager at five one-block shapes
# where its kernel ran 6-8x eager (bench/NOTES.md item 59).
OTHER_FORM_FACTOR = 2.0
# A bucket of the same row width lends its config to row counts within this many octaves: a
# row-wise config is tuned for its width; far fewer rows (a grid under the SM count) may have
# been won by a config that spreads one row over more warps.
SAME_WIDTH_ROW_OCTAVES = 2
# The generated modules' default rules (porter/codegen/heuristics.py), which their launchers call
# with config=None; the loader calls them with the device's limits to derive a config.
_DEFAULT_RULES = ("rowwise_default", "columns_default", "flat_default", "matmul_default",
                  "scan_default")


def row_width(bucket: str) -> int:
    """A bucket's row width (its last dimension)."""
    return int(bucket.split("x")[-1])


def hw_model(target: str) -> Any:
    import hwmodels

    return hwmodels.get(target)


class _Asked(Exception):
    """Raised by a rule stand-in with the config the rule gave: the launcher stops there."""

    def __init__(self, config: dict[str, Any] | None, how: str) -> None:
        super().__init__("config derived")
        self.config = config
        self.how = how  # the rule and the device values it was given


def derive_config(module: ModuleType, hw: Any, inputs: tuple[Any, ...],
                  form: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """The config a generated module's own default rule gives `inputs` on device `hw`.

    A generated launcher called with config=None sizes its config with the generator's rule
    (`_DEFAULT_RULES`: rowwise_default, columns_default, flat_default, matmul_default or
    scan_default from porter/codegen/heuristics.py, embedded in the module) but with a 32-wide
    warp, 1024 threads, an H100's SM count and no TMA, whatever the device. So the launcher is
    run once on meta tensors of the inputs' shapes, strides and dtypes, with the rules swapped
    for stand-ins that call them with `hw`'s warp width, thread limit, SM count and TMA, and
    stop the launch at the first config one gives: the rule sees exactly the sizes the launcher
    derives from the inputs (row count, reduced length, M/N/K), and the kernel form it picks is
    one this module has.
    The extras `porter.codegen.variants.default_config` adds for a device are added the same
    way: the looped lanes of a non-32-wide warp, fewer matmul stages where shared memory is
    smaller.

    Args:
        module: a module executed from a pack file (never one that runs kernels: its rule is
            swapped while this runs).
        hw: the device's hardware model.
        inputs: the call's inputs (only shapes, strides and dtypes are read).
        form: the config of this kernel form (`kernel_form`) whatever the rule would pick
            (heuristics.rowwise_default's `form`), as the port times each form at its buckets;
            (None, why) where the rule has no config of that form here or cannot be asked for
            one (the other rules, and rowwise rules of packs made before it could).

    Returns:
        (config, how) with the rule's name in `how`; (None, why) when the module has no such
        rule (a user's kernel, a hand-written launcher) or the launcher failed before asking it.
    """
    rules = {n: module.__dict__[n] for n in _DEFAULT_RULES if callable(module.__dict__.get(n))}
    if not rules or not callable(getattr(module, "launch", None)):
        return None, "the module has none of the generator's rules to ask"
    eb = next((t.element_size() for t in inputs
               if isinstance(t, torch.Tensor) and t.dtype.is_floating_point), 4)
    device_args = {"warp_size": hw.warp_size,
                   "max_threads": int(hw.limits.max_threads_per_block.value),
                   "sms": int(hw.compute_units.value),
                   # an NVIDIA device (split_coop runs on CUDA only, long_rows.not_offered):
                   # the module's own check reads the local torch, not the derived-for device
                   "cuda": hw.build.backend == "triton-cuda",
                   "tma": hw.has("tma") and hw.build.backend == "triton-cuda" and eb == 2,
                   # fp32 operands as three tf32 products where the module's tiled kernel takes
                   # them (it then ships acc_chunk) and the device has tf32 tensor cores, as
                   # variants.tf32x3_offered decides for a port
                   "tf32x3": eb == 4 and hw.build.backend == "triton-cuda"
                   and bool(hw.peak_tflops("tf32")) and callable(module.__dict__.get("acc_chunk"))}

    def stand_in(name: str) -> Any:
        rule = rules[name]
        sig = inspect.signature(rule)

        def ask(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            used = {k: v for k, v in device_args.items() if k in sig.parameters}
            bound.arguments.update(used)
            if form is not None:
                if "form" not in sig.parameters:
                    raise _Asked(None, f"{name} cannot be asked for the {form} form")
                bound.arguments["form"] = form
            config = rule(*bound.args, **bound.kwargs)
            if config is None and form is not None:
                raise _Asked(None, f"{name} has no {form} config for these inputs")
            if config is None:  # not this rule's case (columns_default): the launcher goes on
                return None
            if used.get("tf32x3") and "BLOCK_M" in config:
                config = {**config, "ieee": False, "tf32x3": True}  # as the launcher reads it
            raise _Asked(dict(config), f"{name} with "
                         f"{', '.join(f'{k} {v}' for k, v in used.items()) or 'its defaults'}")
        return ask

    meta = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                 if isinstance(t, torch.Tensor) else t for t in inputs)
    module.__dict__.update({name: stand_in(name) for name in rules})
    try:
        module.launch(*meta)
        return None, "the launcher asked none of the generator's rules for these inputs"
    except _Asked as asked:
        if asked.config is None:
            return None, asked.how
        config, used = asked.config, asked.how
    except Exception as exc:  # noqa: BLE001 - no derived config; the launcher will choose
        return None, f"asking the module's rules failed: {type(exc).__name__}: {exc}"
    finally:
        module.__dict__.update(rules)
    lanes = module.__dict__.get("looped_lanes")
    if hw.warp_size != 32 and "LANES" not in config and callable(lanes) and \
            config.get("strategy") in ("looped", "single_pass", "persistent"):
        # the launcher's own LANES assumes 32-wide warps (variants._add_lanes)
        config["LANES"] = lanes(config["BLOCK_N"], config["num_warps"], eb, hw.warp_size)
    if "BLOCK_M" in config and "BLOCK_K" in config:
        # fewer pipeline stages where shared memory is smaller (variants.default_config)
        smem = int(hw.limits.shared_memory_per_block_bytes.value)
        tile = (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * eb
        while config["num_stages"] > 2 and config["num_stages"] * tile > smem:
            config["num_stages"] -= 1
    return config, used


def kernel_form(config: dict[str, Any] | None) -> str | None:
    """The kernel form a config runs (None: no strategy recorded): one block holding the row
    ("one-block": single_pass, persistent, two_block), the row read in chunks ("looped":
    looped, looped_l2, split_row), or another strategy by its name. One form's speed says
    little about another's: a looped softmax reads each row twice."""
    strategy = (config or {}).get("strategy")
    if strategy in ("single_pass", "persistent", "two_block"):
        return "one-block"
    if strategy in ("looped", "looped_l2", "split_row"):
        return "looped"
    return strategy


def speedup(b: dict[str, Any]) -> float | None:
    """A bucket's measured kernel-vs-eager ratio (eager time / kernel time), or None: of the
    times that bind (the larger of device time and call time, each side), where the port
    measured both; else of device times (a pack ported before call times were kept)."""
    n = b.get("numbers") or {}
    s = n.get("binding_speedup_vs_eager", n.get("speedup_vs_eager"))
    if n.get("label") != "measured" or not isinstance(s, (int, float)):
        return None
    return float(s)


def rule_speedup(b: dict[str, Any], form: str | None) -> float | None:
    """A bucket's measured ratio against eager of the module rule's `form` config, which the
    port timed there beside its kept kernel of another form (the bucket's `form_speedups`,
    porter/judge/device.form_speedups), or None."""
    forms = (b.get("numbers") or {}).get("form_speedups")
    s = (forms.get(form) or {}).get("speedup_vs_eager") if isinstance(forms, dict) else None
    return float(s) if isinstance(s, (int, float)) and s > 0 else None


def _pct_of_copy(b: dict[str, Any], target: str) -> str:
    """", 93% of copy" for a measured bucket on a device with a measured copy bandwidth."""
    n = b.get("numbers") or {}
    t, nbytes = n.get("time_ms"), n.get("bytes_moved")
    try:
        copy = hw_model(target).measured_value("copy_bandwidth_gbps")
    except Exception:  # noqa: BLE001 - a name the hardware models no longer know: no figure
        copy = None
    if not t or not nbytes or not copy:
        return ""
    return f", {nbytes / (t * 1e-3) / 1e9 / copy * 100:.0f}% of copy"


def rows_aligned(n_cols: int, dtype: str) -> bool:
    """Whether rows of n_cols `dtype` elements start 16 bytes apart, so that the row kernels
    load 16 bytes at a time (ALIGN, heuristics.rowwise_align); elsewhere they load one element
    at a time, a different kernel in practice (softmax 4096 x 50257 bf16, looped: 0.79x eager,
    at 128256 columns 1.34x; bench/NOTES.md item 58)."""
    return n_cols * torch_dtype(dtype).itemsize % 16 == 0


def versus_eager(entry: dict[str, Any], bucket: str, dtype: str,
                  config: dict[str, Any] | None,
                  n_cols: int | None = None, shifted: bool = False) -> tuple[str | None, str]:
    """At a shape with no exact bucket: whether the reference op should run instead, by the
    entry's measured kernel-vs-eager ratios at the nearest timed buckets of this dtype.

    The rule (docs/PACKS.md): of the timed buckets of this dtype whose kernel has the form
    `config` has (one block per row or looped: `kernel_form`), take the nearest at or below the row
    width and the nearest at or above it. The estimated ratio at the shape interpolates theirs
    (on a log scale, each weighted by the other's distance: the nearer counts more; one side
    only: its ratio). The kernel runs when the estimate is at least 1 + MARGIN_PER_OCTAVE per
    octave to the nearer of them (distance: format.bucket_distance / 4, so a row-count octave
    counts a quarter); otherwise the reference runs. A bucket whose kept kernel has another
    form counts with the module rule's config of this form where the port timed one there
    beside its kept kernel (`rule_speedup`); where no bucket has either, the same rule runs
    over the buckets of the other forms, each ratio divided by OTHER_FORM_FACTOR.
    Given the row width `n_cols`, a bucket whose rows are 16-byte aligned where these are not,
    or the other way (`rows_aligned`), counts its ratio divided by UNALIGNED_FACTOR, unless
    `shifted` and the bucket's kept kernel is the evidence: the config's kernel starts its
    blocks on the rows' 16-byte boundaries where rows are not aligned (the module's
    SHIFT_STRATEGIES, heuristics.row_shift), which kept cross-entropy's looped kernels at their
    speed; softmax's looped rule config with SHIFT ran 0.91x eager at 50,257 wide (bf16), so a
    rule config's ratio from aligned rows is halved all the same. With no timed bucket of this
    dtype there is no estimate, and the kernel runs (its tier already says it was never
    timed).

    Returns:
        (why the reference runs, or None; a sentence of the evidence for describe()).
    """
    target = entry["target"]
    timed = [b for b in entry["buckets"] if b["dtype"] == dtype and speedup(b) is not None
             and bucket_distance(b["bucket"], bucket) != float("inf")]
    if not timed:
        return None, (f"no {dtype} bucket of {target} was timed against eager, so there is no "
                      "estimate either way")
    form = kernel_form(config)
    same = [b for b in timed if form is None or kernel_form(b.get("config")) in (None, form)]
    # a bucket whose kept kernel has another form: its rule config of this form, timed there
    kept = {b["bucket"] for b in same}
    ruled = {b["bucket"]: s for b in timed if b["bucket"] not in kept
             and (s := rule_speedup(b, form)) is not None}
    same += [b for b in timed if b["bucket"] in ruled]
    other_form = not same
    if other_form:
        same = timed
    aligned, unlike = True, set()
    if n_cols is not None:
        aligned = rows_aligned(n_cols, dtype)
        # a SHIFT kernel keeps its speed at either alignment only as the buckets' kept kernels
        # measured it (cross-entropy); softmax's rule config ran 0.91x eager at 50,257 wide
        unlike = {b["bucket"] for b in same if b.get("shape")
                  and (b["bucket"] in ruled or not shifted)
                  and rows_aligned(int(b["shape"][-1]), dtype) is not aligned}

    def ratio(b: dict[str, Any]) -> float:
        measured = ruled.get(b["bucket"]) or speedup(b) or 1e-9
        return (measured / (UNALIGNED_FACTOR if b["bucket"] in unlike else 1.0)
                / (OTHER_FORM_FACTOR if other_form else 1.0))

    width = row_width(bucket)
    sides = ([b for b in same if row_width(b["bucket"]) <= width],
             [b for b in same if row_width(b["bucket"]) >= width])
    near = list({id(b): (b, bucket_distance(b["bucket"], bucket) / 4.0) for side in sides
                 if side for b in [min(side, key=lambda x: bucket_distance(x["bucket"], bucket))]
                 }.values())
    if len(near) == 2 and near[0][1] + near[1][1] > 0:
        (b1, d1), (b2, d2) = near
        estimate = math.exp((d2 * math.log(ratio(b1)) + d1 * math.log(ratio(b2))) / (d1 + d2))
    else:
        estimate = ratio(near[0][0])
    octaves = min(d for _, d in near)
    need = 1.0 + MARGIN_PER_OCTAVE * octaves

    def told(b: dict[str, Any], d: float) -> str:
        other = (f" (rows {'not ' if aligned else ''}16-byte aligned where these are"
                 f"{'' if aligned else ' not'}: counted / {UNALIGNED_FACTOR:g})"
                 if b["bucket"] in unlike else "")
        if b["bucket"] in ruled:
            return (f"{b['bucket']}'s {form} rule config ran {ruled[b['bucket']]:.2f}x eager "
                    f"(its kept {kernel_form(b.get('config'))} kernel {speedup(b):.2f}x), "
                    f"{d:.2f} octaves away{other}")
        form_note = (f" (the {kernel_form(b.get('config'))} form where this shape needs the "
                     f"{form} form: counted / {OTHER_FORM_FACTOR:g})" if other_form else "")
        return (f"{b['bucket']} ran {speedup(b):.2f}x eager{_pct_of_copy(b, target)}, "
                f"{d:.2f} octaves away{other}{form_note}")

    evidence = ("timed neighbours: " + "; ".join(told(b, d) for b, d in near) +
                f"; estimate here {estimate:.2f}x eager, needs >= {need:.2f}x (1 + "
                f"{MARGIN_PER_OCTAVE:.2f} per octave to the nearer)")
    if estimate < need:
        return f"estimated slower than eager here ({evidence})", evidence
    return None, evidence
