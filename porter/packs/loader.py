"""Load a kernel pack and run the right kernel for the device at hand, or the reference.

`load_pack(path)` returns a `PackedOp`, a callable with the op's signature. On every call it
picks the pack entry for the device the inputs live on and the config for their shape bucket and
dtype, and runs that kernel. It never silently runs a kernel that was not verified for the device:

- on a GPU the entry must be for the detected device (hwmodels.detect) and must have reached at
  least the interpreted tier (correctness stages passed; "measured" = also timed on the device).
  An entry that was only compiled, or none for this device, means the reference runs instead.
- on a CPU the kernel runs under the Triton interpreter, and only when the entry reached the
  interpreted tier; the loader says plainly that this is the interpreter (correct, not fast).
- a Metal entry (Apple M4) runs through PyTorch's MPS backend (`torch.mps.compile_shader`,
  porter.mps) on tensors on "mps", or on the CPU Metal executor when the pack is loaded with
  device="m4" and the tensors are on the CPU; it must have reached the emulated tier (checked
  on that executor). Where MPS is missing, the reference runs, with one warning.

Loading a pack executes its Python, as installing a package does, so the pack is checked whole
when it is loaded (porter.pack's integrity rule): every manifest path must lie inside the pack and
every file must have the manifest's sha256 (optionally, the manifest itself a pinned sha256). A
pack that fails is *tampered* and refused with `PackIntegrityError` naming the file, even when the
file belongs to another device's entry: a changed file is an attack or a corruption, never a
reason to fall back to the reference. Each file is read once; its verified bytes are what runs
(compiled into a fresh module, and the text Triton reads through `inspect` is the same bytes), so
a file changed on disk after loading is never used.

The reference runs instead of a kernel only when the (intact) pack has no usable entry for the
call: none for the device, none that reached the interpreted tier, or no config for the dtype or
shape. Each such fallback is announced by exactly one `PackFallbackWarning` per reason.

At a shape with no exact bucket (docs/PACKS.md, "Shapes no bucket was ported for"):
- config: a bucket of the same row width (and a row count within 4x) lends its tuned config;
  otherwise the config is *derived* for the shape by the module's own default rule
  (porter.codegen.heuristics, embedded in every generated module) with the device's warp width
  and thread limit, as `porter.codegen.variants.default_config` does for the port;
- eager: on a GPU, the reference op runs instead when the kernel-vs-eager ratio estimated
  from the nearest timed buckets of that dtype on either side of the row width (same kernel
  form: one block or looped) is under 1 + MARGIN_PER_OCTAVE per octave to the nearer, or when
  buckets of that dtype were timed but none of that form (`_versus_eager`). Logged once per
  (shape bucket, dtype); `describe()` says which config, why, and the estimate.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import linecache
import logging
import math
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from porter.packs.format import PackError
from porter.packs.format import bucket_distance
from porter.packs.format import sha256_bytes
from porter.packs.format import shape_bucket
from porter.packs.format import tier_rank
from porter.packs.verify import read_verified_pack
from targets.dtypes import dtype_name
from targets.interpreter import triton_interpret
from targets.tiers import Tier

log = logging.getLogger(__name__)

_LIB_NAMESPACE = "kernel_porter"


# At a shape no bucket was ported for, a neighbour's kernel runs only where it beat eager there by
# this much per octave of distance (row width; a row-count octave counts a quarter, as in
# format.bucket_distance): a stated assumption, not a fit. Between ported widths a row-wise kernel
# keeps its efficiency only approximately, and eager's changes too, so a thin margin far away is
# no evidence of a win. bench/suite.py --unseen measures what it gets right.
MARGIN_PER_OCTAVE = 0.10
# A bucket of the same row width lends its config to row counts within this many octaves: a
# row-wise config is tuned for its width; far fewer rows (a grid under the SM count) may have
# been won by a config that spreads one row over more warps.
SAME_WIDTH_ROW_OCTAVES = 2
# The generated modules' default rules (porter/codegen/heuristics.py), which their launchers call
# with config=None; the loader calls them with the device's limits to derive a config.
_DEFAULT_RULES = ("rowwise_default", "columns_default", "flat_default", "matmul_default")


class PackFallbackWarning(UserWarning):
    """The reference runs instead of a packed kernel; the message says why."""


@dataclass(frozen=True)
class Choice:
    """What one call would run: an entry's bucket and config, or the reference.

    bucket is None when no entry fits (the fallback); reference_why is set when an entry fits
    but the reference op runs instead (eager measured or estimated faster at this shape).
    """

    target: str | None
    bucket: dict[str, Any] | None
    interpret: bool
    reason: str  # why this choice (or why the fallback)
    # what the launcher gets: None = its own choice for the shape (porter.codegen.heuristics)
    config: dict[str, Any] | None = None
    basis: str = ""  # where the config came from, in words (describe() says it)
    reference_why: str | None = None  # the entry fits, but the reference op runs: why
    evidence: str = ""  # at a shape with no exact bucket: the kernel-vs-eager estimate
    asked: str = ""  # the inputs' "bucket/dtype"

    @property
    def runs_kernel(self) -> bool:
        return self.bucket is not None and self.reference_why is None

    @property
    def unseen(self) -> bool:
        """The inputs' shape bucket is not one the entry was ported for."""
        return self.bucket is not None and f"{self.bucket['bucket']}/{self.bucket['dtype']}" \
            != self.asked


