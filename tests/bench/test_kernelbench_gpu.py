"""bench.kernelbench_gpu: coverage on the CPU, costs and ceilings, the per-file child's failure
rows, resumable results and the summary; end to end on a GPU (marker gpu)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from bench import kernelbench_gpu as kg

SOFTMAX = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Softmax over rows."""
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)

batch_size = 64
dim = 1000

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''

GEMM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Linear, then a bias and ReLU."""
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.bias)

batch_size = 32
in_features = 64
out_features = 48
bias_shape = (out_features,)

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, bias_shape]
'''

CONV = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))

def get_inputs():
    return [torch.randn(2, 3, 16, 16)]

def get_init_inputs():
    return []
'''


@pytest.fixture()
def kb_dir(tmp_path: Path) -> Path:
    root = tmp_path / "KernelBench"
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    (root / "level1" / "23_Softmax.py").write_text(SOFTMAX)
    (root / "level2" / "76_Gemm_Add_ReLU.py").write_text(GEMM)
    (root / "level2" / "1_Conv2D_ReLU.py").write_text(CONV)
    return root


def test_problem_files_in_kernelbench_order_and_filtered(kb_dir: Path) -> None:
    files = kg.problem_files(kb_dir, ["1", "2"], None)
    assert [kg.key_of(f) for f in files] == ["level1/23_Softmax.py", "level2/1_Conv2D_ReLU.py",
                                             "level2/76_Gemm_Add_ReLU.py"]
    picked = kg.problem_files(kb_dir, ["1", "2"], ["76_Gemm_Add_ReLU", "23_Softmax.py"])
    assert [f.name for f in picked] == ["23_Softmax.py", "76_Gemm_Add_ReLU.py"]
    with pytest.raises(SystemExit, match="level3"):
        kg.problem_files(kb_dir, ["3"], None)
    with pytest.raises(SystemExit, match="none of these"):
        kg.problem_files(kb_dir, ["1"], ["99_Nothing"])


def test_coverage_is_decided_by_building_the_generated_op(kb_dir: Path) -> None:
    soft = kg.cover_one(kb_dir / "level1" / "23_Softmax.py")
    assert soft["covered"] and soft["family"] == "rowwise" and soft["level"] == "1"
    conv = kg.cover_one(kb_dir / "level2" / "1_Conv2D_ReLU.py")
    assert not conv["covered"]
    assert conv["reason"].startswith("codegen: ") and "convolution" in conv["reason"]


def test_costs_count_the_matmul_and_every_byte(kb_dir: Path) -> None:
    from porter.specs import load_spec

    spec = load_spec(kb_dir / "level2" / "76_Gemm_Add_ReLU.py")
    nbytes, flops = kg.costs(spec, spec.shapes[0], torch.float32)
    assert flops == 2 * 32 * 64 * 48
    # x, the weight, the bias, and the output, in fp32
    assert nbytes == 4 * (32 * 64 + 48 * 64 + 48 + 32 * 48)
    spec = load_spec(kb_dir / "level1" / "23_Softmax.py")
    assert kg.costs(spec, spec.shapes[0], torch.float32) == (2 * 4 * 64 * 1000, 0)


def test_ceilings_say_which_and_pick_the_bound() -> None:
    import hwmodels

    hw = hwmodels.get("h100")
    c = kg.ceilings(hw, torch.float32)
    assert c["copy_gbps"] == hw.measured_value("copy_bandwidth_gbps")
    assert c["copy_source"] == "measured copy bandwidth"
    # no fp32 matmul was measured: the datasheet's fp32 rate, said so
    assert c["matmul_tflops"] == hw.peak_tflops("fp32")
    assert c["matmul_source"] == "datasheet fp32 dense rate"
    cb = kg.ceilings(hw, torch.bfloat16)
    assert cb["matmul_source"] == "measured bf16 matmul"
    # a 1024x8192x8192 fp32 gemm is compute-bound; a softmax is memory-bound
    bound, text = kg.bound_of(4 * (1024 * 8192 * 3), 2 * 1024 * 8192 * 8192, c)
    assert bound == "compute" and text.startswith("datasheet fp32 dense rate")
    assert kg.bound_of(10**9, 0, c)[0] == "memory"
    # moving the bytes at exactly the copy bandwidth is 100%
    ms = 10**9 / (c["copy_gbps"] * 1e9) * 1e3
    assert kg.pct_of_ceiling(10**9, 0, ms, c, "memory") == pytest.approx(100.0)


def _args(tmp_path: Path, **kw: Any) -> argparse.Namespace:
    return kg.parse([str(tmp_path), "--out", str(tmp_path / "out"), *[
        x for k, v in kw.items() for x in (f"--{k.replace('_', '-')}", str(v))]])


def test_a_hung_candidate_resumes_once_and_a_hang_costs_one_row(
        kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = kb_dir / "level1" / "23_Softmax.py"
    answers = [(3, "", "porter port: ... taken to be hung"), (0, '{"file": "23_Softmax.py", '
               '"level": "1", "verdict": "timed"}', "")]
    calls: list[list[str]] = []

    def fake(argv: list[str], timeout: float, env: dict[str, str], log: Path) -> Any:
        calls.append(argv)
        assert "TRITON_INTERPRET" not in env
        return answers.pop(0)

    monkeypatch.setattr(kg, "run_child", fake)
    row = kg.measure(f, tmp_path / "out", _args(tmp_path))
    assert len(calls) == 2 and row["verdict"] == "timed" and row["key"] == "level1/23_Softmax.py"

    monkeypatch.setattr(kg, "run_child", lambda *a: (None, "", "still compiling"))
    row = kg.measure(f, tmp_path / "out", _args(tmp_path, timeout=7))
    # the limit counts the wait for the GPU behind the other file in flight
    assert row["verdict"] == "timeout" and row["reason"] == "no result within 14 s"
    monkeypatch.setattr(kg, "run_child", lambda *a: (1, "", "RuntimeError: CUDA error: boom"))
    row = kg.measure(f, tmp_path / "out", _args(tmp_path))
    assert row["verdict"] == "crash" and row["reason"] == "exit 1: RuntimeError: CUDA error: boom"


def test_list_decides_coverage_once_and_reuses_it(
        kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []

    def in_process(argv: list[str], timeout: float, env: dict[str, str], log: Path) -> Any:
        assert argv[0] == "--cover-one" and env["CUDA_VISIBLE_DEVICES"] == ""
        asked.append(Path(argv[1]).name)
        return 0, json.dumps(kg.cover_one(Path(argv[1]))), ""

    monkeypatch.setattr(kg, "run_child", in_process)
    out = tmp_path / "out"
    argv = [str(kb_dir), "--levels", "1,2", "--out", str(out), "--list", "--jobs", "1"]
    assert kg.main(argv) == 0
    text = capsys.readouterr().out
    assert "level1/23_Softmax.py: covered: rowwise" in text
    assert "level2/76_Gemm_Add_ReLU.py: covered: matmul_epilogue" in text
    assert "level2/1_Conv2D_ReLU.py: not covered: codegen: " in text
    assert len((out / "coverage.jsonl").read_text().splitlines()) == 3
    asked.clear()
    assert kg.main([str(kb_dir), "--out", str(out), "--list"]) == 0
    assert asked == []  # known: not decided again


def _row(file: str, level: str, vs_eager: float, vs_compile: float, **kw: Any) -> dict[str, Any]:
    row = {"key": f"level{level}/{file}", "file": file, "level": level, "verdict": "timed",
           "tier": "measured", "pack_runs": "kernel", "bytes": 128 * 2**20, "flops": 0,
           "bound": "memory", "ceiling": "measured copy bandwidth 3073.3 GB/s",
           "ms": {"pack": 0.1, "eager": 0.1 * vs_eager, "compile": 0.1 * vs_compile},
           "pct": {"pack": 90.0, "eager": 60.0, "compile": 70.0},
           "speedup": {"eager": [vs_eager, vs_eager, vs_eager],
                       "compile": [vs_compile, vs_compile, vs_compile]}}
    row.update(kw)
    return row


def test_summary_has_the_record_and_geometric_means_per_level() -> None:
    meta = {"device": "NVIDIA H100 80GB HBM3", "hw_model": "h100", "date": "2026-11-26",
            "versions": {"torch": "2.11.0", "triton": "3.6.0", "cuda": "13.0",
                         "driver": "580.159.04"},
            "git_rev": "abc", "kb_repo": "ScalingIntelligence/KernelBench", "kb_commit": "423217d",
            "command": "python -m bench.kernelbench_gpu .kb", "method": "interleaved"}
    cover = {f"level1/{n}": {"file": n, "level": "1", "covered": True}
             for n in ("19_ReLU.py", "23_Softmax.py", "36_RMSNorm_.py")}
    cover["level1/54_conv.py"] = {"file": "54_conv.py", "level": "1", "covered": False,
                                  "reason": "codegen: no template covers aten.convolution"}
    cover["level2/76_Gemm.py"] = {"file": "76_Gemm.py", "level": "2", "covered": True}
    rows = [_row("19_ReLU.py", "1", 2.0, 1.0), _row("23_Softmax.py", "1", 8.0, 0.5),
            _row("76_Gemm.py", "2", 1.2, 1.1, bound="compute", flops=10**12),
            {"key": "level2/x.py", "file": "x.py", "level": "2", "verdict": "no kernel",
             "tier": "compiled", "failures": ["8192x8192/fp32: 4 candidates, none passed: "
                                              "tiled x4: misfit (shared memory)"]}]
    cover["level2/x.py"] = {"file": "x.py", "level": "2", "covered": True}
    text, agg = kg.summarize(rows, cover, meta)
    assert "`423217d`" in text and "driver 580.159.04" in text and "triton 3.6.0" in text
    assert agg["1"]["geomean_vs_eager"] == pytest.approx(4.0)
    assert agg["1"]["geomean_vs_compile"] == pytest.approx(0.5 ** 0.5)
    assert agg["1"]["memory_bound_>=64MB"] == 2 and agg["1"]["of_those_>=85%_copy"] == 2
    assert agg["2"]["timed"] == 1 and agg["2"]["run"] == 2
    assert "Below 1.0x torch.compile: 23_Softmax.py." in text
    assert ("Covered but not run yet (the time budget; the same command runs them): "
            "36_RMSNorm_.py") in text
    assert "- 54_conv.py: codegen: no template covers aten.convolution" in text
    # a file with no passing candidate says why, per class
    assert "tiled x4: misfit (shared memory)" in text


@pytest.mark.gpu
@pytest.mark.slow
def test_end_to_end_on_the_gpu(kb_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert kg.main([str(kb_dir), "--levels", "1,2", "--out", str(out), "--files",
                    "23_Softmax,76_Gemm_Add_ReLU", "--kb-commit", "test", "--jobs", "2"]) == 0
    res = json.loads((out / "results.json").read_text())
    rows = {r["file"]: r for r in res["rows"]}
    assert set(rows) == {"23_Softmax.py", "76_Gemm_Add_ReLU.py"}
    for r in rows.values():
        assert r["verdict"] == "timed", r
        assert set(r["ms"]) == {"pack", "eager", "compile"} and r["inputs_nonzero"]
    assert rows["76_Gemm_Add_ReLU.py"]["flops"] == 2 * 32 * 64 * 48
    assert res["meta"]["kb_commit"] == "test" and (out / "SUMMARY.md").is_file()


@pytest.mark.slow
def test_the_childs_flow_on_a_cpu_with_a_stand_in_timer(
        kb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_one end to end except the GPU: the port (interpreted tier here), the loaded pack
    and the file's own Model are called on the same inputs and must agree (same weights), and
    the row is built from the timer's rows."""
    import hwmodels
    from harness import bench_op as bench_op_module
    from harness.bench_op import BenchRow
    from harness.timing import Ratio

    seen: dict[str, Any] = {}

    def timer(problem: Any, providers: Any, *, hw: Any, shapes: Any, dtypes: Any, reps: int,
              baselines: Any, out_contract: Any) -> list[BenchRow]:
        args = problem.make_inputs(shapes[0], dtypes[0], torch.device("cpu"),
                                   torch.Generator().manual_seed(1))
        seen["pack"] = providers["pack"](*args)
        seen["eager"] = providers["eager"](*args)
        seen["reference"] = problem.reference(*args)
        assert set(providers) == {"pack", "eager", "compile"} and baselines == ["eager", "compile"]
        times = {"pack": 1.0, "eager": 2.0, "compile": 1.5}
        return [BenchRow(op=problem.name, provider=p, shape=tuple(shapes[0]), dtype="fp32",
                         device=hw.name, median_ms=t, p20_ms=t, p80_ms=t, bytes_moved=0, flops=0,
                         speedup={b: Ratio(times[b] / t, times[b] / t, times[b] / t)
                                  for b in baselines if b != p})
                for p, t in times.items()]

    monkeypatch.setattr(kg, "DEVICE", "cpu")
    monkeypatch.setattr(kg, "local_gpu", lambda: (hwmodels.get("h100"), ""))
    monkeypatch.setattr(bench_op_module, "bench_op", timer)
    row = kg.measure_one(kb_dir / "level2" / "76_Gemm_Add_ReLU.py", tmp_path / "out",
                         _args(tmp_path, max_variants=1))
    assert row["verdict"] == "timed" and row["tier"] == "interpreted", row
    assert row["pack_runs"] == "kernel" and row["inputs_nonzero"]
    torch.testing.assert_close(seen["eager"], seen["reference"])
    torch.testing.assert_close(seen["pack"], seen["reference"], atol=1e-4, rtol=1e-4)
    assert row["ms"] == {"pack": 1.0, "eager": 2.0, "compile": 1.5}
    assert row["speedup"]["eager"][0] == 2.0 and row["speedup"]["compile"][0] == 1.5
    assert row["bound"] == "memory" and row["flops"] == 2 * 32 * 64 * 48
    assert row["ceiling"].startswith("measured copy bandwidth")
    assert (tmp_path / "out" / "packs" / "level2" / "kb_76_Gemm_Add_ReLU").is_dir()


