"""End to end: `porter port` of the real rmsnorm example (real codegen, targets, harness) on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def _porter(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh process, as a user would.

    A fresh process because tests/conftest.py sets TRITON_INTERPRET=1 for the whole session, and
    a process whose triton.language was imported interpreted cannot cross-compile kernels that
    call tl.sum & co. (`porter port` cross-compiles in-process and interprets in a child).
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "porter.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)


def _small_spec(tmp: Path) -> Path:
    """examples/rmsnorm/spec.py with two real shapes and two dtypes (keeps the test < 60 s)."""
    text = (ROOT / "examples" / "rmsnorm" / "spec.py").read_text()
    text = text.replace('TRITON_KERNEL = "kernel.py::_rmsnorm_fwd_kernel"', "")
    text = text.replace('TRITON_LAUNCHER = "kernel.py::rmsnorm_forward"', "")
    text += "\nSHAPES = [(4096, 4096), (8192, 8192)]\nDTYPES = [torch.bfloat16, torch.float32]\n"
    spec = tmp / "spec.py"
    spec.write_text(text)
    return spec


def test_port_rmsnorm_cli_end_to_end(tmp_path: Path) -> None:
    from porter.packs.loader import load_pack

    spec = _small_spec(tmp_path)
    run = tmp_path / "runs" / "r"
    args = ["port", str(spec), "--targets", "a100,h100,mi300x,m4", "--out", str(tmp_path / "packs"),
            "--run-dir", str(run), "--max-variants", "2", "--max-checks", "2"]
    res = _porter(*args)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout.splitlines()
    assert out[0] == f"run dir: {run}"
    table = {ln.split()[0]: ln for ln in out if ln.split() and ln.split()[0] in
             ("a100", "h100", "mi300x", "m4")}
    for t in ("a100", "h100", "mi300x"):
        assert "interpreted" in table[t] and "projected" in table[t], table[t]
    # the Metal kernel runs on the CPU Metal executor (g++ is part of set-up): tier emulated
    assert "metal" in table["m4"] and "emulated" in table["m4"]
    assert "shared across targets" in res.stdout
    pack = tmp_path / "packs" / "rmsnorm"
    assert f"pack: {pack}" in res.stdout
    manifest_entries = {e["target"] for e in json.loads(json.dumps(
        __import__("yaml").safe_load((pack / "manifest.yaml").read_text())))["entries"]}
    assert manifest_entries == {"a100", "h100", "mi300x", "m4"}
    assert (run / "bench_results.csv").is_file() and (run / "h100" / "candidates.json").is_file()

    # the written pack runs here (interpreter) and matches the reference
    op = load_pack(pack, device="cpu")
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(33, 1000, generator=gen), torch.randn(1000, generator=gen)
    ref = torch.nn.functional.rms_norm(x, (1000,), w, eps=1e-6)
    assert "INTERPRETER" in op.describe(x, w)
    torch.testing.assert_close(op(x, w), ref, atol=1e-5, rtol=1e-5)

    # a second run with the same run dir redoes nothing
    res2 = _porter(*args)
    assert res2.returncode == 0, res2.stdout + res2.stderr
    assert "checking under" not in res2.stdout and "already judged" in res2.stdout


def test_port_errors_exit_2(tmp_path: Path) -> None:
    from porter.commands.port import port_cmd

    spec = _small_spec(tmp_path)
    res = CliRunner().invoke(port_cmd, [str(spec), "--targets", "h100,tpu9", "--run-dir",
                                        str(tmp_path / "r")])
    assert res.exit_code == 2 and "tpu9" in res.output
    bad = tmp_path / "bad.py"
    bad.write_text("X = 1\n")
    res = CliRunner().invoke(port_cmd, [str(bad), "--targets", "h100", "--run-dir",
                                        str(tmp_path / "r2")])
    assert res.exit_code == 2 and "bad.py" in res.output


def test_judge_refit_runs_the_looped_kernel_where_one_block_cannot_hold_the_row() -> None:
    # A cross-entropy bucket tuned at short rows keeps a one-block config; the judge also runs
    # it at rows too long for one block (the launcher's default there is looped), where it must
    # run the launcher's own config, not a one-block strategy with a looped BLOCK_N.
    import torch.nn.functional as F

    import hwmodels
    from porter.codegen import generate
    from porter.codegen import load_generated_module
    from porter.judge.interpreted import RefittingCandidate

    def ce(x, t):
        return F.cross_entropy(x, t)

    g = torch.Generator().manual_seed(0)
    small = (torch.randn(7, 33, generator=g), torch.randint(0, 33, (7,), generator=g))
    op = generate(ce, small, name="ce_refit")
    module = load_generated_module(op.triton_module_source(), "ce_refit", interpret=True)
    for strategy in ("single_pass", "persistent"):
        cfg = {"strategy": strategy, "ROWS": 1, "BLOCK_N": 64, "num_warps": 2, "num_stages": 3}
        cand = RefittingCandidate(module, op, hwmodels.get("h100"), cfg)
        wide = (torch.randn(3, 20000, generator=g), torch.randint(0, 20000, (3,), generator=g))
        got = cand(*wide)
        assert cand.refitted == [(3, 20000)]
        torch.testing.assert_close(got, ce(*wide), rtol=1e-4, atol=1e-4)
        narrow = (torch.randn(5, 100, generator=g), torch.randint(0, 100, (5,), generator=g))
        torch.testing.assert_close(cand(*narrow), ce(*narrow), rtol=1e-4, atol=1e-4)
        assert cand.refitted == [(3, 20000), (5, 100)]
    # two blocks tuned for 40 columns (32 + 8): at 100 columns the head and tail are re-derived
    # (64 + 64), and the kernel stays the two-block one
    cfg = {"strategy": "two_block", "ROWS": 1, "BLOCK_N": 32, "BLOCK_TAIL": 8, "num_warps": 1}
    cand = RefittingCandidate(module, op, hwmodels.get("h100"), cfg)
    narrow = (torch.randn(5, 100, generator=g), torch.randint(0, 100, (5,), generator=g))
    torch.testing.assert_close(cand(*narrow), ce(*narrow), rtol=1e-4, atol=1e-4)
    assert cand.refitted == [(5, 100)]
    fits = (torch.randn(5, 40, generator=g), torch.randint(0, 40, (5,), generator=g))
    torch.testing.assert_close(cand(*fits), ce(*fits), rtol=1e-4, atol=1e-4)
    assert cand.refitted == [(5, 100)]


def test_deadline_calls_back_only_when_the_block_overruns() -> None:
    import threading
    import time

    from porter.port import deadline

    fired = threading.Event()
    with deadline(0.05, fired.set):
        time.sleep(0.5)
    assert fired.is_set()
    quiet = threading.Event()
    with deadline(0.5, quiet.set):
        pass
    time.sleep(0.7)
    assert not quiet.is_set()


def test_a_hung_candidate_is_recorded_rejected_and_the_run_resumes_without_it(
        tmp_path: Path, monkeypatch, capsys) -> None:
    # What the watchdog does when a candidate's device run passes its deadline (the kernel of
    # bench/NOTES.md item 26 never finished): the ledger gets the verdict before the process
    # ends, so reopening it (a resumed run) finds the candidate judged.
    from types import SimpleNamespace

    import hwmodels
    from porter.judge import device
    from porter.judge.common import Pending
    from porter.ledger import Ledger
    from porter.ledger import candidate_key
    from porter.search import Candidate

    exits: list[int] = []
    monkeypatch.setattr(device, "_exit", exits.append)
    session = SimpleNamespace(ledger=Ledger(tmp_path / "ledger.jsonl"), judged_in_target=0,
                              detail=lambda line: None)
    cfg = {"strategy": "tma_ws", "BLOCK_M": 128, "dtype": "bf16"}
    key = candidate_key("h100", "ab" * 32, cfg, "4096x4096", "bf16")
    pending = Pending(Candidate(cfg), "src", "ab" * 32, key, {}, {}, "compiled")
    device.hung(session, hwmodels.get("h100"), "4096x4096", "bf16", (4096, 4096), pending,
                "its first run at (4096, 4096)")
    assert exits == [device.DEVICE_HUNG_EXIT]
    err = capsys.readouterr().err
    assert "did not finish in" in err and "resumes without it" in err
    reopened = Ledger(tmp_path / "ledger.jsonl")
    entry = reopened.get(key)
    assert reopened.done(key) and entry is not None
    assert entry.verdict == "rejected" and "taken to be hung" in entry.reason


def test_a_candidate_far_slower_than_the_fastest_or_eager_is_not_timed(
        tmp_path: Path, monkeypatch) -> None:
    # drop_slow's rule with the one-call times given (no GPU here): 8x the fastest of the
    # candidates and eager PyTorch, each dropped one rejected in the ledger with its times
    from types import SimpleNamespace

    import hwmodels
    from porter.judge import device
    from porter.judge.common import Pending
    from porter.ledger import Ledger
    from porter.ledger import candidate_key
    from porter.search import Candidate

    def pending(block: int) -> Pending:
        cfg = {"strategy": "split_row", "BLOCK_N": block, "dtype": "fp32"}
        key = candidate_key("h100", "cd" * 32, cfg, "896x2097152", "fp32")
        return Pending(Candidate(cfg), "src", "cd" * 32, key, {}, {}, "compiled")

    session = SimpleNamespace(ledger=Ledger(tmp_path / "ledger.jsonl"), judged_in_target=0,
                              detail=lambda line: None,
                              problem=SimpleNamespace(reference="eager"))
    ms = {"fast": 10.0, "slow": 81.0, "edge": 80.0, "eager": 12.0}
    asked: list[int] = []

    def one_call_ms(fn: str, args: tuple, calls: int = 1) -> float:
        asked.append(calls)
        return ms[fn]

    monkeypatch.setattr(device, "one_call_ms", one_call_ms)
    passing = [(pending(b), name) for b, name in ((1024, "fast"), (2048, "slow"), (4096, "edge"))]
    kept = device.drop_slow(session, hwmodels.get("h100"), "896x2097152", "fp32", (896, 2097152),
                            passing, ())
    assert [name for _, name in kept] == ["fast", "edge"]
    assert asked == [2, 2, 2, 2]  # every time the faster of two calls: a first call can compile
    entry = Ledger(tmp_path / "ledger.jsonl").get(passing[1][0].key)
    assert entry is not None and entry.verdict == "rejected"
    assert "one call took 81 ms, over 8x" in entry.reason and "(10 ms)" in entry.reason
    # every candidate far slower than eager: none is timed, the bucket keeps the reference
    ms.update(eager=1.0)
    assert device.drop_slow(session, hwmodels.get("h100"), "896x2097152", "fp32",
                            (896, 2097152), passing, ()) == []


def test_device_deadline_comes_from_the_environment(monkeypatch) -> None:
    from porter.port import DEVICE_DEADLINE_S
    from porter.port import PortError
    from porter.port import device_deadline_s

    monkeypatch.delenv("PORTER_DEVICE_DEADLINE_S", raising=False)
    assert device_deadline_s() == DEVICE_DEADLINE_S
    monkeypatch.setenv("PORTER_DEVICE_DEADLINE_S", "12.5")
    assert device_deadline_s() == 12.5
    for bad in ("soon", "0", "-3", "inf", "nan"):
        monkeypatch.setenv("PORTER_DEVICE_DEADLINE_S", bad)
        with pytest.raises(PortError, match="PORTER_DEVICE_DEADLINE_S"):
            device_deadline_s()


def test_port_refuses_a_bad_deadline_before_it_starts(tmp_path: Path, monkeypatch) -> None:
    spec = _small_spec(tmp_path)
    monkeypatch.setenv("PORTER_DEVICE_DEADLINE_S", "soon")  # _porter passes it on
    result = _porter("port", str(spec), "--targets", "h100", "--out", str(tmp_path / "p"),
                     "--run-dir", str(tmp_path / "run"))
    assert result.returncode != 0
    assert "PORTER_DEVICE_DEADLINE_S='soon'" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "run" / "ledger.jsonl").exists()  # refused before any candidate


_SPIN = """\
    # never ends: two volatile loads of one value compare equal every time (the GPU test of the
    # port's watchdog, tests/porter/test_port.py)
    a = tl.load(x_ptr, volatile=True)
    b = tl.load(x_ptr, volatile=True)
    while a == b:
        a = tl.load(x_ptr, volatile=True)
        b = tl.load(x_ptr, volatile=True)