def ensure_interpreter_ready() -> str | None:
    """Make sure Triton's interpreter can run kernels in this process; None when it can.

    `triton.language` decides at its own import whether its library functions (`tl.sum`,
    `tl.max`, ...) are interpreted: imported without TRITON_INTERPRET=1 they are compiled-only
    JITFunctions, and every interpreted kernel that calls them fails with "Cannot call
    @triton.jit'd outside of the scope of a kernel". So it is imported here with the variable set
    (cross-compiling still works afterwards; the variable is restored).

    Returns:
        None when ready, else the reason the interpreter cannot work in this process.
    """
    if "triton.language" not in sys.modules:
        with triton_interpret(True):
            # triton.language first, for its import-time decision; then Triton's code generator,
            # which imports gluon, which asserts at import that tl's library functions are
            # JITFunctions unless the interpreter is on: import it now, too, or the first
            # cross-compile after this fails with a bare AssertionError.
            import triton.language  # noqa: F401, I001
            import triton.compiler.code_generator  # noqa: F401
        return None
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if isinstance(getattr(tl, "sum", None), JITFunction) and type(tl.sum) is JITFunction:
        return ("triton.language was imported before TRITON_INTERPRET=1 was set, so Triton's "
                "interpreter cannot run kernels in this process; set TRITON_INTERPRET=1 before "
                "importing triton (or import porter first)")
    return None


_module_ids = itertools.count()


@dataclass(frozen=True)
class _Verified:
    """A module executed from verified bytes, and the text pinned for it in linecache."""

    module: ModuleType
    filename: str  # "<porter pack ...>": the module's code objects carry it
    text: str


