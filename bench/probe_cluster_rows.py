"""Probe: the porter's wide-row kernels with each row split over a CTA cluster (`num_ctas`).

Triton lays a program's tensors over the CTAs of a cluster when `num_ctas` > 1 (sm_90+), and a
reduction along the split dim crosses the CTAs through distributed shared memory. Triton 3.6,
the GPU machines' version, refuses that split of a reduced dim (its PlanCTA pass fails on a
[1, BLOCK_N] row); Triton 3.9, on the CPU machines, compiles it. So this probe builds in two
steps (bench/NOTES.md item 48):

    # on a CPU machine with a Triton that compiles the split (3.9): cubins + manifest.json
    python bench/probe_cluster_rows.py build --out bench/cluster_build
    # on the GPU: each cubin launched through the driver API beside the porter's own picks
    python bench/probe_cluster_rows.py run --build bench/cluster_build --out /tmp/probe

`build` generates each op's module exactly as `porter port` does, runs its launcher with the
kernels swapped for a recorder (so the arguments and constexprs are the launcher's own: EVEN,
LANES, VEC, VAR1, HOIST), compiles the recorded kernel for sm_90 with the config's
`num_ctas`, and writes the cubin with what the launch needs. The same configs at `num_ctas` 1
are built too, so that what the newer compiler changes is told apart from what the cluster
changes. `run` refuses a build made from other generated source than the checkout's; then per
case each variant is checked against float64 and timed interleaved (LLC flushed) with the
picks (jitted by the local Triton), eager PyTorch and a copy of the same bytes
(`probe_rowwise.probe_beside_picks`). A measuring tool: nothing here is in a pack.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.sweep import DTYPES  # noqa: E402
from bench.sweep import generated  # noqa: E402
from bench.sweep import parse_case  # noqa: E402

_WIDE = {"ROWS": 1, "BLOCK_N": 32768}
# Per case: the H200 run13 pick(s), timed as the porter jits them, and the configs built ahead
# of time, each at num_ctas 1 and at the cluster sizes listed.
CASES: dict[str, dict[str, Any]] = {
    "softmax:4096x32768:bf16": {
        "picks": [{"strategy": "persistent", **_WIDE, "num_warps": 32, "num_stages": 3,
                   "PROGRAMS_PER_SM": 1}],
        "built": [{"strategy": "single_pass", **_WIDE, "num_warps": w, "ctas": c}
                  for w, c in ((32, (2,)), (16, (2, 4)), (8, (2, 4)), (4, (4,)))]
        + [{"strategy": "persistent", **_WIDE, "num_warps": w, "num_stages": s,
            "PROGRAMS_PER_SM": p, "ctas": (2,)} for w, s, p in ((16, 2, 2), (16, 3, 1),
                                                                 (32, 3, 1))],
    },
    "layernorm:4096x32768:bf16": {
        "picks": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384, "num_warps": 32,
                   "LANES": 8192, "VAR1": True}],
        "built": [{"strategy": "single_pass", **_WIDE, "num_warps": w, "VAR1": True,
                   "ctas": c} for w, c in ((32, (2,)), (16, (2, 4)), (8, (2, 4)), (4, (4,)))]
        + [{"strategy": "persistent", **_WIDE, "num_warps": 16, "num_stages": 2,
            "PROGRAMS_PER_SM": 2, "VAR1": True, "ctas": (2,)}],
    },
    "rmsnorm:4096x32768:bf16": {
        "picks": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384, "num_warps": 32}],
        "built": [{"strategy": "single_pass", **_WIDE, "num_warps": w, "HOIST": True,
                   "ctas": c} for w, c in ((16, (2, 4)), (8, (2, 4)))],
    },
}

def source_sha(source: str) -> str:
    """sha256 of an op's generated module: a build is run only against the same source."""
    return hashlib.sha256(source.encode()).hexdigest()


class _Recorded(Exception):
    """Raised by the recorder once it holds the launch: nothing runs."""


def record_launch(module: Any, inputs: tuple[Any, ...], config: dict[str, Any]
                  ) -> tuple[Any, int, tuple[Any, ...], dict[str, Any], list[torch.Tensor]]:
    """(jit function, grid, args, kwargs, outs) of the launcher's one kernel launch for
    `config`, with the kernels swapped for a recorder; persistent grids come back as -1 (the
    GPU sets them from its SM count)."""
    seen: dict[str, Any] = {}

    class Recorder:
        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
            def call(*args: Any, **kwargs: Any) -> None:
                seen.update(fn=self.fn, grid=grid[0], args=args, kwargs=kwargs)
                raise _Recorded

            return call

    names = [n for n, v in vars(module).items() if n.endswith("_kernel") and hasattr(v, "fn")]
    saved = {n: getattr(module, n) for n in names}
    saved_programs = module._num_programs
    try:
        for n in names:
            setattr(module, n, Recorder(saved[n]))
        module._num_programs = lambda device, work, per_sm=1: -1
        outs = [torch.empty_like(inputs[0])]
        try:
            module.launch(*inputs, out=outs[0], config=config)
        except _Recorded:
            pass
    finally:
        for n, v in saved.items():
            setattr(module, n, v)
        module._num_programs = saved_programs
    if "fn" not in seen:
        raise RuntimeError(f"the launcher ran no kernel for {config}")
    return seen["fn"], seen["grid"], seen["args"], seen["kwargs"], outs


