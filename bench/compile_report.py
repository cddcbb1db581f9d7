"""What one generated kernel compiles to, on the CPU: no GPU needed.

The CPU-side numbers of bench/NOTES.md items 20 and 23-25 (registers, spills, shared memory,
threads, `setmaxnreg` in the PTX, SASS instruction counts) come from this script. It generates
an example op as `porter port` does, takes the kernels a config runs (`GeneratedOp.kernel_refs`),
cross-compiles them through the porter's own compile check (`targets`), and with `--sass`
(NVIDIA only) counts the SASS instructions of the cubin with the cuobjdump shipped in triton.
The installed Triton is the compiler: the device runs triton 3.6, CPU CI 3.9, and they differ
(e.g. the warp-specialized matmul builds in 3.6 only).

    python -m bench.compile_report --op layernorm --shape 8192x5120 --target h200 \\
        --config '{"strategy": "two_block", "ROWS": 1, "BLOCK_N": 4096, "BLOCK_TAIL": 1024,
                   "num_warps": 8, "num_stages": 1}'
    python -m bench.compile_report --op softmax --shape 4097x1537 --sass \\
        --config '{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048, "num_warps": 8}'
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import tempfile
from pathlib import Path

import torch

from bench.sweep import DTYPES
from bench.sweep import generated


def sass_text(cubin: bytes) -> str:
    """The SASS listing of a cubin, by the cuobjdump shipped in triton."""
    from targets.triton_cuda import cuobjdump_path

    tool = cuobjdump_path()
    if tool is None:
        raise SystemExit("cuobjdump not found (it ships in triton's bin folder for NVIDIA)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout


def sass_counts(sass: str) -> collections.Counter:
    """Instruction mnemonics of a SASS listing; global loads and stores keep their modifiers
    (width, cache hints: LDG.E.128.STRONG.GPU is a .cg load)."""
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    return collections.Counter(op if op.startswith(("LDG", "STG")) else op.split(".")[0]
                               for op in ops if not op.startswith("NOP"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", required=True, help="example op (examples/<op>/spec.py)")
    ap.add_argument("--shape", required=True, help="e.g. 8192x5120 or 4096x4096x4096")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--target", default="h100", help="hardware model name")
    ap.add_argument("--config", required=True, help="the config, as JSON")
    ap.add_argument("--sass", action="store_true", help="also count SASS instructions")
    ap.add_argument("--sass-dir", type=Path,
                    help="with --sass: write each kernel's full SASS listing here")
    args = ap.parse_args(argv)

    import hwmodels
    import targets
    from targets.base import LaunchConfig

    hw = hwmodels.get(args.target)
    config = json.loads(args.config)
    spec, gen_op = generated(args.op)
    shape = tuple(int(s) for s in args.shape.split("x"))
    inputs = tuple(spec.make_inputs(shape, DTYPES[args.dtype], torch.device("meta"),
                                    torch.Generator().manual_seed(0)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.op}.py"
        path.write_text(gen_op.triton_module_source())
        for ref in gen_op.kernel_refs(inputs, config, source_path=str(path)):
            backend = targets.for_device(hw)
            # the compile options this backend knows (maxnreg, waves_per_eu, ...) from the config
            extra = {k: config[k] for k in backend.known_knobs if k in config}
            rep = backend.compile(
                ref, LaunchConfig(config["num_warps"], config.get("num_stages", 1), extra), hw)
            r = rep.resources
            ptx = rep.artifacts.get("ptx", "")
            print(f"{ref.name} on {hw.name}: {'fits' if rep.fits else 'does not fit'}; "
                  f"{r.registers_per_thread} registers, {r.spill_bytes} B spilled, "
                  f"{r.shared_memory_bytes} B shared, {r.threads_per_block} threads, "
                  f"{rep.occupancy.blocks_per_unit if rep.occupancy else '?'} blocks per SM, "
                  f"setmaxnreg x{len(re.findall('setmaxnreg', ptx))}"
                  + (f"; {'; '.join(rep.reasons)}" if rep.reasons else ""))
            if args.sass:
                if rep.binary is None or hw.build.backend != "triton-cuda":
                    raise SystemExit("--sass reads a cubin: NVIDIA targets only")
                sass = sass_text(rep.binary)
                counts = sass_counts(sass)
                print(f"  {sum(counts.values())} SASS instructions: "
                      f"{dict(counts.most_common(12))}")
                if args.sass_dir:
                    args.sass_dir.mkdir(parents=True, exist_ok=True)
                    (args.sass_dir / f"{ref.name}.sass").write_text(sass)
                memory = {k: v for k, v in sorted(counts.items()) if k.startswith(("LDG", "STG"))}
                print(f"  global loads and stores: {memory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
