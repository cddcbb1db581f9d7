"""Measure a GPU's practical ceilings and record them as `measured:` entries of its YAML.

    python -m harness.measure_ceilings            # print the entries as YAML
    python -m harness.measure_ceilings --write    # ...and append them to the device's YAML

Two ceilings, the ones the roofline and projection code compare kernels against:

- copy_bandwidth_gbps: device-to-device `dst.copy_(src)` of large buffers (0.25, 1 and 4 GiB
  by default, beyond any L2/Infinity Cache so the copy streams from HBM), each repetition after
  the same flush as `harness.timing` (so kernels and ceiling are timed alike); the best size is
  recorded and the method lists all. Bytes counted: read + written (2 x size). Time: median of
  CUDA-event timings after warm-up.
- matmul_bf16_tflops: bf16 8192x8192x8192 `torch.matmul` (cuBLAS / hipBLASLt) on random normal
  data (zeros would let the tensor cores' power management run faster than on real data).
  FLOPs counted: 2*M*N*K. Time: median of CUDA-event timings after warm-up.

`--write` appends; it never replaces or deletes existing entries (older measurements stay as
history, `hw.measured_value(name)` picks the newest). On a machine without a GPU it exits 2.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from hwmodels.detect import detect
from hwmodels.loader import HardwareModelError
from hwmodels.loader import UnknownDeviceError
from hwmodels.loader import load_file

EXIT_NO_GPU = 2
SCRIPT = "harness/measure_ceilings.py"


@dataclass(frozen=True)
class Measurement:
    """One `measured:` entry, ready to be written."""

    name: str
    value: float
    date: str
    method: str
    versions: dict[str, str] = field(default_factory=dict)


def _median_ms(torch: Any, fn: Any, reps: int, warmup: int, before: Any = None) -> float:
    """Median milliseconds of `fn()` over `reps` runs, each bracketed by its own CUDA events;
    `before()` (untimed) runs ahead of each."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure_copy_bandwidth(
    torch: Any, sizes_bytes: list[int], reps: int, warmup: int, llc_bytes: int = 0
) -> tuple[float, str]:
    """Device-to-device copy bandwidth in GB/s (1e9 B/s), counting bytes read + written: the best
    of copies of each size, each timed after the harness's flush (a buffer of 2x the LLC written,
    then read, so the copy neither finds its data cached nor pays for another buffer's dirty
    lines; `harness.timing.flush_llc`)."""
    from harness.timing import flush_llc

    free, _total = torch.cuda.mem_get_info()
    flush = torch.empty(max(2 * llc_bytes, 512 << 20) // 4, dtype=torch.int32, device="cuda")

    # Buffers are bound as default arguments, not closed over: each is deleted below to free
    # device memory, and a closure over a deleted name reads as undefined (ruff F821).
    def before(flush: Any = flush) -> None:
        flush_llc(flush)

    results = []
    for size_bytes in sizes_bytes:
        # Two buffers plus headroom; shrink on small-memory devices rather than fail.
        size = min(size_bytes, int(free * 0.4)) // 4096 * 4096
        src = torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ms = _median_ms(
            torch, lambda dst=dst, src=src: dst.copy_(src), reps, warmup, before=before
        )
        results.append((2 * size / (ms * 1e-3) / 1e9, size))
        del src, dst
        torch.cuda.empty_cache()
    del before, flush
    gbps = max(g for g, _ in results)
    each = ", ".join(f"{size / 2**30:.2f} GiB: {g:.0f} GB/s" for g, size in results)
    method = (
        f"device-to-device torch copy_ of a uint8 buffer, bytes read + bytes written over median "
        f"CUDA-event time of {reps} reps after {warmup} warm-up, each after a write then a read "
        f"of a flush buffer (2x LLC); best of {each} ({SCRIPT})"
    )
    return gbps, method


def measure_matmul_bf16(torch: Any, n: int, reps: int, warmup: int) -> tuple[float, str]:
    """bf16 n x n x n matmul throughput in TFLOP/s (1e12 FLOP/s), 2*n^3 FLOPs per call."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((n, n), device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn((n, n), device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty((n, n), device="cuda", dtype=torch.bfloat16)
    # Bound as defaults, as in measure_copy_bandwidth: the buffers are deleted below.
    ms = _median_ms(torch, lambda a=a, b=b, out=out: torch.matmul(a, b, out=out), reps, warmup)
    tflops = 2 * n**3 / (ms * 1e-3) / 1e12
    del a, b, out
    torch.cuda.empty_cache()
    lib = "hipBLASLt/rocBLAS" if getattr(torch.version, "hip", None) else "cuBLAS"
    method = (
        f"bf16 {n}x{n}x{n} torch.matmul ({lib}) on random normal data, 2*M*N*K over median "
        f"CUDA-event time of {reps} reps after {warmup} warm-up ({SCRIPT})"
    )
    return tflops, method


def _versions(torch: Any, device_name: str) -> dict[str, str]:
    versions = {"torch": torch.__version__.split("+")[0]}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        versions["triton"] = "not installed"
    hip = getattr(torch.version, "hip", None)
    if hip:
        versions["hip"] = str(hip)
    else:
        versions["cuda"] = str(torch.version.cuda)
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                drv = pynvml.nvmlSystemGetDriverVersion()
                versions["driver"] = drv.decode() if isinstance(drv, bytes) else str(drv)
            finally:
                pynvml.nvmlShutdown()
        except (ImportError, OSError) as e:
            versions["driver"] = f"unknown ({type(e).__name__})"
        except Exception as e:  # noqa: BLE001 - pynvml.NVMLError; the entry says why it is missing
            versions["driver"] = f"unknown ({e})"
    versions["device"] = device_name
    return versions


def to_yaml(entries: list[Measurement], indent: str = "  ") -> str:
    """Renders entries as the lines of a YAML block sequence (no `measured:` header).

    Strings go through json.dumps: a JSON string is a valid YAML double-quoted scalar, so
    colons, quotes and '#' in methods or device names cannot break the file.
    """
    lines = []
    for e in entries:
        versions = ", ".join(f"{k}: {json.dumps(v)}" for k, v in e.versions.items())
        lines += [
            f"{indent}- name: {e.name}",
            f"{indent}  value: {round(e.value, 1)}",
            f"{indent}  date: {json.dumps(e.date)}",
            f"{indent}  method: {json.dumps(e.method)}",
            f"{indent}  versions: {{{versions}}}",
        ]
    return "\n".join(lines) + "\n"


def append_to_yaml(path: Path, entries: list[Measurement]) -> None:
    """Appends entries to the file's `measured:` list, keeping everything else byte for byte.

    The file is re-validated afterwards; if the result does not load, the original text is put
    back and the error re-raised.

    Raises:
        HardwareModelError: the edited file does not validate (the file is left unchanged).
    """
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = next(
        (
            i
            for i, ln in enumerate(lines)
            if ln.split("#")[0].rstrip() in ("measured:", "measured: []")
        ),
        None,
    )
    if start is None:
        new_lines = [*lines, "measured:\n", to_yaml(entries)]
    else:
        lines[start] = "measured:\n"
        end = start + 1
        indent = None
        while end < len(lines) and (not lines[end].strip() or lines[end][0] in " -#"):
            stripped = lines[end].lstrip(" ")
            if indent is None and stripped.startswith("- "):
                indent = lines[end][: len(lines[end]) - len(stripped)]
            end += 1
        # Keep trailing blank/comment lines after the block where they were.
        while end - 1 > start and not lines[end - 1].strip():
            end -= 1
        new_lines = [
            *lines[:end],
            to_yaml(entries, indent if indent is not None else "  "),
            *lines[end:],
        ]
    path.write_text("".join(new_lines), encoding="utf-8")
    try:
        load_file(path)
    except HardwareModelError:
        path.write_text(original, encoding="utf-8")
        raise


def main(argv: list[str] | None = None) -> int:
    """Measures the ceilings of the GPU this runs on; prints them, and with --write records them."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.measure_ceilings", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--write", action="store_true", help="append the entries to the device's YAML"
    )
    parser.add_argument(
        "--device", help="hardware model to write to, when detection cannot map the GPU"
    )
    parser.add_argument(
        "--copy-gib", default="0.25,1,4",
        help="copy buffer sizes in GiB, comma-separated; the best is recorded (default 0.25,1,4)",
    )
    parser.add_argument(
        "--matmul-n", type=int, default=8192, help="square matmul size (default 8192)"
    )
    parser.add_argument(
        "--reps", type=int, default=50, help="timed repetitions per ceiling (default 50)"
    )
    parser.add_argument("--warmup", type=int, default=10, help="untimed warm-up runs (default 10)")
    args = parser.parse_args(argv)

    det = detect()
    try:
        import torch
    except ImportError:
        print("measure_ceilings: torch is not installed; nothing to measure with", file=sys.stderr)
        return EXIT_NO_GPU
    if not torch.cuda.is_available():
        print(
            f"measure_ceilings: no CUDA/ROCm GPU on this machine, nothing measured. {det.reason}",
            file=sys.stderr,
        )
        return EXIT_NO_GPU

    model = det.model
    if args.device:
        from hwmodels import get

        try:
            model = get(args.device)
        except UnknownDeviceError as e:
            print(f"measure_ceilings: {e}", file=sys.stderr)
            return EXIT_NO_GPU
    device_name = torch.cuda.get_device_name(0)
    print(
        f"# device: {device_name}; hardware model: {model.name if model else 'none'} "
        f"({det.reason})",
        file=sys.stderr,
    )

    today = _dt.date.today().isoformat()
    versions = _versions(torch, device_name)
    try:
        sizes = [int(float(g) * 2**30) for g in args.copy_gib.split(",")]
    except ValueError:
        print(f"measure_ceilings: --copy-gib {args.copy_gib!r} is not a list of sizes in GiB",
              file=sys.stderr)
        return 1
    gbps, copy_method = measure_copy_bandwidth(
        torch, sizes, args.reps, args.warmup, int(model.llc_bytes) if model else 0
    )
    tflops, mm_method = measure_matmul_bf16(torch, args.matmul_n, args.reps, args.warmup)
    name = "matmul_bf16_tflops" if args.matmul_n == 8192 else f"matmul_bf16_n{args.matmul_n}_tflops"
    entries = [
        Measurement("copy_bandwidth_gbps", gbps, today, copy_method, versions),
        Measurement(name, tflops, today, mm_method, versions),
    ]
    print("measured:")
    print(to_yaml(entries), end="")
    if model is not None:
        print(
            f"# {gbps / model.peak_bandwidth_gbps:.0%} of datasheet bandwidth "
            f"{model.peak_bandwidth_gbps:g} GB/s; "
            + (
                f"{tflops / model.peak_tflops('bf16'):.0%} of datasheet bf16 "
                f"{model.peak_tflops('bf16'):g} TFLOP/s"
                if model.peak_tflops("bf16")
                else "no bf16 peak in model"
            ),
            file=sys.stderr,
        )
    if args.write:
        if model is None:
            print(
                "measure_ceilings: --write needs a hardware model; pass --device NAME",
                file=sys.stderr,
            )
            return EXIT_NO_GPU
        try:
            append_to_yaml(Path(model.source_file), entries)
        except HardwareModelError as e:
            print(f"measure_ceilings: not written: {e}", file=sys.stderr)
            return 1
        print(f"# appended {len(entries)} entries to {model.source_file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
