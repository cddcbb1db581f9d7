"""Launch the porter's wide-row kernels once each, for a hardware-counter profiler to read.

A measuring tool for bench/NOTES.md item 43, not a benchmark (the timings of record come from
bench/suite.py and the probes): each config of CONFIGS is generated as `porter port` does,
checked once against the float64 reference, then launched twice (warm-up, then the launch to
profile) between device synchronizations, so that a profiler can pick the second launch of each
by name. A Triton copy of the same bytes (bench/probe_copy_size.py's `_copy_kernel`) runs last:
what the speed of light at that size looks like in the same counters.

    ncu --clock-control none -k regex:'_(persistent|looped|single_pass|copy)_kernel' \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        python bench/profile_rows.py

Without a profiler it prints each launch's wall time (one launch, no flush: not a timing).
`--summarize DIR` prints, from the profiler's CSVs in DIR (`ncu-full.csv`: `--set full --csv
--page details`; `ncu-stalls.csv`: `--metrics 'regex:smsp__average_warps_issue_stalled_.*
_per_issue_active\\.ratio' --csv --page raw`), one column per kernel's second launch: its
throughputs, occupancy and issue, and its stall cycles per issued instruction by reason.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402

from bench.probe_copy_size import _copy_kernel  # noqa: E402
from bench.probe_rowwise import check_variant  # noqa: E402
from bench.sweep import generated  # noqa: E402

SHAPE = (4096, 32768)
# the H200 run13 picks at 4096x32768 and their nearest rivals (bench/NOTES.md items 40-42)
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("softmax", {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32,
                 "num_stages": 3, "PROGRAMS_PER_SM": 1}),
    ("layernorm", {"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384, "num_warps": 32,
                   "VAR1": True}),
    ("layernorm", {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32,
                   "VAR1": True}),
    ("rmsnorm", {"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384, "num_warps": 32}),
]


DETAILS = ("Duration", "DRAM Throughput", "L2 Cache Throughput", "L1/TEX Cache Throughput",
           "L2 Hit Rate", "Issue Slots Busy", "No Eligible", "Eligible Warps Per Scheduler",
           "Registers Per Thread", "Achieved Occupancy", "Executed Instructions",
           "Average DRAM Active Cycles")
STALL = "smsp__average_warps_issue_stalled_"


def _csv_rows(path: Path) -> list[list[str]]:
    # ncu prints its own notes and the profiled program's output before the CSV lines
    return list(csv.reader(line for line in path.open() if line.startswith('"')))


def summarize(folder: Path) -> None:
    """Print the profiler's CSVs in `folder` as one column per kernel (its second launch)."""
    from tabulate import tabulate

    rows = _csv_rows(folder / "ncu-full.csv")
    head = rows[0]
    ids: dict[str, str] = {}
    values: dict[str, dict[str, str]] = {}
    for r in rows[1:]:
        ident = r[head.index("ID")]
        ids[ident] = r[head.index("Kernel Name")].split("(")[0]
        values.setdefault(ident, {})[r[head.index("Metric Name")]] = r[head.index("Metric Value")]
    second = sorted(ids, key=int)[1::2]
    names = [ids[i].strip("_").removesuffix("_kernel") for i in second]
    table = [[m, *(values[i].get(m, "-") for i in second)] for m in DETAILS]
    raw = _csv_rows(folder / "ncu-stalls.csv")
    head, launches = raw[0], raw[2:][1::2]
    for col, name in enumerate(head):
        if name.startswith(STALL):
            cells = [float(r[col].replace(",", "") or 0) for r in launches]
            if max(cells) >= 0.3:
                reason = name.removeprefix(STALL).removesuffix("_per_issue_active.ratio")
                table.append([f"stall: {reason}", *(f"{c:.2f}" for c in cells)])
    print(tabulate(table, headers=["metric", *names], disable_numparse=True))


def main() -> int:
    if sys.argv[1:2] == ["--summarize"]:
        summarize(Path(sys.argv[2]))
        return 0
    from porter.codegen import load_generated_module

    dev = torch.device("cuda")
    for op, cfg in CONFIGS:
        cfg = {"num_stages": 1, "dtype": "bf16", **cfg}
        spec, gen_op = generated(op)
        module = load_generated_module(gen_op.triton_module_source(), f"profile_{op}",
                                       interpret=False)
        row: dict[str, Any] = {}
        if not check_variant(lambda *a, _m=module, _c=cfg: _m.launch(*a, config=_c), spec, SHAPE,
                             "bf16", row):
            raise SystemExit(f"profile_rows: {op} {cfg}: {row['error']}")
        inputs = spec.make_inputs(SHAPE, torch.bfloat16, dev, torch.Generator(dev).manual_seed(7))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        module.launch(*inputs, config=cfg)
        torch.cuda.synchronize()
        print(f"{op} {cfg}: launched ({(time.perf_counter() - t0) * 1e6:.0f} us wall)",
              flush=True)
    n = SHAPE[0] * SHAPE[1]  # bf16 elements: the row block read once and written once
    src = torch.randn(n, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    for _ in range(2):
        _copy_kernel[(triton.cdiv(n, 8192),)](src, dst, n, BLOCK=8192, num_warps=8)
        torch.cuda.synchronize()
    print(f"copy of {2 * n * 2 >> 20} MiB moved: launched", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