"""


@pytest.mark.gpu
def test_watchdog_stops_a_hung_kernel_on_the_gpu_and_the_run_resumes_without_it(
        tmp_path: Path, monkeypatch) -> None:
    """The spec's own Triton kernel spins forever: the port records it rejected when the
    deadline passes and exits with status 3; the same command then finishes without it (the
    generated kernel kept, exit status 4: the user's kernel cannot run there)."""
    import hwmodels
    from porter.ledger import Ledger
    from porter.packs.verify import read_manifest
    from porter.port import DEVICE_HUNG_EXIT
    from porter.user_report import USER_KERNEL_FAILED_EXIT

    lines = (ROOT / "examples" / "rmsnorm" / "kernel.py").read_text().splitlines(keepends=True)
    (row,) = [i for i, line in enumerate(lines) if line.startswith("    row = tl.program_id(0)")]
    lines.insert(row + 1, _SPIN)  # right after the kernel's first line
    (tmp_path / "kernel.py").write_text("".join(lines))
    text = (ROOT / "examples" / "rmsnorm" / "spec.py").read_text()
    text += "\nSHAPES = [(4096, 4096)]\nDTYPES = [torch.float32]\n"
    (tmp_path / "spec.py").write_text(text)
    target = hwmodels.detect().model.name
    args = ("port", str(tmp_path / "spec.py"), "--targets", target, "--out",
            str(tmp_path / "packs"), "--run-dir", str(tmp_path / "run"), "--max-variants", "2",
            "-v")  # -v: the per-candidate lines ("already judged (rejected)")
    monkeypatch.setenv("PORTER_DEVICE_DEADLINE_S", "20")
    hung = _porter(*args)
    assert hung.returncode == DEVICE_HUNG_EXIT, hung.stdout[-2000:] + hung.stderr[-2000:]
    assert "taken to be hung" in hung.stderr
    rejected = [e for e in Ledger(tmp_path / "run" / "ledger.jsonl")
                if e.verdict == "rejected" and "taken to be hung" in e.reason]
    assert [e.config.get("origin") for e in rejected] == ["existing"]
    resumed = _porter(*args)
    # the generated kernel is kept; the exit status still says the user's kernel cannot run
    assert resumed.returncode == USER_KERNEL_FAILED_EXIT, (resumed.stdout[-2000:]
                                                           + resumed.stderr[-2000:])
    assert "already judged (rejected)" in resumed.stdout + resumed.stderr
    manifest = read_manifest(tmp_path / "packs" / "rmsnorm")
    assert {b["origin"] for e in manifest["entries"] for b in e["buckets"]} == {"generated"}


def test_device_checks_are_not_shared_across_launch_knobs() -> None:
    """The interpreter's check is shared between configs that differ only in launch knobs (it
    computes the same), the device's is not: there num_stages decides whether the kernel fits
    in shared memory at the judge's shapes (bench/NOTES.md item 31)."""
    from porter.judge.common import Pending
    from porter.judge.common import check_key
    from porter.judge.common import device_check_key
    from porter.search import Candidate

    base = {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "FLATTEN": True,
            "num_warps": 8, "dtype": "bf16"}

    def pending(stages: int) -> Pending:
        cfg = {**base, "num_stages": stages}
        return Pending(Candidate(cfg), "src", "ab" * 32, "key", {}, {}, "compiled")

    three, four = pending(3), pending(4)
    assert check_key(three) == check_key(four)
    assert device_check_key(three, "bf16") != device_check_key(four, "bf16")
    assert device_check_key(three, "bf16") == device_check_key(pending(3), "bf16")


def test_a_config_near_the_shared_memory_limit_is_compiled_at_the_judges_shapes(
        monkeypatch) -> None:
    """Triton specializes per launch (an int that is not a multiple of 16 loses its hint); a
    config that fits at its bucket can need more shared memory at a judge shape. The compile
    tier compiles each distinct specialization at the judge's shapes once and names the shape
    that does not fit (bench/NOTES.md item 31); where every one fits it says nothing."""
    from types import SimpleNamespace

    from porter.judge import compile_tier
    from porter.search import Candidate
    from targets.base import KernelRef

    def ref_at(shape: tuple[int, ...]) -> KernelRef:
        n = shape[-1]
        return KernelRef(name="k", signature={"n": "i32:16" if n % 16 == 0 else "i32"})

    class GenOp:
        def kernel_refs(self, inputs, variant, source_path):
            return [ref_at(tuple(inputs[0].shape))]

    compiled: list[dict[str, str]] = []

    def compile_(kref, lc, hw):
        compiled.append(kref.signature)
        aligned = kref.signature["n"] == "i32:16"
        return SimpleNamespace(fits=aligned or not tight,
                               reasons=[] if aligned else ["shared memory 262176 B > 232448 B"])

    session = SimpleNamespace(problem=SimpleNamespace(
        smoke_shape=(7, 33), sweep_shapes=[(64, 64), (128, 4096)], odd_shapes=(), extra={},
        make_inputs=lambda shape, dtype, device, gen: (torch.empty(shape, device="meta"),)),
        gen_op=GenOp())
    monkeypatch.setattr(compile_tier, "source_file", lambda session, cand: Path("unused.py"))
    backend = SimpleNamespace(name="triton-cuda", compile=compile_)
    cand = Candidate({"num_warps": 8, "num_stages": 4})

    tight = True
    why = compile_tier.misfit_at_judge_shapes(session, None, backend, cand, (64, 64),
                                              torch.bfloat16, [ref_at((64, 64))])
    assert "(7, 33)" in why and "262176" in why and "fits at (64, 64)" in why
    assert compiled == [{"n": "i32"}]  # the aligned specialization was the bucket's: not redone
    tight, compiled[:] = False, []
    assert compile_tier.misfit_at_judge_shapes(session, None, backend, cand, (64, 64),
                                               torch.bfloat16, [ref_at((64, 64))]) == ""
    assert compiled == [{"n": "i32"}]  # one compile per distinct specialization


def test_a_reference_failing_at_a_later_sweep_shape_fails_the_port_with_the_cause(
        tmp_path: Path) -> None:
    # The reference passes the smoke shape and raises at a sweep shape: no candidate can pass,
    # and the port must say why and exit non-zero (it used to exit 0 with an empty pack).
    spec = _small_spec(tmp_path)
    spec.write_text(spec.read_text() + '''
_reference = reference


def reference(x, weight):
    if x.device.type != "meta" and x.numel() > 5000:
        raise RuntimeError("too many rows for this reference")
    return _reference(x, weight)
''')
    res = _porter("port", str(spec), "--targets", "h100", "--out", str(tmp_path / "packs"),
                  "--run-dir", str(tmp_path / "run"), "--max-variants", "1", "--max-checks", "2")
    assert res.returncode in (1, 2), res.stdout[-3000:] + res.stderr[-3000:]
    assert "too many rows for this reference" in res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tmp_path / "packs" / "rmsnorm").exists()


