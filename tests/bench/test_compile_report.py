"""bench/compile_report.py: one generated kernel cross-compiled on the CPU, its resources read."""

from __future__ import annotations

import json

from bench.compile_report import main


def test_reports_the_resources_of_each_kernel_a_config_runs(capsys) -> None:
    config = {"strategy": "two_block", "ROWS": 1, "BLOCK_N": 4096, "BLOCK_TAIL": 1024,
              "num_warps": 8, "num_stages": 1}
    assert main(["--op", "softmax", "--shape", "64x5120", "--target", "h100",
                 "--config", json.dumps(config)]) == 0
    out = capsys.readouterr().out
    assert "_softmax_two_block_kernel on h100: fits;" in out
    assert " registers, 0 B spilled, " in out and "256 threads" in out


def test_sass_counts_keep_the_width_of_global_loads(capsys) -> None:
    config = {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 4096, "num_warps": 8}
    assert main(["--op", "softmax", "--shape", "64x4096", "--target", "h100", "--sass",
                 "--config", json.dumps(config)]) == 0
    out = capsys.readouterr().out
    # 4096 bf16 over 256 threads: 16 B loads and stores (LDG.E.128), not bare "LDG"
    memory = out[out.index("global loads and stores: "):]
    assert "'LDG.E.128'" in memory and "'STG.E.128'" in memory


def test_full_rows_drop_the_select_of_masked_lanes(tmp_path) -> None:
    # The persistent kernel's pipelined loads (cp.async) fill masked lanes with 0, so its -inf
    # fill is a select per element (16 a thread here): gone where every block is full (EVEN,
    # 4096 columns), back where the last block is not (4000 columns: every lane masked as
    # before item 37). The selects left with EVEN are per thread: the per-thread (max, sum)
    # pairs' guards and their combine's (item 47).
    config = {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 4096, "num_warps": 8,
              "num_stages": 3, "PROGRAMS_PER_SM": 1}
    fsel = {}
    for name, shape in (("even", "256x4096"), ("masked", "256x4000")):
        assert main(["--op", "softmax", "--shape", shape, "--target", "h100", "--sass",
                     "--sass-dir", str(tmp_path / name), "--config", json.dumps(config)]) == 0
        sass = (tmp_path / name / "_softmax_persistent_kernel.sass").read_text()
        fsel[name] = sass.count(" FSEL ")
    assert fsel["even"] < 16 and fsel["masked"] - fsel["even"] >= 16, fsel
