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
when it is loaded (porter.packs.format's integrity rule): every manifest path must lie inside the
pack and every file must have the manifest's sha256 (optionally, the manifest itself a pinned
sha256). A pack that fails is *tampered* and refused with `PackIntegrityError` naming the file,
even when the file belongs to another device's entry: a changed file is an attack or a
corruption, never a reason to fall back to the reference. Each file is read once; its verified
bytes are what runs (compiled into a fresh module, and the text Triton reads through `inspect` is
the same bytes), so a file changed on disk after loading is never used.

The reference runs instead of a kernel only when the (intact) pack has no usable entry for the
call: none for the device, none that reached the interpreted tier, or no config for the dtype or
shape. Each such fallback is announced by exactly one `PackFallbackWarning` per reason.

At a shape with no exact bucket the config is lent or derived, and the reference op may run
instead where eager is estimated faster: porter.packs.unseen says how.
"""

from __future__ import annotations

import linecache
import logging
import tempfile
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from porter.packs import bound
from porter.packs import custom_op
from porter.packs import leading
from porter.packs import tuning
from porter.packs.choice import Choice
from porter.packs.choice import cpu_eligible
from porter.packs.choice import pick_bucket
from porter.packs.choice import same_width_bucket
from porter.packs.format import PackError
from porter.packs.format import bucket_distance
from porter.packs.format import shape_bucket
from porter.packs.format import tier_rank
from porter.packs.modules import ReferenceModule
from porter.packs.modules import Verified
from porter.packs.modules import ensure_interpreter_ready
from porter.packs.modules import exec_verified
from porter.packs.modules import pin_source
from porter.packs.tuning import shape_key as shape_key_text
from porter.packs.unseen import MARGIN_PER_OCTAVE  # noqa: F401 - importable from here as before
from porter.packs.unseen import SAME_WIDTH_ROW_OCTAVES
from porter.packs.unseen import derive_config
from porter.packs.unseen import hw_model
from porter.packs.unseen import speedup
from porter.packs.unseen import versus_eager
from porter.packs.verify import read_verified_pack
from targets.dtypes import dtype_name
from targets.interpreter import triton_interpret
from targets.tiers import Tier

log = logging.getLogger(__name__)


class PackFallbackWarning(UserWarning):
    """The reference runs instead of a packed kernel; the message says why."""


class PackedOp:
    """A packed op: call it like the reference; `describe()` says what would run."""

    def __init__(self, path: str | Path, *, device: str | None = None,
                 expect_sha256: str | None = None, tune: str | None = None,
                 tuning_cache: str | Path | bool | None = None) -> None:
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
        self._modules: dict[tuple[str, bool], Verified] = {}
        # call_key -> what runs that call from now on: a bound launch, the resolved launcher, a
        # Metal runner or the reference (GPU and MPS calls; CPU calls are chosen every time)
        self._fast: dict[tuple[Any, ...], Any] = {}
        # what ran at each input form resolved so far ("kernel: ..." or "reference: why"), for
        # reports that must not call a fallback a replacement (porter.patch)
        self.outcomes: dict[str, str] = {}
        self._metal: dict[str, Any] = {}  # pack file -> porter.mps.MetalRunner
        # (file sha256, target, input shapes) -> (config derived for them, how): choose() asks
        # the module's rule once per shape, not once per call
        self._derived_configs: dict[tuple[Any, ...], tuple[dict[str, Any] | None, str]] = {}
        self._probes: dict[str, ModuleType] = {}  # file sha256 -> its module, for derive_config
        self._lock = threading.Lock()
        self._gpu_target, self._detect_reason = self._resolve_device(device)
        self._cpu_target = device if device and self._entry(device) is not None else None
        self._reference_module: ModuleType | None = None
        self._spec: Any = None  # a KernelBench pack's spec (its inputs, for tuning)
        self.reference = self._load_reference()
        if tune not in (None, "first-call"):
            raise ValueError(f"tune={tune!r}: None (use what the tuning cache holds) or "
                             "'first-call' (tune a shape with no bucket on its first call)")
        self._tune_mode = tune
        # shapes tuned on this device (porter.packs.tuning); False: none read or written
        self.tuning: tuning.TuningCache | None = None
        if self._gpu_target is not None and tuning_cache is not False:
            self.tuning = tuning.TuningCache(
                None if tuning_cache in (None, True) else tuning_cache,  # type: ignore[arg-type]
                self.manifest_sha256, self._gpu_target, self.manifest["files"])

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

    def choose(self, *inputs: Any) -> Choice:
        """What a call with these inputs would run, and why. Never raises for a bad fit."""
        merged = self._merged(inputs, None)
        if isinstance(merged, str):
            return Choice(None, None, False, merged)
        if merged is not None:
            inputs = merged.inputs  # what the kernel is given: the rows merged
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
                e["target"] for e in self.manifest["entries"] if cpu_eligible(e)]
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
            tuned = None if on_cpu or exact is not None or self.tuning is None else \
                self.tuning.get(tuple(first.shape), dtype)
            if tuned is not None:
                return self._tuned_choice(target, entry, tuned, asked)
            same_width = None if exact else same_width_bucket(entry, bucket, dtype)
            b = exact or same_width or pick_bucket(entry, bucket, dtype)
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
                ruled = None if derived is not None else self._nearest_with_rules(
                    target, entry, b, bucket, inputs, dtype)
                if ruled is not None:
                    # the nearest bucket's kernel (a user's) cannot size itself for this shape
                    # and a generated module of the pack can: the user's kernel ran at 71% of
                    # copy at a width of 3000 where the generated one ran at 108% (issue 31)
                    nearest, (b, (derived, how)) = b, ruled
                    reason = (f"{target} entry, no exact bucket for {asked}; kernel file of "
                              f"{b['bucket']}/{dtype}, tier {b['tier']}")
                    config = {**derived, "dtype": dtype}
                    basis = (f"derived for this shape by the rule ({how}) of bucket "
                             f"{b['bucket']}'s generated module for {target}: the nearest "
                             f"bucket {nearest['bucket']}'s kernel has no rule to size it")
                elif derived is not None:
                    config = {**derived, "dtype": dtype}
                    basis = (f"derived for this shape by the module's own rule ({how}) for "
                             f"{target}: a neighbour's config was tuned for another row width")
                else:
                    # e.g. a user's kernel: its launcher sizes blocks itself, and the bucket's
                    # launch options (warps, stages) held up at nearby shapes (issue 31)
                    basis = f"nearest bucket {b['bucket']}'s: {how}"
            reference_why, evidence = (None, "") if on_cpu else versus_eager(
                entry, bucket, dtype, config, int(first.shape[-1]) if first.dim() else None,
                self._shifted(b, config))
            return Choice(target, b, on_cpu, reason, config, basis, reference_why, evidence,
                          asked)
        return Choice(None, None, False, "; ".join(reasons), asked=asked)

    def _tuned_choice(self, target: str, entry: dict[str, Any], tuned: tuning.Tuned,
                      asked: str) -> Choice:
        """What a shape tuned on this device runs (the tuning cache's entry)."""
        assert self.tuning is not None
        where = f"tuning cache {self.tuning.path}"
        if tuned.runs == "reference":
            b = next((x for x in entry["buckets"] if x["dtype"] == tuned.dtype),
                     entry["buckets"][0])
            return Choice(target, b, False, f"{target} entry, shape tuned on this device",
                          None, where, reference_why=f"{tuned.describe()}: eager is faster",
                          asked=asked)
        b = next(x for x in entry["buckets"] if x["file"] == tuned.file)
        return Choice(target, b, False, f"{target} entry, shape tuned on this device "
                      f"({tuned.shape}/{tuned.dtype}); kernel file of {b['bucket']}/{b['dtype']}, "
                      f"tier {b['tier']}", tuned.config, f"{tuned.describe()} ({where})",
                      asked=asked)

    def tune(self, shapes: list[tuple[int, ...]], dtypes: list[str] | None = None, *,
             max_candidates: int = tuning.DEFAULT_MAX_CANDIDATES,
             budget_s: float = tuning.DEFAULT_BUDGET_S,
             progress: Any = None) -> list[tuning.Tuned]:
        """Tune these shapes (the spec's shape terms: the first input's rows x width) on this
        GPU and keep them in the tuning cache (porter.packs.tuning); returns the entries.

        Raises:
            TuningError: no GPU, no entry for it, a dtype the entry has no bucket of, or no
                candidate passed its check at a shape.
        """
        import torch

        if self._gpu_target is None or self.tuning is None or not torch.cuda.is_available():
            raise tuning.TuningError(f"{self.op}: tuning runs on a GPU of the pack's targets: "
                                     f"{self._detect_reason}")
        entry = self._entry(self._gpu_target)
        if entry is None:
            raise tuning.TuningError(f"{self.op}: the pack has no entry for {self._gpu_target}")
        names = dtypes or sorted({b["dtype"] for b in entry["buckets"]})
        problem = self._problem()
        hw = hw_model(self._gpu_target)
        done = []
        for shape in shapes:
            for dname in names:
                done.append(self._tune_one(entry, problem, hw, tuple(int(d) for d in shape),
                                           dname, max_candidates, budget_s, progress))
        return done

    def _tune_one(self, entry: dict[str, Any], problem: Any, hw: Any, shape: tuple[int, ...],
                  dname: str, max_candidates: int, budget_s: float, progress: Any
                  ) -> tuning.Tuned:
        import torch

        from harness import env_info
        from targets.dtypes import torch_dtype

        assert self.tuning is not None and self._gpu_target is not None
        dtype = torch_dtype(dname)
        same = [b for b in entry["buckets"] if b["dtype"] == dname]
        if not same:
            raise tuning.TuningError(f"{self.op}: the {self._gpu_target} entry has no {dname} "
                                     "bucket to tune from")
        example = tuple(problem.make_inputs(shape, dtype, torch.device("meta"),
                                            torch.Generator()))
        bucket = shape_bucket(example[0].shape) if example else ""
        near = sorted(same, key=lambda b: bucket_distance(b["bucket"], bucket))
        rule_file = next((b["file"] for b in near if not b["file"].endswith(".metal")), None)

        def rules(rel: str, form: str | None) -> tuple[dict[str, Any] | None, str]:
            return derive_config(self._probe_module(rel), hw, example, form=form)

        cands = tuning.candidates(rules, [(b["file"], b.get("config") or {}, b["bucket"])
                                          for b in near[:3]], rule_file, dname, max_candidates)
        say = progress or (lambda line: log.info("%s", line))
        say(f"{self.op} {shape_key_text(shape, dname)} on {self._gpu_target}: "
            f"{len(cands)} candidate(s), budget {budget_s:g} s")
        won, numbers = tuning.tune_shape(problem, self.reference, shape, dtype, cands,
                                         lambda rel: self._module(rel, False), hw=hw,
                                         budget_s=budget_s, progress=say)
        tuned = tuning.Tuned(
            shape, dname, "kernel" if won else "reference", won.file if won else None,
            self.manifest["files"][won.file] if won else None, won.config if won else None,
            numbers, tuning.now(),
            {k: v for k, v in env_info.versions().items() if k in ("torch", "triton")})
        self.tuning.put(tuned)
        self._fast.clear()  # calls resolved before are chosen again, with the tuned entry
        return tuned

    def _problem(self) -> Any:
        """The op as the judge needs it (reference and input maker), from the pack's
        reference file: a spec's own `make_inputs`, or a KernelBench file's inputs."""
        if self._spec is not None:
            return self._spec.problem()
        module = self._reference_module
        maker = getattr(module, "make_inputs", None)
        if not callable(maker):
            raise tuning.TuningError(f"{self.path / 'reference.py'} has no make_inputs, so the "
                                     "tuner has no inputs to check and time candidates on")
        from harness.problem import Problem

        return Problem(name=self.op, reference=self.reference, make_inputs=maker,
                       smoke_shape=(1,), sweep_shapes=((1,),),
                       bytes_moved=getattr(module, "BYTES", None),
                       flops=getattr(module, "FLOPS", None))

    def _nearest_with_rules(self, target: str, entry: dict[str, Any], skip: dict[str, Any],
                            bucket: str, inputs: tuple[Any, ...], dtype: str
                            ) -> tuple[dict[str, Any], tuple[dict[str, Any], str]] | None:
        """(bucket, (config, how)): the nearest other bucket of `dtype` (checked at least at
        the interpreted tier) whose file is not `skip`'s and derives a config for these inputs,
        with that config; None where none does."""
        others = [x for x in entry["buckets"] if x["dtype"] == dtype and x["file"] != skip["file"]
                  and not x["file"].endswith(".metal")
                  and tier_rank(x["tier"]) >= tier_rank(Tier.INTERPRETED)]
        for x in sorted(others, key=lambda x: bucket_distance(x["bucket"], bucket)):
            derived, how = self._derived(target, x, inputs, dtype)
            if derived is not None:
                return x, (derived, how)
        return None

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
                    hw = hw_model(target)
                except Exception as exc:  # noqa: BLE001 - a target the models no longer know
                    self._derived_configs[key] = (None, f"no hardware model: {exc}")
                else:
                    self._derived_configs[key] = derive_config(
                        self._probe_module(rel), hw, inputs)
            return self._derived_configs[key]

    def _shifted(self, b: dict[str, Any], config: dict[str, Any] | None) -> bool:
        """Whether bucket `b`'s generated module runs `config` with blocks from the rows'
        16-byte boundaries where rows are not aligned (its SHIFT_STRATEGIES)."""
        if not config or b["file"].endswith(".metal"):
            return False
        with self._lock:
            module = self._probe_module(b["file"])
        return config.get("strategy") in getattr(module, "SHIFT_STRATEGIES", ())

    def _probe_module(self, rel: str) -> ModuleType:
        """A private copy of pack file `rel`'s module, only ever asked for configs (its rule
        functions are swapped while asking, so it is never the one that runs kernels)."""
        data = self._sources[rel]
        digest = self.manifest["files"][rel]
        if digest not in self._probes:
            with triton_interpret(True):  # decorating only: nothing is compiled or launched
                self._probes[digest] = exec_verified(
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
            n = (c.bucket or {}).get("numbers") or {}
            if n.get("time_ms") is not None:
                call = (f", call {n['call_us']:.1f} us back to back (eager "
                        f"{n['eager_call_us']:.1f})" if n.get("call_us") is not None
                        else ", call time not measured")
                lines.append(f"bucket {c.bucket['bucket']}: device {n['time_ms'] * 1e3:.1f} us "
                             f"({n.get('label', '?')}){call}")
            lines.append(self._call_path(inputs))
            return "\n".join(lines)
        for e in self.manifest["entries"]:
            mark = "*" if e["target"] == self._gpu_target else " "
            lines.append(f"{mark} {e['target']:8s} {e['backend']:12s} tier {e['tier']:11s} "
                         f"{len(e['buckets'])} bucket(s)")
        return "\n".join(lines)

    def _call_path(self, inputs: tuple[Any, ...]) -> str:
        """How calls with these inputs run now (describe() says it)."""
        try:
            runner = self._fast.get(call_key(inputs, None))
        except TypeError:
            return "calls: chosen on every call (an argument is not hashable)"
        if isinstance(runner, bound.BoundCall):
            return (f"calls: a bound launch of {runner.n_kernels} compiled kernel(s), no launcher "
                    "Python per call")
        if isinstance(runner, _Kernel):
            return ("calls: through the launcher: " + (runner.why_unbound or "bound once two "
                                                       "calls launch alike"))
        if isinstance(runner, _Reference):
            return f"calls: the reference op ({runner.why})"
        if isinstance(runner, _Metal):
            return "calls: the Metal runner chosen for them"
        return ("calls: not resolved yet (on a GPU the first call chooses, and from the third "
                "the compiled kernels launch directly where two calls launched alike)")

    # -- running --------------------------------------------------------------------------
    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        # Hot path: one look-up by the call's key, then what was resolved for it (a bound launch
        # of the compiled kernels once two calls agreed, porter.packs.bound; else the resolved
        # launcher or the reference). Choosing costs tens of microseconds of Python per call.
        try:
            key = call_key(inputs, out)
            fast = self._fast.get(key)
        except TypeError:  # an unhashable argument: no key, so every call resolves
            key, fast = None, None
        if fast is not None:
            return fast(inputs, out)
        return self._resolve(key, inputs, out)

    def _resolve(self, key: tuple[Any, ...] | None, inputs: tuple[Any, ...], out: Any) -> Any:
        """Choose for a call not resolved yet, run it, and file what runs later calls of its key
        (GPU and MPS calls; a CPU call under the interpreter is chosen every time)."""
        merged = self._merged(inputs, out)
        if isinstance(merged, str):
            self._warn_once(merged)
            self._outcome(inputs, f"reference: {merged}")
            return self._file(key, _Reference(self.reference, merged))(inputs, out)
        choice = self.choose(*inputs)
        if (self._tune_mode == "first-call" and choice.unseen and not choice.interpret
                and choice.target == self._gpu_target and "tuned" not in choice.reason):
            choice = self._tune_first_call(choice, merged, inputs)
        if choice.bucket is None:
            self._warn_once(choice.reason)
            self._outcome(inputs, f"reference: {choice.reason}")
            return ReferenceModule(self.reference).launch(*inputs, out=out)
        if choice.bucket["file"].endswith(".metal"):
            self._outcome(inputs, f"kernel: {choice.target} Metal"
                          + (" on the CPU Metal executor" if choice.interpret else " via MPS"))
            runner = _Metal(self, choice)
            return (self._file(key, runner) if not choice.interpret else runner)(inputs, out)
        if choice.reference_why is not None:
            # Measured (exact bucket) or estimated from the neighbours' measurements (no exact
            # bucket): eager is faster here, so the pack runs it; said once per bucket and dtype.
            self._log_once(f"reference:{choice.target}:{choice.asked}", "%s %s on %s: running "
                           "the reference op: %s", self.op, choice.asked, choice.target,
                           choice.reference_why)
            self._outcome(inputs, f"reference: {choice.reference_why}")
            return self._file(key, _Reference(self.reference, choice.reference_why))(inputs, out)
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
        if merged is not None and merged.copied:
            self._log_once(f"copied:{choice.asked}", "%s: inputs %s have strides that do not "
                           "merge their leading dims into rows, so each call copies them",
                           self.op, list(merged.copied))
        try:
            result, config = self._launch(choice, merged, inputs, out)
        except ValueError as exc:
            # the launcher refuses these inputs with every config (e.g. the flat elementwise
            # kernel and a strided view): the reference takes them, said once
            why = f"the {choice.target} kernel cannot take these inputs: {exc}"
            self._warn_once(why)
            self._outcome(inputs, f"reference: {why}")
            return self._file(key, _Reference(self.reference, why))(inputs, out)
        wrong = self._wrong_result(key, inputs, result)
        if wrong is not None:
            self._warn_once(wrong)
            self._outcome(inputs, f"reference: {wrong}")
            return self._file(key, _Reference(self.reference, wrong))(inputs, out)
        self._outcome(inputs, f"kernel: {choice.target} {choice.bucket['file']}"
                      + (" under the Triton interpreter" if choice.interpret else ""))
        if not choice.interpret:
            self._file(key, _Kernel(self, key, self._module(choice.bucket["file"], False), config))
        return result

    def _outcome(self, inputs: tuple[Any, ...], what: str) -> None:
        form = ", ".join(f"{tuple(t.shape)} {dtype_name(t.dtype)}" for t in inputs
                         if isinstance(t, torch.Tensor))
        self.outcomes[form] = what

    def _tune_first_call(self, choice: Choice, merged: leading.Merged | None,
                         inputs: tuple[Any, ...]) -> Choice:
        """load_pack(tune="first-call"): tune the shape now (bounded: porter.packs.tuning) and
        choose again; where it cannot be tuned, the choice stands, said once."""
        args = merged.inputs if merged is not None else inputs
        first = next(t for t in args if isinstance(t, torch.Tensor))
        try:
            self.tune([tuple(first.shape)], [dtype_name(first.dtype)])
        except tuning.TuningError as exc:
            self._log_once(f"tune:{choice.asked}", "%s: could not tune %s: %s; %s", self.op,
                           choice.asked, exc, choice.reason)
            return choice
        return self.choose(*inputs)

    def _merged(self, inputs: tuple[Any, ...], out: Any) -> leading.Merged | str | None:
        """The call with its extra leading dims merged into rows (porter.packs.leading)."""
        return leading.merge(self.manifest.get("leading_dims"), inputs, out)

    def _file(self, key: tuple[Any, ...] | None, runner: Any) -> Any:
        """Keep `runner` for later calls of `key`; returns it."""
        if key is not None:
            self._fast[key] = runner
        return runner

    def _wrong_result(self, key: tuple[Any, ...] | None, inputs: tuple[Any, ...],
                      result: Any) -> str | None:
        """Why the kernel's result cannot be the reference's (shape or dtype differ from the
        reference's own on meta tensors, checked once per key), else None."""
        expected = _meta_result(self.reference, inputs)
        if expected is None:
            return None  # the reference does not run on meta tensors: nothing to compare with
        got = list(result) if isinstance(result, (tuple, list)) else [result]
        want = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        for g, w in zip(got, want, strict=False):
            if isinstance(w, torch.Tensor) and (not isinstance(g, torch.Tensor) or tuple(
                    g.shape) != tuple(w.shape) or g.dtype != w.dtype):
                gdesc = (f"{tuple(g.shape)} {g.dtype}" if isinstance(g, torch.Tensor)
                         else type(g).__name__)
                return (f"the kernel returned {gdesc} where the reference returns "
                        f"{tuple(w.shape)} {w.dtype}")
        if len(got) != len(want):
            return f"the kernel returned {len(got)} results where the reference returns {len(want)}"
        return None

    def force_kernel(self, *inputs: Any, out: Any = None) -> Any:
        """Run the kernel `choose()` picks for these inputs even where the reference op would
        run instead (eager measured or estimated faster there): for benchmarks that check that
        decision (bench/suite.py --unseen). Not cached; a Metal entry is not run this way.

        Raises:
            ValueError: no Triton entry fits these inputs (the reference would run as the
                fallback), with the reason.
        """
        choice = self.choose(*inputs)
        merged = self._merged(inputs, out)
        if choice.bucket is None or choice.bucket["file"].endswith(".metal") or isinstance(
                merged, str):
            raise ValueError(f"{self.op}: no Triton kernel of the pack fits these inputs: "
                             f"{merged if isinstance(merged, str) else choice.reason}")
        return self._launch(choice, merged, inputs, out)[0]

    def _launch(self, choice: Choice, merged: leading.Merged | None, inputs: tuple[Any, ...],
                out: Any) -> tuple[Any, Any]:
        """Run choice's kernel on the (merged) inputs: (result, the config that ran)."""
        assert choice.bucket is not None
        if merged is not None:
            result, config = self._launch(choice, None, merged.inputs, merged.out)
            return merged.result(result), config
        module = self._module(choice.bucket["file"], choice.interpret)
        config = choice.config
        with triton_interpret(True if choice.interpret else None):
            try:
                return module.launch(*inputs, out=out, config=config), config
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
                    "timed" if speedup(choice.bucket) is not None else "checked",
                    choice.bucket["bucket"])
                return result, refit

    def _run_metal(self, choice: Choice, inputs: tuple[Any, ...], out: Any) -> Any:
        """A Metal entry: through MPS on a Mac, the CPU executor on a CPU (porter.mps), from the
        bytes verified at load time; the reference where neither can run it (said once)."""
        from porter import mps

        assert choice.bucket is not None
        merged = self._merged(inputs, out)
        assert not isinstance(merged, str)  # choose() said the kernel takes these inputs
        rel = choice.bucket["file"]
        with self._lock:
            if rel not in self._metal:
                self._metal[rel] = mps.MetalRunner(self._sources[rel].decode(),
                                                   label=f"{self.op}/{rel}")
            runner = self._metal[rel]
        why = runner.unavailable(inputs)
        if why is not None:
            self._warn_once(f"{choice.target} Metal entry: {why}")
            return ReferenceModule(self.reference).launch(*inputs, out=out)
        self._log_once(f"metal:{choice.target}", "%s: running the %s Metal kernel %s", self.op,
                       choice.target, "through MPS" if inputs and any(
                           isinstance(t, torch.Tensor) and t.device.type == "mps"
                           for t in inputs) else "on the CPU Metal executor (correct, not fast)")
        if merged is None:
            return runner(inputs, out, self.reference)
        return merged.result(runner(merged.inputs, merged.out, self.reference))

    def _module(self, rel: str, interpret: bool) -> ModuleType:
        """The module of pack file `rel`, executed from the bytes verified at load time."""
        key = (rel, interpret)
        with self._lock:
            if key not in self._modules:
                # Triton's @jit decides at decoration whether it interprets: "0" keeps a GPU
                # module compiled even when the user's environment says otherwise.
                with triton_interpret(interpret):
                    self._modules[key] = exec_verified(
                        self._sources[rel], label=f"{self.op}_{Path(rel).stem}",
                        display=f"{self.op}/{rel}")
            verified = self._modules[key]
        # Pinned again in case something cleared linecache since: the interpreter reads the
        # kernel's text on its first run, and it must find the verified text, not nothing.
        if verified.filename not in linecache.cache:
            pin_source(verified.filename, verified.text)
        return verified.module

    def _load_reference(self) -> Any:
        ref = self.manifest["reference"]
        data = self._sources[ref["file"]]
        function = ref.get("function")
        if function:
            module = exec_verified(data, label=f"{self.op}_ref",
                                    display=f"{self.op}/{ref['file']}").module
            if not callable(getattr(module, function, None)):
                raise PackError(f"{self.path / ref['file']}: no function {function!r}, which the "
                                "manifest's reference.function names")
            self._reference_module = module
            return getattr(module, function)
        from porter.specs import load_spec

        # A KernelBench file goes through load_spec, which reads its file by path: give it the
        # verified bytes in a private folder, never the pack's file again.
        with tempfile.TemporaryDirectory(prefix="porter_pack_ref_") as tmp:
            copy = Path(tmp) / Path(ref["file"]).name
            copy.write_bytes(data)
            self._spec = load_spec(copy)
            return self._spec.reference

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
        """Register `kernel_porter::<op>` as a torch.library custom op; returns the op
        (porter.packs.custom_op says how)."""
        return custom_op.register_custom_op(self)


def call_key(inputs: tuple[Any, ...], out: Any) -> tuple[Any, ...]:
    """What a resolved call depends on: every tensor's shape, strides, dtype, device and 16-byte
    alignment (Triton specializes on it), every other argument's value, and `out`'s tensors.

    Raises:
        TypeError: an argument that is not hashable (such a call has no key).
    """
    key = tuple((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)
                if isinstance(t, torch.Tensor) else t for t in inputs)
    if out is None:
        return key
    outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    return (*key, "out", *((o.shape, o.stride(), o.dtype, o.device, o.data_ptr() % 16 == 0)
                           for o in outs))


def _meta_result(reference: Any, inputs: tuple[Any, ...]) -> Any:
    """The reference's result on meta tensors like `inputs` (shapes and dtypes only), or None
    where it does not run on meta tensors."""
    metas = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                  if isinstance(t, torch.Tensor) else t for t in inputs)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            return reference(*metas)
    except Exception:  # noqa: BLE001 - a reference that needs real data (or CPU parameters)
        return None