def test_device_deadline_precedence_and_scaling(monkeypatch) -> None:
    from porter.port import DEADLINE_MAX_S
    from porter.port import PortError
    from porter.port import device_deadline_s
    from porter.port import scaled_deadline_s

    monkeypatch.setenv("PORTER_DEVICE_DEADLINE_S", "40")
    assert device_deadline_s(7.5, default=300.0) == 7.5  # --deadline wins over the variable
    assert device_deadline_s(None, default=300.0) == 40.0  # the variable over the default
    monkeypatch.delenv("PORTER_DEVICE_DEADLINE_S")
    assert device_deadline_s(None, default=123.0) == 123.0
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(PortError, match="--deadline"):
            device_deadline_s(bad)
    # the default grows with the work (shapes to compile, the largest shape's floor), capped
    small, more_shapes = scaled_deadline_s(0.01, 5), scaled_deadline_s(0.01, 12)
    big = scaled_deadline_s(5.0, 5)
    assert small < more_shapes and small < big <= DEADLINE_MAX_S
    assert scaled_deadline_s(1e6, 5) == DEADLINE_MAX_S


def test_port_cli_refuses_a_bad_deadline(tmp_path: Path) -> None:
    from porter.commands.port import port_cmd

    spec = _small_spec(tmp_path)
    res = CliRunner().invoke(port_cmd, [str(spec), "--targets", "h100", "--deadline", "0",
                                        "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "--deadline" in res.output


def test_search_budget_defaults() -> None:
    # the CPU tier's defaults stay (the CPU picks must not change); the GPU gets a cap and a
    # time budget; a stated cap is never cut by time; --exhaustive lifts both
    from porter.port import CPU_MAX_CHECKS
    from porter.port import CPU_MAX_VARIANTS
    from porter.port import DEVICE_MAX_VARIANTS
    from porter.port import DEVICE_TIME_BUDGET_S
    from porter.port import resolve_budget

    def budget(on_gpu: bool, **kw):
        args = {"max_variants": None, "max_checks": None, "exhaustive": False,
                "time_budget_s": None, **kw}
        return resolve_budget(on_gpu=on_gpu, **args)

    assert budget(False) == (CPU_MAX_VARIANTS, CPU_MAX_CHECKS, None) == (3, 6, None)
    assert budget(True) == (DEVICE_MAX_VARIANTS, None, DEVICE_TIME_BUDGET_S)
    assert budget(True, max_variants=12) == (12, None, None)
    assert budget(True, max_variants=12, time_budget_s=30.0) == (12, None, 30.0)
    assert budget(True, exhaustive=True) == (None, None, None)
    assert budget(False, exhaustive=True) == (None, CPU_MAX_CHECKS, None)


def test_time_budget_trims_later_units_to_what_is_left() -> None:
    import time

    from porter import budget
    from porter.search import Candidate

    cands = tuple(Candidate({"num_warps": w}) for w in (1, 2, 4, 8, 16, 32, 64, 128))
    judged = 20  # 20 candidates in 40 s: 2 s each
    started = time.perf_counter() - 40.0
    # 80 s left for 4 units: 20 s each, all 8 candidates fit
    assert budget.within_time_budget(cands, 7, 10, started, judged, 120.0) == cands
    # 80 s left for 20 units: 4 s each, two candidates (the search's first two)
    assert budget.within_time_budget(cands, 6, 25, started, judged, 120.0) == cands[:2]
    # past the budget: never below DEVICE_MIN_VARIANTS
    late = time.perf_counter() - 500.0
    assert len(budget.within_time_budget(cands, 6, 10, late, judged, 120.0)) == (
        budget.DEVICE_MIN_VARIANTS)
    # no time budget or the first unit: untouched (projected targets never call it: the loop)
    assert budget.within_time_budget(cands, 1, 25, started, judged, 120.0) == cands
    assert budget.within_time_budget(cands, 6, 25, started, judged, None) == cands


@pytest.mark.parametrize("reason, brief", [
    ("_rmsnorm_kernel does not fit: registers 300 > 255 per thread", "misfit (registers)"),
    (("k fits at (64, 64) but not at the judge's (7, 33): shared memory 262176 B > "
      "232448 B"), "misfit (shared memory)"),
    (("sweep: output 0: 5 of 10 elements out of tolerance; max abs err 3.000e-01, max rel err "
      "1; tolerance x (input 'random', shape (64, 128), dtype bf16, seed 0x1)"),
     "failed sweep at bf16 (max abs err 3.000e-01)"),
    (("odd_sizes: output 0: 3 of 9 elements are NaN/Inf where the reference is finite (input "
      "'random', shape (1023, 7), dtype fp16, seed 0x2)"),
     "failed odd_sizes at fp16 (NaN/Inf where the reference is finite)"),
    ("interpreted check crashed (exit -11): a | b | Segmentation fault",
     "crashed (Segmentation fault)"),
    (("its first run at (4096, 4096) did not finish in 300 s: taken to be hung (a CUDA kernel "
      "cannot be stopped from the host)"), "hung"),
], ids=["registers", "smem-at-judge-shape", "sweep", "nan", "crash", "hung"])
def test_rejections_are_told_in_a_few_words(reason: str, brief: str) -> None:
    from porter.port import brief_reason

    assert brief_reason(reason) == brief


def test_earlier_winners_are_tried_first_on_the_device() -> None:
    # a config kept at an earlier unit of the target (another dtype or bucket) goes first, the
    # latest winner before older ones; the rest keep the search's order
    from porter.budget import capped_list as _capped_list
    from porter.search import Candidate
    from porter.search import winners_first as _winners_first

    cands = tuple(Candidate({"BLOCK_M": m, "dtype": "fp16"}) for m in (64, 128, 256, 32))
    winners = [{"BLOCK_M": 32}, {"BLOCK_M": 256}]
    ordered = _winners_first(cands, winners)
    assert [c.config["BLOCK_M"] for c in ordered] == [256, 32, 64, 128]
    assert [c.config["BLOCK_M"] for c in _capped_list(ordered, 2)] == [256, 32]
    assert _winners_first(cands, []) == cands


def test_capped_search_result_counts_what_it_left_out() -> None:
    from porter.budget import capped as _capped
    from porter.search import Candidate
    from porter.search import SearchResult

    sr = SearchResult(tuple(Candidate({"w": w}) for w in range(5)), (), space_size=9, capped=2)
    three = _capped(sr, 3)
    assert [c.config["w"] for c in three.candidates] == [0, 1, 2] and three.capped == 4
    assert _capped(sr, None) is sr and _capped(sr, 8) is sr


def test_port_cli_says_a_garbage_store_in_one_line(tmp_path: Path) -> None:
    """A --store file that is not a results store gave a 35-line traceback (issue 48)."""
    from porter.commands.port import port_cmd

    spec = _small_spec(tmp_path)
    bad = tmp_path / "store.sqlite"
    bad.write_text("garbage")
    res = CliRunner().invoke(port_cmd, [str(spec), "--targets", "h100", "--store", str(bad),
                                        "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "--store" in res.output and "not a usable results store" in \
        res.output
    assert "Traceback" not in res.output