def _exec_verified(data: bytes, *, label: str, display: str) -> _Verified:
    """Execute verified pack bytes as a fresh module; nothing is read from disk.

    Triton's @jit does not compile the bytecode: it reads the function's source through `inspect`
    (linecache) when it decorates, and under the interpreter again on the first run, and uses
    that text. So the verified text is pinned in linecache under a "<...>" name, which linecache
    never reads from disk, and the code objects carry that name. The module name is unique, since
    triton looks a function's module up in sys.modules and two packs may hold the same file.

    Args:
        data: the file's bytes, already checked against the manifest.
        label: part of the module name (e.g. "rmsnorm_ref").
        display: the pack and file, shown in tracebacks (e.g. "rmsnorm/nvidia/h100/x.py").
    """
    text = importlib.util.decode_source(data)
    filename = f"<porter pack {display} sha256:{sha256_bytes(data)[:12]}>"
    _pin_source(filename, text)
    name = f"_porter_pack_{''.join(c if c.isalnum() else '_' for c in label)}_{next(_module_ids)}"
    module = ModuleType(name)
    sys.modules[name] = module  # triton.jit looks its function's module up while decorating
    try:
        exec(compile(text, filename, "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return _Verified(module, filename, text)


def _pin_source(filename: str, text: str) -> None:
    # mtime None marks an entry that linecache.checkcache never re-validates against a file.
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)


def _width(bucket: str) -> int:
    """A bucket's row width (its last dimension)."""
    return int(bucket.split("x")[-1])


def _hw(target: str) -> Any:
    import hwmodels

    return hwmodels.get(target)


class _Asked(Exception):
    """Raised by a rule stand-in with the config the rule gave: the launcher stops there."""

    def __init__(self, config: dict[str, Any], how: str) -> None:
        super().__init__("config derived")
        self.config = config
        self.how = how  # the rule and the device values it was given


def derive_config(module: ModuleType, hw: Any,
                  inputs: tuple[Any, ...]) -> tuple[dict[str, Any] | None, str]:
    """The config a generated module's own default rule gives `inputs` on device `hw`.

    A generated launcher called with config=None sizes its config with the generator's rule
    (`_DEFAULT_RULES`: rowwise_default, columns_default, flat_default or matmul_default from
    porter/codegen/heuristics.py, embedded in the module) but with a 32-wide warp, 1024 threads,
    an H100's SM count and no TMA, whatever the device. So the launcher is run once on meta
    tensors of the inputs' shapes, strides and dtypes, with the rules swapped for stand-ins that
    call them with `hw`'s warp width, thread limit, SM count and TMA, and stop the launch at the
    first config one gives: the rule sees exactly the sizes the launcher derives from the inputs
    (row count, reduced length, M/N/K), and the kernel form it picks is one this module has.
    The extras `porter.codegen.variants.default_config` adds for a device are added the same
    way: the looped lanes of a non-32-wide warp, fewer matmul stages where shared memory is
    smaller.

    Args:
        module: a module executed from a pack file (never one that runs kernels: its rule is
            swapped while this runs).
        hw: the device's hardware model.
        inputs: the call's inputs (only shapes, strides and dtypes are read).

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
                   "tma": hw.has("tma") and hw.build.backend == "triton-cuda" and eb == 2}

    def stand_in(name: str) -> Any:
        rule = rules[name]
        sig = inspect.signature(rule)

        def ask(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            used = {k: v for k, v in device_args.items() if k in sig.parameters}
            bound.arguments.update(used)
            config = rule(*bound.args, **bound.kwargs)
            if config is None:  # not this rule's case (columns_default): the launcher goes on
                return None
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


def _form(config: dict[str, Any] | None) -> str | None:
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


def _speedup(b: dict[str, Any]) -> float | None:
    """A bucket's measured kernel-vs-eager ratio (eager time / kernel time), or None."""
    n = b.get("numbers") or {}
    s = n.get("speedup_vs_eager")
    if n.get("label") != "measured" or not isinstance(s, (int, float)):
        return None
    return float(s)


def _pct_of_copy(b: dict[str, Any], target: str) -> str:
    """", 93% of copy" for a measured bucket on a device with a measured copy bandwidth."""
    n = b.get("numbers") or {}
    t, nbytes = n.get("time_ms"), n.get("bytes_moved")
    try:
        copy = _hw(target).measured_value("copy_bandwidth_gbps")
    except Exception:  # noqa: BLE001 - a name the hardware models no longer know: no figure
        copy = None
    if not t or not nbytes or not copy:
        return ""
    return f", {nbytes / (t * 1e-3) / 1e9 / copy * 100:.0f}% of copy"


def _versus_eager(entry: dict[str, Any], bucket: str, dtype: str,
                  config: dict[str, Any] | None) -> tuple[str | None, str]:
    """At a shape with no exact bucket: whether the reference op should run instead, by the
    entry's measured kernel-vs-eager ratios at the nearest timed buckets of this dtype.

    The rule (docs/PACKS.md): of the timed buckets of this dtype whose kernel has the form
    `config` has (one block per row or looped: `_form`), take the nearest at or below the row
    width and the nearest at or above it. The estimated ratio at the shape interpolates theirs
    (on a log scale, each weighted by the other's distance: the nearer counts more; one side
    only: its ratio). The kernel runs when the estimate is at least 1 + MARGIN_PER_OCTAVE per
    octave to the nearer of them (distance: format.bucket_distance / 4, so a row-count octave
    counts a quarter); otherwise the reference runs, as it does when buckets of this dtype were
    timed but none of this form. With no timed bucket of this dtype there is no estimate, and
    the kernel runs (its tier already says it was never timed).

    Returns:
        (why the reference runs, or None; a sentence of the evidence for describe()).
    """
    target = entry["target"]
    timed = [b for b in entry["buckets"] if b["dtype"] == dtype and _speedup(b) is not None
             and bucket_distance(b["bucket"], bucket) != float("inf")]
    if not timed:
        return None, (f"no {dtype} bucket of {target} was timed against eager, so there is no "
                      "estimate either way")
    form = _form(config)
    same = [b for b in timed if form is None or _form(b.get("config")) in (None, form)]
    if not same:
        return (f"this shape needs the {form} form of the kernel, and no {dtype} bucket of "
                f"{target} timed that form against eager (timed: "
                f"{', '.join(b['bucket'] for b in timed)}, another form)"), ""
    width = _width(bucket)
    sides = ([b for b in same if _width(b["bucket"]) <= width],
             [b for b in same if _width(b["bucket"]) >= width])
    near = list({id(b): (b, bucket_distance(b["bucket"], bucket) / 4.0) for side in sides
                 if side for b in [min(side, key=lambda x: bucket_distance(x["bucket"], bucket))]
                 }.values())
    if len(near) == 2 and near[0][1] + near[1][1] > 0:
        (b1, d1), (b2, d2) = near
        estimate = math.exp((d2 * math.log(_speedup(b1) or 1e-9) +
                             d1 * math.log(_speedup(b2) or 1e-9)) / (d1 + d2))
    else:
        estimate = _speedup(near[0][0]) or 0.0
    octaves = min(d for _, d in near)
    need = 1.0 + MARGIN_PER_OCTAVE * octaves
    evidence = ("timed neighbours: " + "; ".join(
        f"{b['bucket']} ran {_speedup(b):.2f}x eager{_pct_of_copy(b, target)}, {d:.2f} octaves "
        "away" for b, d in near) + f"; estimate here {estimate:.2f}x eager, needs >= "
        f"{need:.2f}x (1 + {MARGIN_PER_OCTAVE:.2f} per octave to the nearer)")
    if estimate < need:
        return f"estimated slower than eager here ({evidence})", evidence
    return None, evidence


class _ReferenceModule:
    """The reference op behind a generated module's `launch` interface (out contract)."""

    def __init__(self, reference: Any) -> None:
        self.reference = reference

    def launch(self, *inputs: Any, out: Any = None, config: Any = None) -> Any:
        result = self.reference(*inputs)
        if out is None:
            return result
        if isinstance(out, torch.Tensor):
            return out.copy_(result)
        for o, r in zip(out, result, strict=True):
            o.copy_(r)
        return out


class PackedOp:
    """A packed op: call it like the reference; `describe()` says what would run."""

    def __init__(self, path: str | Path, *, device: str | None = None,
                 expect_sha256: str | None = None) -> None:
        """See `load_pack`."""
        # The whole pack is checked before anything runs, and every file is read here, once: a
        # tampered pack fails at load time naming the file, not in the middle of a model, and
        # what runs later is these bytes, whatever happens to the files afterwards.
        pack = read_verified_pack(path, expect_sha256=expect_sha256)
        self.path = pack.path
        self.manifest = pack.manifest
        self.manifest_sha256 = pack.manifest_sha256
        self._sources: dict[str, bytes] = pack.files
        self.op: str = self.manifest["op"]
        self._warned: set[str] = set()
        self._modules: dict[tuple[str, bool], _Verified] = {}
        # (device, shape, dtype) -> (module, config) already chosen for a compiled (GPU) call
        self._resolved: dict[tuple[Any, ...], tuple[ModuleType, Any]] = {}
        self._metal: dict[str, Any] = {}  # pack file -> porter.mps.MetalRunner
        # (file sha256, target, input shapes) -> (config derived for them, how): choose() asks
        # the module's rule once per shape, not once per call
        self._derived_configs: dict[tuple[Any, ...], tuple[dict[str, Any] | None, str]] = {}
        self._probes: dict[str, ModuleType] = {}  # file sha256 -> its module, for derive_config
        self._lock = threading.Lock()
        self._gpu_target, self._detect_reason = self._resolve_device(device)
        self._cpu_target = device if device and self._entry(device) is not None else None
        self.reference = self._load_reference()

    # -- device and entry selection -------------------------------------------------------
    def _resolve_device(self, device: str | None) -> tuple[str | None, str]:
        if device is not None and device.lower() != "cpu":
            import hwmodels

            return hwmodels.get(device).name, f"device={device!r} given"
        if device is not None:
            return None, "device='cpu' given"
        import hwmodels

        det = hwmodels.detect()
        if det.model is None:
            return None, f"no known GPU detected ({det.reason})"
        return det.model.name, f"detected {det.model.name} via {det.via}"

    def _entry(self, target: str) -> dict[str, Any] | None:
        return next((e for e in self.manifest["entries"] if e["target"] == target), None)

    @staticmethod
    def _cpu_eligible(entry: dict[str, Any]) -> bool:
        return entry.get("backend", "").startswith("triton") and any(
            tier_rank(b.get("tier", "")) >= tier_rank(Tier.INTERPRETED) for b in entry["buckets"]
        )

    @staticmethod
    def _pick_bucket(entry: dict[str, Any], bucket: str, dtype: str) -> dict[str, Any] | None:
        """The bucket whose file (and tier) serves `bucket`: the exact one, else the nearest of
        the same dtype and rank, never a narrower row before a wider one."""
        same_dtype = [b for b in entry["buckets"] if b["dtype"] == dtype]
        exact = [b for b in same_dtype if b["bucket"] == bucket]
        if exact:
            return exact[0]
        # Nearest first, but never a narrower row than asked for before a wider one: a config
        # tuned for narrower rows may hold less than a whole row (single-pass BLOCK_N).
        width = _width(bucket)
        near = sorted(same_dtype, key=lambda b: (_width(b["bucket"]) < width,
                                                 bucket_distance(b["bucket"], bucket)))
        if near and bucket_distance(near[0]["bucket"], bucket) != float("inf"):
            return near[0]
        return None

    @staticmethod
    def _same_width(entry: dict[str, Any], bucket: str, dtype: str) -> dict[str, Any] | None:
        """A bucket of the same dtype, rank and row width whose row count is within
        SAME_WIDTH_ROW_OCTAVES of `bucket`'s (the nearest), or None."""
        fits = [b for b in entry["buckets"] if b["dtype"] == dtype
                and _width(b["bucket"]) == _width(bucket)
                and bucket_distance(b["bucket"], bucket) <= SAME_WIDTH_ROW_OCTAVES]
        return min(fits, key=lambda b: bucket_distance(b["bucket"], bucket), default=None)

    def choose(self, *inputs: Any) -> Choice:
        """What a call with these inputs would run, and why. Never raises for a bad fit."""
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        if first is None:
            return Choice(None, None, False,
                          "no tensor input to pick a device, bucket and dtype from")
        dtype = dtype_name(first.dtype)
        bucket = shape_bucket(first.shape)
        asked = f"{bucket}/{dtype}"
        on_cpu = first.device.type == "cpu"
        if on_cpu and (why_not := ensure_interpreter_ready()) is not None:
            return Choice(None, None, False, why_not, asked=asked)
        if on_cpu:
            targets = [self._cpu_target] if self._cpu_target else [
                e["target"] for e in self.manifest["entries"] if self._cpu_eligible(e)]
            where = "CPU (Triton interpreter)"
        else:
            if self._gpu_target is None:
                return Choice(None, None, False,
                              f"inputs are on {first.device} but {self._detect_reason}",
                              asked=asked)
            targets = [self._gpu_target]
            where = self._gpu_target
        if not targets:
            return Choice(None, None, False,
                          f"no entry of {self.op} reached the interpreted tier, so none may run "
                          f"on {where}", asked=asked)
        reasons = []
        for target in targets:
            entry = self._entry(target)
            if entry is None:
                reasons.append(f"the pack has no entry for {target}")
                continue
            exact = next((x for x in entry["buckets"]
                          if x["dtype"] == dtype and x["bucket"] == bucket), None)
            same_width = None if exact else self._same_width(entry, bucket, dtype)
            b = exact or same_width or self._pick_bucket(entry, bucket, dtype)
            if b is None:
                have = sorted({f"{x['bucket']}/{x['dtype']}" for x in entry["buckets"]})
                reasons.append(f"{target} has no config for {dtype} at bucket {bucket} "
                               f"(has {', '.join(have) or 'none'})")
                continue
            if tier_rank(b["tier"]) < tier_rank(Tier.INTERPRETED):
                reasons.append(f"{target} {b['bucket']}/{dtype} only reached tier {b['tier']!r}: "
                               "its correctness was never checked, so it does not run")
                continue
            config = b.get("config") or None
            if exact is not None:
                reason = f"{target} entry, exact bucket {b['bucket']}/{dtype}, tier {b['tier']}"
                prefer = (b.get("numbers") or {}).get("prefer_reference")
                return Choice(target, b, on_cpu, reason, config, "the bucket's own (tuned here)",
                              reference_why=None if on_cpu or not prefer else
                              f"measured on this device when the pack was made: {prefer}",
                              asked=asked)
            reason = (f"{target} entry, no exact bucket for {asked}; kernel file of "
                      f"{b['bucket']}/{dtype}, tier {b['tier']}")
            if same_width is not None:
                basis = (f"bucket {b['bucket']}'s: tuned for rows this wide (row count within "
                         f"{2 ** SAME_WIDTH_ROW_OCTAVES}x)")
            elif b["file"].endswith(".metal"):
                basis = (f"nearest bucket {b['bucket']}'s (a Metal entry has no rules to "
                         "derive from)")
            else:
                derived, how = self._derived(target, b, inputs, dtype)
                if derived is not None:
                    config = {**derived, "dtype": dtype}
                    basis = (f"derived for this shape by the module's own rule ({how}) for "
                             f"{target}: a neighbour's config was tuned for another row width")
                else:
                    # e.g. a user's kernel: its launcher sizes blocks itself, and the bucket's
                    # launch options (warps, stages) held up at nearby shapes (issue 31)
                    basis = f"nearest bucket {b['bucket']}'s: {how}"
            reference_why, evidence = (None, "") if on_cpu else _versus_eager(
                entry, bucket, dtype, config)
            return Choice(target, b, on_cpu, reason, config, basis, reference_why, evidence,
                          asked)
        return Choice(None, None, False, "; ".join(reasons), asked=asked)

    def _derived(self, target: str, b: dict[str, Any], inputs: tuple[Any, ...],
                 dtype: str) -> tuple[dict[str, Any] | None, str]:
        """`derive_config` for bucket `b`'s file on `target` at these inputs, asked once per
        (file, target, input shapes and dtypes)."""
        rel = b["file"]
        shapes = tuple((tuple(t.shape), tuple(t.stride()), t.dtype) if isinstance(t, torch.Tensor)
                       else t for t in inputs)
        # the manifest's sha256 of the file (verified at load): files with the same bytes share
        key = (self.manifest["files"][rel], target, shapes)
        with self._lock:
            if key not in self._derived_configs:
                try:
                    hw = _hw(target)
                except Exception as exc:  # noqa: BLE001 - a target the models no longer know
                    self._derived_configs[key] = (None, f"no hardware model: {exc}")
                else:
                    self._derived_configs[key] = derive_config(
                        self._probe_module(rel), hw, inputs)
            return self._derived_configs[key]

    def _probe_module(self, rel: str) -> ModuleType:
        """A private copy of pack file `rel`'s module, only ever asked for configs (its rule
        functions are swapped while asking, so it is never the one that runs kernels)."""
        data = self._sources[rel]
        digest = self.manifest["files"][rel]
        if digest not in self._probes:
            with triton_interpret(True):  # decorating only: nothing is compiled or launched
                self._probes[digest] = _exec_verified(
                    data, label=f"{self.op}_{Path(rel).stem}_rules",
                    display=f"{self.op}/{rel}").module
        return self._probes[digest]

    def describe(self, *inputs: Any) -> str:
        """One paragraph: the device, and which entry/config/tier would run (or the fallback).

        With no inputs, lists what the pack holds for the detected device.
        """
        lines = [f"pack {self.op} at {self.path}: {self._detect_reason}"]
        if inputs:
            c = self.choose(*inputs)
            if c.bucket is None:
                lines.append(f"runs the reference (fallback): {c.reason}")
            elif c.reference_why is not None:
                lines.append(f"runs the reference op instead of the kernel ({c.reason}): "
                             f"{c.reference_why}")
            else:
                mode = (" under the Triton INTERPRETER on CPU (correct, not fast)" if c.interpret
                        else "")
                if c.bucket["file"].endswith(".metal"):
                    mode = (" on the CPU Metal executor (correct, not fast)" if c.interpret
                            else " through PyTorch's MPS backend")
                lines.append(f"runs {c.reason}{mode}; config {c.config}: {c.basis}; "
                             f"file {c.bucket['file']}")
            if c.evidence:
                lines.append(f"kernel vs eager at {c.asked}: {c.evidence}")
            return "\n".join(lines)
        for e in self.manifest["entries"]:
            mark = "*" if e["target"] == self._gpu_target else " "
            lines.append(f"{mark} {e['target']:8s} {e['backend']:12s} tier {e['tier']:11s} "
                         f"{len(e['buckets'])} bucket(s)")
        return "\n".join(lines)

    # -- running --------------------------------------------------------------------------
    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        # Hot path: a GPU call whose device, shape and dtype were already resolved goes straight
        # to the chosen kernel (choosing costs tens of microseconds of Python per call).
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        key = None if first is None else (first.device, tuple(first.shape), first.dtype)
        fast = self._resolved.get(key) if key is not None else None
        if fast is not None:
            module, config = fast
            return module.launch(*inputs, out=out, config=config)
        choice = self.choose(*inputs)
        if choice.bucket is None:
            self._warn_once(choice.reason)
            result = self.reference(*inputs)
            if out is not None:
                out.copy_(result)
                return out
            return result
        if choice.bucket["file"].endswith(".metal"):
            return self._run_metal(choice, inputs, out)
        if choice.reference_why is not None:
            # Measured (exact bucket) or estimated from the neighbours' measurements (no exact
            # bucket): eager is faster here, so the pack runs it; said once per bucket and dtype.
            self._log_once(f"reference:{choice.target}:{choice.asked}", "%s %s on %s: running "
                           "the reference op: %s", self.op, choice.asked, choice.target,
                           choice.reference_why)
            if key is not None:
                self._resolved[key] = (_ReferenceModule(self.reference), None)
            return _ReferenceModule(self.reference).launch(*inputs, out=out)
        if choice.unseen:
            self._log_once(f"unseen:{choice.target}:{choice.asked}", "%s %s on %s: %s; config "
                           "%s: %s%s", self.op, choice.asked, choice.target, choice.reason,
                           choice.config, choice.basis,
                           f"; {choice.evidence}" if choice.evidence else "",
                           level=logging.INFO)
        if choice.interpret:
            self._log_once("interp", "%s: running the %s kernel under the Triton INTERPRETER on "
                           "CPU: correct, but not fast (a GPU runs it for real)",
                           self.op, choice.target)
        elif tier_rank(choice.bucket["tier"]) < tier_rank(Tier.MEASURED):
            self._log_once(f"unmeasured:{choice.target}",
                           "%s: the %s kernel passed the correctness stages under the interpreter "
                           "and compiled for this arch, but was not timed on this device",
                           self.op, choice.target)
        return self._launch(choice, inputs, out, key)

    def force_kernel(self, *inputs: Any, out: Any = None) -> Any:
        """Run the kernel `choose()` picks for these inputs even where the reference op would
        run instead (eager measured or estimated faster there): for benchmarks that check that
        decision (bench/suite.py --unseen). Not cached; a Metal entry is not run this way.

        Raises:
            ValueError: no Triton entry fits these inputs (the reference would run as the
                fallback), with the reason.
        """
        choice = self.choose(*inputs)
        if choice.bucket is None or choice.bucket["file"].endswith(".metal"):
            raise ValueError(f"{self.op}: no Triton kernel of the pack fits these inputs: "
                             f"{choice.reason}")
        return self._launch(choice, inputs, out, None)

    def _launch(self, choice: Choice, inputs: tuple[Any, ...], out: Any,
                key: tuple[Any, ...] | None) -> Any:
        """Run choice's kernel; a GPU call's (module, config) is kept under `key`."""
        assert choice.bucket is not None
        module = self._module(choice.bucket["file"], choice.interpret)
        config = choice.config
        with triton_interpret(True if choice.interpret else None):
            try:
                result = module.launch(*inputs, out=out, config=config)
                if not choice.interpret and key is not None:
                    self._resolved[key] = (module, config)
                return result
            except ValueError as exc:
                # The generated launcher validates a config against the inputs before launching
                # (e.g. a one-block row needs BLOCK_N >= n_cols, and a nearest-bucket config may
                # not cover a wider row): then the same verified body runs with the launcher's
                # own size-derived config, named in the log (derived for the device the way the
                # launcher's config=None would), since it is not the config the port timed.
                refit, how = self._derived(choice.target or "", choice.bucket, inputs,
                                           choice.asked.rsplit("/", 1)[-1])
                if refit is not None:
                    refit = {**refit, "dtype": choice.asked.rsplit("/", 1)[-1]}
                    try:
                        result = module.launch(*inputs, out=out, config=refit)
                    except ValueError:
                        refit, how = None, "the derived config did not fit either"
                if refit is None:
                    result = module.launch(*inputs, out=out, config=None)
                self._log_once(
                    f"refit:{choice.bucket['file']}:{choice.asked}",
                    "%s %s on %s: the bucket's config %s does not fit these inputs (%s); ran %s "
                    "instead (%s): not the config the port %s for bucket %s, so its speed here "
                    "was never measured and may be much slower", self.op, choice.asked,
                    choice.target, config, exc,
                    refit if refit is not None else "the launcher's own default config", how,
                    "timed" if _speedup(choice.bucket) is not None else "checked",
                    choice.bucket["bucket"])
                if not choice.interpret and key is not None:
                    self._resolved[key] = (module, refit)
                return result

    def _run_metal(self, choice: Choice, inputs: tuple[Any, ...], out: Any) -> Any:
        """A Metal entry: through MPS on a Mac, the CPU executor on a CPU (porter.mps), from the
        bytes verified at load time; the reference where neither can run it (said once)."""
        from porter import mps

        assert choice.bucket is not None
        rel = choice.bucket["file"]
        with self._lock:
            if rel not in self._metal:
                self._metal[rel] = mps.MetalRunner(self._sources[rel].decode(),
                                                   label=f"{self.op}/{rel}")
            runner = self._metal[rel]
        why = runner.unavailable(inputs)
        if why is not None:
            self._warn_once(f"{choice.target} Metal entry: {why}")
            result = self.reference(*inputs)
            return result if out is None else _ReferenceModule(lambda *a: result).launch(
                *inputs, out=out)
        self._log_once(f"metal:{choice.target}", "%s: running the %s Metal kernel %s", self.op,
                       choice.target, "through MPS" if inputs and any(
                           isinstance(t, torch.Tensor) and t.device.type == "mps"
                           for t in inputs) else "on the CPU Metal executor (correct, not fast)")
        return runner(inputs, out, self.reference)

    def _module(self, rel: str, interpret: bool) -> ModuleType:
        """The module of pack file `rel`, executed from the bytes verified at load time."""
        key = (rel, interpret)
        with self._lock:
            if key not in self._modules:
                # Triton's @jit decides at decoration whether it interprets: "0" keeps a GPU
                # module compiled even when the user's environment says otherwise.
                with triton_interpret(interpret):
                    self._modules[key] = _exec_verified(
                        self._sources[rel], label=f"{self.op}_{Path(rel).stem}",
                        display=f"{self.op}/{rel}")
            verified = self._modules[key]
        # Pinned again in case something cleared linecache since: the interpreter reads the
        # kernel's text on its first run, and it must find the verified text, not nothing.
        if verified.filename not in linecache.cache:
            _pin_source(verified.filename, verified.text)
        return verified.module

    def _load_reference(self) -> Any:
        ref = self.manifest["reference"]
        data = self._sources[ref["file"]]
        function = ref.get("function")
        if function:
            module = _exec_verified(data, label=f"{self.op}_ref",
                                    display=f"{self.op}/{ref['file']}").module
            if not callable(getattr(module, function, None)):
                raise PackError(f"{self.path / ref['file']}: no function {function!r}, which the "
                                "manifest's reference.function names")
            return getattr(module, function)
        from porter.spec import load_spec

        # A KernelBench file goes through load_spec, which reads its file by path: give it the
        # verified bytes in a private folder, never the pack's file again.
        with tempfile.TemporaryDirectory(prefix="porter_pack_ref_") as tmp:
            copy = Path(tmp) / Path(ref["file"]).name
            copy.write_bytes(data)
            return load_spec(copy).reference

    def _warn_once(self, reason: str) -> None:
        if reason in self._warned:
            return
        self._warned.add(reason)
        warnings.warn(f"{self.op}: running the PyTorch reference instead of a packed kernel: "
                      f"{reason}", PackFallbackWarning, stacklevel=3)

    def _log_once(self, key: str, msg: str, *args: Any, level: int = logging.WARNING) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.log(level, msg, *args)

    # -- torch.library --------------------------------------------------------------------
    def register_custom_op(self) -> Any:
        """Register `kernel_porter::<op>` as a torch.library custom op; returns the op.

        The fake (meta) implementation runs the reference on fake tensors, so shapes and dtypes
        propagate inside torch.compile without running a kernel. The op takes the inputs named
        in the manifest's `signature` and returns one tensor.
        """
        kinds = self.manifest.get("signature") or []
        if not kinds:
            raise ValueError(f"{self.path}: the manifest has no input signature; "
                             "cannot register a custom op")
        types = {"tensor": torch.Tensor, "float": float, "int": int, "bool": bool}
        params = [
            inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              annotation=types[kind])
            for i, kind in enumerate(kinds)
        ]
        sig = inspect.Signature(params, return_annotation=torch.Tensor)

        def impl(*args: Any) -> torch.Tensor:
            return self(*args)

        def fake(*args: Any) -> torch.Tensor:
            return self.reference(*args)

        impl.__signature__ = sig  # type: ignore[attr-defined]
        fake.__signature__ = sig  # type: ignore[attr-defined]
        # A second pack of the same op in one process gets its own name (custom ops are global).
        name = self.op
        n = 1
        while hasattr(getattr(torch.ops, _LIB_NAMESPACE), name):
            n += 1
            name = f"{self.op}_{n}"
        op = torch.library.custom_op(f"{_LIB_NAMESPACE}::{name}", impl, mutates_args=())
        op.register_fake(fake)
        self.custom_op = op
        return op