class _Reference:
    """Runs the reference op for a call key (eager measured or estimated faster, or a form
    the kernel cannot take); `why` says which."""

    def __init__(self, reference: Any, why: str) -> None:
        self.module = ReferenceModule(reference)
        self.why = why

    def __call__(self, inputs: tuple[Any, ...], out: Any) -> Any:
        if out is None:  # one frame less: this runner's cost is all on top of eager's
            return self.module.reference(*inputs)
        return self.module.launch(*inputs, out=out)


class _Metal:
    """Runs one chosen Metal entry for a call key."""

    def __init__(self, packed: PackedOp, choice: Choice) -> None:
        self.packed, self.choice = packed, choice

    def __call__(self, inputs: tuple[Any, ...], out: Any) -> Any:
        return self.packed._run_metal(self.choice, inputs, out)


class _Kernel:
    """Runs a resolved (module, config) for one call key through its launcher; from its second
    call on, records each call (porter.packs.bound) and, once two calls did the same, files a
    `BoundCall` under the key, so later calls launch the compiled kernels directly. `why_unbound`
    says why a key stays on the launcher."""

    RECORDED_CALLS = 4  # calls recorded before the key stays on the launcher for good

    def __init__(self, packed: PackedOp, key: tuple[Any, ...] | None, module: ModuleType,
                 config: Any) -> None:
        self.packed, self.key, self.module, self.config = packed, key, module, config
        self.calls = 0
        self.previous: bound.Plan | None = None
        self.why_unbound: str | None = None if key is not None else "the call has no key"

    def run(self, inputs: tuple[Any, ...], out: Any) -> Any:
        merged = self.packed._merged(inputs, out)
        if merged is None:
            return self.module.launch(*inputs, out=out, config=self.config)
        assert not isinstance(merged, str)  # the key was resolved to this kernel
        return merged.result(self.module.launch(*merged.inputs, out=merged.out,
                                                config=self.config))

    def __call__(self, inputs: tuple[Any, ...], out: Any) -> Any:
        if self.why_unbound is not None:
            return self.run(inputs, out)
        first = next(t for t in inputs if isinstance(t, torch.Tensor))
        if first.device.type != "cuda":
            self.why_unbound = f"inputs on {first.device.type}: only CUDA/HIP launches are bound"
            return self.run(inputs, out)
        if torch.cuda.is_current_stream_capturing():
            return self.run(inputs, out)  # a launcher may act otherwise under capture: not noted
        if first.device.index != torch.cuda.current_device():
            self.why_unbound = (f"inputs on {first.device} while the current device is "
                                f"cuda:{torch.cuda.current_device()}")
            return self.run(inputs, out)
        rec = bound.record(lambda: self.run(inputs, out))
        plan = bound.plan(rec, inputs, out)
        self.calls += 1
        if isinstance(plan, str):
            self.why_unbound = plan
        elif self.previous is not None and bound.same(self.previous, plan):
            self.packed._fast[self.key] = bound.BoundCall(  # type: ignore[index]
                plan, first.device, config=self.config)
        elif self.calls >= self.RECORDED_CALLS:
            self.why_unbound = (f"{self.calls} calls with the same key did not launch the same "
                                "kernels, grids and scalars")
        self.previous = plan if not isinstance(plan, str) else None
        return rec.result


def load_pack(
    path: str | Path, *, device: str | None = None, register_custom_op: bool = False,
    expect_sha256: str | None = None, tune: str | None = None,
    tuning_cache: str | Path | bool | None = None,
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
        tune: None uses what the tuning cache holds for shapes no bucket was ported for, and
            never stalls a call; "first-call" tunes such a shape on its first call on a GPU (at
            most 8 candidates, about 2 s after the first compiles; porter.packs.tuning) and keeps
            it in the cache.
        tuning_cache: the cache folder (default `PORTER_TUNING_CACHE`, else the user's cache
            folder); False reads and writes none.

    Returns:
        A `PackedOp`: `op(*inputs)` or `op(*inputs, out=out)`; `op.describe(*inputs)`.

    Raises:
        PackError: the folder is not a pack / the manifest is malformed.
        PackIntegrityError: the pack is tampered, and refused whole: any file differs from its
            manifest hash or is missing, a manifest path leads outside the pack
            (`PackPathError`), or the manifest is not the one `expect_sha256` pins.
    """
    packed = PackedOp(path, device=device, expect_sha256=expect_sha256, tune=tune,
                      tuning_cache=tuning_cache)
    if register_custom_op:
        packed.register_custom_op()
    return packed
