"""bench/profile_rows.py: its summary of the profiler's CSVs (no GPU, no profiler)."""

from __future__ import annotations

from pathlib import Path

from bench.profile_rows import summarize

_DETAILS = """==PROF== Connected to process 1
softmax {...}: launched (1 us wall)
"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"
"0","_softmax_persistent_kernel(...)","SOL","Duration","ns","9"
"1","_softmax_persistent_kernel(...)","SOL","Duration","ns","143,680"
"1","_softmax_persistent_kernel(...)","SOL","DRAM Throughput","%","73.98"
"2","_copy_kernel(...)","SOL","Duration","ns","8"
"3","_copy_kernel(...)","SOL","Duration","ns","130,720"
"""
_STALLS = """"ID","Kernel Name","smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
"","","ratio","ratio"
"0","_softmax_persistent_kernel","1.00","0.1"
"1","_softmax_persistent_kernel","6.92","0.1"
"2","_copy_kernel","2.00","0.1"
"3","_copy_kernel","33.45","0.2"
"""


def test_summary_takes_each_kernels_second_launch(tmp_path: Path, capsys) -> None:
    (tmp_path / "ncu-full.csv").write_text(_DETAILS)
    (tmp_path / "ncu-stalls.csv").write_text(_STALLS)
    summarize(tmp_path)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["metric", "softmax_persistent", "copy"]
    rows = {line.split()[0] + (" " + line.split()[1] if line.startswith("stall") else ""):
            line.split()[-2:] for line in out[2:]}
    assert rows["Duration"] == ["143,680", "130,720"]
    assert rows["DRAM"] == ["73.98", "-"]
    assert rows["stall: mio_throttle"] == ["6.92", "33.45"]
    assert "stall: wait" not in rows  # under 0.3 cycles per instruction everywhere: left out