def test_one_child_at_a_time_holds_the_gpu(tmp_path: Path) -> None:
    import subprocess
    import sys

    # another process holds the lock; this one waits until that process ends
    code = (f"import sys, time; from pathlib import Path; sys.path.insert(0, {str(kg.REPO)!r}); "
            "from bench import kernelbench_gpu as kg; "
            f"kg.gpu_lock(Path({str(tmp_path)!r})); print('held', flush=True); time.sleep(1.5)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waited = kg.gpu_lock(tmp_path)
    holder.wait()
    assert waited >= 0.5


def test_a_stopped_run_takes_its_children_with_it() -> None:
    import os
    import signal
    import subprocess
    import time

    # a child runs in a session of its own: the parent's stop handler kills its group, and no
    # new child starts afterwards
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    kg._CHILDREN.add(sleeper)
    kg._STOP.clear()
    try:
        with pytest.raises(SystemExit):
            kg._end_children(signal.SIGTERM, None)
        assert kg._STOP.is_set()
        deadline = time.monotonic() + 5
        while sleeper.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sleeper.returncode == -signal.SIGKILL
    finally:
        kg._CHILDREN.discard(sleeper)
        kg._STOP.clear()
        if sleeper.poll() is None:
            os.killpg(sleeper.pid, signal.SIGKILL)
