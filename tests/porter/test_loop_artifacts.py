"""Every port run writes the six roles' artifacts per target, with their content: the plan, the
candidates, the kept kernel, the Benchmark's rows, the Debugger's report (and its fixed kernel
when it fixed something), the Profiler's report; the ledger records each, roles.jsonl every
exchange. Runs the stand-in generator (fast); test_port.py's real ports cover the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from porter.roles import artifacts as a
from tests.porter.test_port_standin import fake_codegen  # noqa: F401 - fixture


@pytest.fixture()
def ported(fake_codegen: Path, tmp_path: Path):  # noqa: F811 - the fixture above
    from porter.port import port

    run = tmp_path / "runs" / "r1"
    res = port(fake_codegen, ["h100", "mi300x", "m4"], tmp_path / "packs", run_dir=run,
               max_variants=2, progress=lambda line: None)
    return res, run


def test_each_target_gets_the_six_artifacts_with_their_content(ported) -> None:
    res, run = ported
    by = {t.target: t for t in res.targets}
    for target in ("h100", "mi300x", "m4"):
        tdir = run / target
        plan = a.TuningPlan.from_json((tdir / a.TUNING_PLAN).read_text())
        assert plan.target == target and {sp.shape for sp in plan.shapes} == {
            (4096, 4096), (16384, 1024)}
        assert all(sp.floor_ms > 0 and sp.bound in ("memory", "launch") for sp in plan.shapes)

        cands = a.Candidates.from_json((tdir / a.CANDIDATES).read_text(), target)
        assert {u.key for u in cands.units} == {"4096x4096/fp32", "16384x1024/fp32"}
        assert all(0 < len(u.candidates) <= 2 and u.candidates[0].origin == "default"
                   for u in cands.units)

        name = a.KERNEL_METAL if target == "m4" else a.KERNEL_TRITON
        kernel = a.KernelSource.read_file(tdir / name)
        kept = {c.source for c in by[target].choices}
        assert kernel.source in kept and kernel.target == target
        assert kernel.note.startswith("kept for ") and kernel.config in [
            c.config for c in by[target].choices]

        rows = a.read_bench_csv(tdir / a.BENCH_RESULTS)
        assert rows and {r.target for r in rows} == {target}
        kept_rows = [r for r in rows if r.verdict == "kept"]
        assert len(kept_rows) == len(by[target].choices)
        assert all(r.label == "projected" and r.time_ms and r.time_ms > 0 for r in kept_rows)

        report = a.DebugReport.from_json((tdir / a.DEBUG_REPORT).read_text())
        assert report.target == target and report.diagnoses == ()  # nothing failed here
        assert not (tdir / a.KERNEL_FIXED).exists()

        prof = a.ProfileReport.from_json((tdir / a.PROFILE_REPORT).read_text())
        assert {(u.bucket, u.dtype) for u in prof.units} == {
            (c.bucket, c.dtype) for c in by[target].choices}
        for u in prof.units:
            assert u.limits["max_threads_per_block"] > 0 and u.roofline["floor_ms"] > 0
            assert u.counters is None and u.counters_note
            if target != "m4":  # cross-compiled: registers read from the binary
                assert u.kernels and u.kernels[0].registers and u.kernels[0].registers > 0
    # Triton targets reach the interpreted tier, Metal the emitted one: said in the rows
    assert {r.tier for r in a.read_bench_csv(run / "m4" / a.BENCH_RESULTS)} == {"emitted"}


def test_the_ledger_records_each_artifact_and_roles_jsonl_each_exchange(ported) -> None:
    from porter.ledger import Ledger

    _, run = ported
    recorded = Ledger(run / "ledger.jsonl").artifacts("h100")
    roles = {r["role"] for r in recorded}
    assert roles == {"planner", "search", "writer", "benchmark", "debugger", "profiler"}
    assert all(r["implementation"] == "rules" and len(r["sha256"]) == 64 for r in recorded)
    paths = {r["path"] for r in recorded}
    assert "h100/tuning_plan.json" in paths and "h100/kernel.py" in paths
    exchanges = [json.loads(ln) for ln in (run / "h100" / "roles.jsonl").read_text().splitlines()]
    assert [e["role"] for e in exchanges][:2] == ["planner", "search"]
    assert {e["role"] for e in exchanges} >= {"planner", "search", "writer", "benchmark",
                                              "profiler"}
    judge = next(e for e in exchanges if e["role"] == "benchmark")
    # sources are recorded by their hash, not copied into every exchange
    assert judge["request"]["kernels"][0]["source"].startswith("sha256:")
    assert judge["response"] and judge["response"][0]["verdict"] in ("kept", "reverted")


def test_the_debugger_fixes_a_shared_memory_overflow(tmp_path: Path) -> None:
    """Real generator, real cross-compile: at 4096x32768 fp32 the search offers a 3-stage
    persistent rmsnorm that needs 263 KB of shared memory on the H100 (227 KB there); the
    Debugger lowers it to 2 stages, the fix compiles and fits, and kernel_fixed.py carries it
    with the failure it fixes. The fix does not enter the pack (same picks as without it)."""
    from porter.port import port

    root = Path(__file__).resolve().parents[2]
    text = (root / "examples" / "rmsnorm" / "spec.py").read_text()
    text = text.replace('TRITON_KERNEL = "kernel.py::_rmsnorm_fwd_kernel"', "")
    text = text.replace('TRITON_LAUNCHER = "kernel.py::rmsnorm_forward"', "")
    text += "\nSHAPES = [(4096, 32768)]\nDTYPES = [torch.float32]\n"
    spec = tmp_path / "spec.py"
    spec.write_text(text)
    run = tmp_path / "run"
    res = port(spec, ["h100"], None, run_dir=run, max_variants=3, max_checks=1,
               progress=lambda line: None)
    report = a.DebugReport.from_json((run / "h100" / a.DEBUG_REPORT).read_text())
    (diag,) = [d for d in report.diagnoses if d.kind == "misfit (shared memory)"]
    assert diag.config["strategy"] == "persistent" and diag.config["num_stages"] == 3
    assert diag.fix_change == "num_stages 3 -> 2" and diag.fixed
    assert diag.fix_verdict.startswith("fits at (4096, 32768)")
    fixed = a.KernelSource.read_file(run / "h100" / a.KERNEL_FIXED)
    assert fixed.origin == "fixed" and fixed.config == diag.fix_config
    assert "shared memory 263296 B" in fixed.note and "num_stages 3 -> 2" in fixed.note
    assert "def launch(" in fixed.source
    # the fix was verified, not judged: no ledger verdict carries its config
    from porter.ledger import Ledger

    assert all(e.config != diag.fix_config for e in Ledger(run / "ledger.jsonl"))
    assert res.targets[0].choices  # the search's own candidates still got a kernel