def compile_recorded(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     tensors: list[torch.Tensor], num_ctas: int, arch: int = 90
                     ) -> tuple[bytes, dict[str, Any]]:
    """Cross-compile the recorded launch for sm_`arch` at `num_ctas`: (cubin, launch record).

    The source is built as the porter's compile stage builds it (`targets.triton_common`):
    pointers carry the 16-byte divisibility hint (the GPU run checks its tensors have it), and
    so do integers divisible by 16, as Triton's JIT gives them; an integer equal to 1 stays a
    runtime argument (the JIT would make it a constant). Each runtime argument is recorded as a
    tensor index (into `tensors`) or a value."""
    import triton
    from triton.backends.compiler import GPUTarget

    from porter.codegen.emit import TRITON_DTYPE
    from targets.base import KernelRef
    from targets.triton_common import build_source

    params = fn.params
    launch = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in kwargs}
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    runtime: list[dict[str, Any]] = []
    values = list(args) + [kwargs[p.name] for p in params[len(args):]]
    for p, v in zip(params, values):
        if p.is_constexpr:
            constexprs[p.name] = v
        elif isinstance(v, torch.Tensor):
            signature[p.name] = "*" + TRITON_DTYPE[v.dtype]
            index = next(j for j, t in enumerate(tensors) if t.data_ptr() == v.data_ptr())
            runtime.append({"tensor": index})
        else:
            v = int(v)
            kind = "i32" if -2**31 <= v < 2**31 else "i64"
            signature[p.name] = kind + (":16" if v % 16 == 0 else "")
            runtime.append({"int": v, "type": kind})
    src = build_source(KernelRef(name=fn.__name__, fn=fn, signature=signature,
                                 constexprs=constexprs))
    options = {**launch, "num_ctas": num_ctas}
    k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    md = k.metadata
    if getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0):
        raise ValueError(f"{fn.__name__}: needs scratch memory, which this launcher has none of")
    return k.asm["cubin"], {"name": md.name, "num_warps": md.num_warps, "num_ctas": md.num_ctas,
                            "shared": md.shared, "runtime": runtime,
                            "constexprs": dict(constexprs),
                            "triton": triton.__version__}


def build(cases: list[str], out: Path, limit: int | None = None) -> None:
    """Write each case's cubins (the first `limit` built configs, each at num_ctas 1 and at its
    cluster sizes) and <out>/manifest.json."""
    from porter.codegen import load_generated_module

    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"cases": {}}
    for text in cases:
        op_name, shape, dname = parse_case(text)
        spec, gen_op = generated(op_name)
        source = gen_op.triton_module_source()
        module = load_generated_module(source, f"cluster_{op_name}", interpret=False)
        inputs = tuple(spec.make_inputs(shape, DTYPES[dname], torch.device("cpu"),
                                        torch.Generator().manual_seed(0)))
        variants = []
        for n, built in enumerate(CASES[text]["built"][:limit]):
            for ctas in (1, *built["ctas"]):
                cfg = {k: v for k, v in built.items() if k != "ctas"}
                cfg = {"num_stages": 1, "dtype": dname, **cfg}
                fn, grid, args, kwargs, outs = record_launch(module, inputs, cfg)
                tensors = [*inputs, *outs]
                try:
                    cubin, rec = compile_recorded(fn, args, kwargs, tensors, ctas)
                except RuntimeError as exc:
                    import triton

                    raise SystemExit(
                        f"probe_cluster_rows build: Triton {triton.__version__} could not compile "
                        f"{text} {cfg} at num_ctas {ctas} ({str(exc).splitlines()[0][:120]}); "
                        "Triton 3.6 fails on a reduced dim split over a cluster, 3.9 builds it"
                    ) from exc
                file = f"{op_name}-{n}-c{ctas}.cubin"
                (out / file).write_bytes(cubin)
                rec.update(file=file, config={**cfg, "num_ctas": ctas}, programs=grid,
                           per_sm=cfg.get("PROGRAMS_PER_SM", 1), work=-(-shape[0] // cfg["ROWS"]))
                variants.append(rec)
                print(f"[build] {text} {file}: {rec['name']} w{rec['num_warps']} "
                      f"ctas{ctas} shared {rec['shared']} B", flush=True)
        manifest["cases"][text] = {"source_sha256": source_sha(source), "variants": variants}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"[build] {out / 'manifest.json'}")


class CubinKernel:
    """One kernel of a cubin, launched through the CUDA driver API on torch's current stream."""

    _cuda: Any = None

    def __init__(self, data: bytes, name: str, shared: int) -> None:
        cu = self._driver()
        self.module = ctypes.c_void_p()
        self.fn = ctypes.c_void_p()
        self._check(cu.cuModuleLoadData(ctypes.byref(self.module), data), "cuModuleLoadData")
        self._check(cu.cuModuleGetFunction(ctypes.byref(self.fn), self.module, name.encode()),
                    f"cuModuleGetFunction {name}")
        self.shared = shared
        if shared > 48 * 1024:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._check(cu.cuFuncSetAttribute(self.fn, 8, ctypes.c_int(shared)),
                        "cuFuncSetAttribute")

    @classmethod
    def _driver(cls) -> Any:
        if cls._cuda is None:
            torch.cuda.init()
            torch.zeros(1, device="cuda")  # the primary context current on this thread
            cu = ctypes.CDLL("libcuda.so.1")
            cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
                ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
            cu.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
            cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                               ctypes.c_char_p]
            cu.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
            cls._cuda = cu
        return cls._cuda

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self._cuda.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what}: {name.value.decode() if name.value else rc}")

    def launch(self, ctas: int, threads: int, args: list[Any]) -> None:
        # Triton >= 3.3 kernels take two trailing scratch pointers; null where none is needed.
        boxed = [*args, ctypes.c_void_p(0), ctypes.c_void_p(0)]
        params = (ctypes.c_void_p * len(boxed))(
            *[ctypes.cast(ctypes.pointer(b), ctypes.c_void_p) for b in boxed])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self._check(self._cuda.cuLaunchKernel(self.fn, ctas, 1, 1, threads, 1, 1, self.shared,
                                              stream, params, None), "cuLaunchKernel")