def load_pack(
    path: str | Path, *, device: str | None = None, register_custom_op: bool = False,
    expect_sha256: str | None = None,
) -> PackedOp:
    """Load a pack written by `porter port` and return a callable that runs the right kernel.

    Loading executes the pack's Python (its reference and, on the first call, a kernel module),
    like installing a package: check a pack you received with `porter pack verify PACK
    --expect-sha256 HASH`, or pass `expect_sha256` here.

    Args:
        path: the pack folder (`packs/<op>/`).
        device: a hardware-model name ("h100", "mi300x") to use that entry instead of detecting
            the device, or "cpu" for no GPU; None detects with `hwmodels.detect()`.
        register_custom_op: also register `torch.ops.kernel_porter.<op>` (usable inside
            torch.compile); the returned object's `.custom_op` holds it.
        expect_sha256: the sha256 the pack's manifest.yaml must have (`porter pack show` prints
            it); None checks the files against the manifest only.

    Returns:
        A `PackedOp`: `op(*inputs)` or `op(*inputs, out=out)`; `op.describe(*inputs)`.

    Raises:
        PackError: the folder is not a pack / the manifest is malformed.
        PackIntegrityError: the pack is tampered, and refused whole: any file differs from its
            manifest hash or is missing, a manifest path leads outside the pack
            (`PackPathError`), or the manifest is not the one `expect_sha256` pins.
    """
    packed = PackedOp(path, device=device, expect_sha256=expect_sha256)
    if register_custom_op:
        packed.register_custom_op()
    return packed