def cubin_launcher(build_dir: Path, rec: dict[str, Any]) -> Callable[..., torch.Tensor]:
    """fn(*inputs) -> output running `rec`'s cubin as the generated launcher would."""
    kernel = CubinKernel((build_dir / rec["file"]).read_bytes(), rec["name"], rec["shared"])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    programs = rec["programs"]
    if programs < 0:  # persistent: per_sm programs per SM, each taking num_ctas of them
        programs = max(1, min(sms * rec["per_sm"] // rec["num_ctas"], rec["work"]))

    def run(*inputs: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(inputs[0])
        tensors = [*inputs, out]
        if any(t.data_ptr() % 16 for t in tensors):
            raise ValueError("a tensor is not 16-byte aligned, as the cubin was built to assume")
        args = [ctypes.c_void_p(tensors[a["tensor"]].data_ptr()) if "tensor" in a else
                (ctypes.c_int32 if a["type"] == "i32" else ctypes.c_int64)(a["int"])
                for a in rec["runtime"]]
        kernel.launch(programs * rec["num_ctas"], 32 * rec["num_warps"], args)
        return out

    return run


def run(build_dir: Path, out: Path, reps: int, cases: list[str]) -> None:
    from bench.probe_rowwise import probe_beside_picks, probe_cases

    manifest = json.loads((build_dir / "manifest.json").read_text())
    for text in cases:
        if text not in manifest["cases"]:
            raise SystemExit(f"probe_cluster_rows: {build_dir}/manifest.json has no case {text!r}")
        source = generated(parse_case(text)[0])[1].triton_module_source()
        if manifest["cases"][text]["source_sha256"] != source_sha(source):
            raise SystemExit(f"probe_cluster_rows: {text} was built from other generated source "
                             "than this checkout's: build again")

    def probe(text: str, hw: Any, reps: int) -> list[dict[str, Any]]:
        hand = []
        for rec in manifest["cases"][text]["variants"]:
            c = rec["config"]
            key = (f"{rec['triton']} c{c['num_ctas']} {c['strategy'][:6]} w{c['num_warps']}"
                   + (f" st{c['num_stages']} p{c['PROGRAMS_PER_SM']}"
                      if c["strategy"] == "persistent" else ""))
            hand.append((key, c, cubin_launcher(build_dir, rec)))
        return probe_beside_picks(text, hw, reps, CASES[text]["picks"], hand)

    probe_cases("probe_cluster_rows", cases, reps, out, probe)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("build", "run"))
    ap.add_argument("--cases", default=",".join(CASES), help="OP:SHAPE:DTYPE,... (from CASES)")
    ap.add_argument("--build", type=Path, help="run: the folder `build` wrote")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--limit", type=int, help="build: the first N configs of each case only")
    args = ap.parse_args(argv)
    cases = args.cases.split(",")
    for text in cases:
        if text not in CASES:
            raise SystemExit(f"probe_cluster_rows: unknown case {text!r}; known: {', '.join(CASES)}")
    if args.step == "build":
        build(cases, args.out, args.limit)
    else:
        if args.build is None:
            raise SystemExit("probe_cluster_rows run: --build DIR is required")
        run(args.build, args.out, args.reps, cases)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
