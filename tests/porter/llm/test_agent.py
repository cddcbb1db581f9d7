"""The agent loop end to end against the stub server through the real SDK, and its replay.

Every kernel in a reply is a fixture written for these tests (tests/porter/llm/fixtures/): they
exercise the loop and the judge, not a model's skill. Candidates are judged for real (the
harness under the Triton interpreter in a child process, and a cross-compile for the target),
on a cumulative sum, which no code-generation template covers.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from porter.ledger import Ledger
from porter.llm.config import LLMConfig
from porter.llm.record import read_exchanges
from porter.llm.run import make_client
from porter.llm.run import run_agent
from porter.packs.format import sha256_file
from porter.packs.verify import read_manifest
from porter.packs.verify import verify_pack
from porter.roles import artifacts as art
from tests.porter.llm.helpers import PLAN
from tests.porter.llm.helpers import ROOT
from tests.porter.llm.helpers import SPEC
from tests.porter.llm.helpers import Script
from tests.porter.llm.helpers import client
from tests.porter.llm.helpers import diagnose
from tests.porter.llm.helpers import kernel
from tests.porter.llm.helpers import prompt_of
from tests.porter.llm.helpers import target_of
from tests.porter.llm.helpers import tool_of
from tests.porter.llm.helpers import write
from tests.porter.llm.stub_server import StubServer
from tests.porter.llm.stub_server import overloaded
from tests.porter.llm.stub_server import tool_reply

MALFORMED = tool_reply("write_kernel", language="triton", kernel_name="_k", notes="no launcher",
                       source="import triton\n\n@triton.jit\ndef _k(x_ptr):\n    pass\n")


def _ledger(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "ledger.jsonl").read_text().splitlines()]


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("networking is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def _replay(spec: Path, targets: list[str], recorded: Path, tmp_path: Path) -> tuple[Path, Path]:
    run, packs = tmp_path / "replay-run", tmp_path / "replay-packs"
    cfg = LLMConfig(parallel=1)  # no key, no base URL: the replay needs neither
    run_agent(spec, targets, packs, run_dir=run, client=make_client(cfg, run, replay=recorded),
              config=cfg)
    return run, packs


def _same_run(a: Path, b: Path, targets: list[str]) -> None:
    """Byte for byte: the kernels written, the exchanges (requests and replies), the verdicts."""
    for t in targets:
        for name in (art.KERNEL_TRITON, art.KERNEL_METAL, art.KERNEL_FIXED, art.CANDIDATES,
                     art.TUNING_PLAN, art.DEBUG_REPORT, art.BENCH_RESULTS):
            if (a / t / name).exists() or (b / t / name).exists():
                assert (a / t / name).read_bytes() == (b / t / name).read_bytes(), (t, name)
    served = [(e["request"], e["response"]) for e in read_exchanges(a) if e["response"]]
    again = [(e["request"], e["response"]) for e in read_exchanges(b)]
    assert json.dumps(served, sort_keys=True) == json.dumps(again, sort_keys=True)
    verdicts = [[(e["target"], e["source_hash"], e["verdict"], e["reason"]) for e in _ledger(r)]
                for r in (a, b)]
    assert verdicts[0] == verdicts[1]


def test_uncovered_op_ports_to_h100_and_mi300x_and_replays_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer's first request meets an overloaded API, then a reply with no launcher (asked
    # again), then the kernel; the second target gets the kernel at once.
    script = Script({"plan": [PLAN], "write_kernel": [overloaded(), MALFORMED, write("good")]})
    run, packs = tmp_path / "run", tmp_path / "packs"
    lines: list[str] = []
    with StubServer(script) as server:
        llm, cfg = client(server.base_url, run)
        result = run_agent(SPEC, ["h100", "mi300x"], packs, run_dir=run, client=llm, config=cfg,
                           progress=lines.append)

    # the pack: both targets at the interpreted tier, intact
    assert verify_pack(result.pack_path).ok
    manifest = read_manifest(result.pack_path)
    assert {(e["target"], e["tier"]) for e in manifest["entries"]} == {
        ("h100", "interpreted"), ("mi300x", "interpreted")}
    for target in ("h100", "mi300x"):
        d = run / target
        plan = art.TuningPlan.from_json((d / art.TUNING_PLAN).read_text())
        assert plan.target == target and len(plan.shapes) == 2
        assert all(s.floor_ms > 0 and s.bytes_moved > 0 for s in plan.shapes)
        assert plan.shapes[0].note.startswith("one program per row")
        ks = art.KernelSource.read_file(d / art.KERNEL_TRITON)
        assert ks.source == kernel("good") and ks.target == target
        rows = art.read_bench_csv(d / art.BENCH_RESULTS)
        assert [(r.target, r.verdict, r.tier) for r in rows] == [(target, "kept", "interpreted")]
        prof = json.loads((d / art.PROFILE_REPORT).read_text())
        k = prof["units"][0]["kernels"][0]
        assert k["kernel"] == "_cumsum_fwd_kernel" and k["registers"] > 0 and k["spill_bytes"] == 0
        assert prof["units"][0]["limits"]["warp_size"] == (64 if target == "mi300x" else 32)
        cands = json.loads((d / art.CANDIDATES).read_text())
        assert [c["config"]["id"] for u in cands.values() for c in u["candidates"]] == ["r1c1"]
        assert json.loads((d / art.DEBUG_REPORT).read_text())["diagnoses"] == []
        roles = [json.loads(x)["role"] for x in (d / "roles.jsonl").read_text().splitlines()]
        assert roles == ["planner", "writer", "profiler"]
        assert {json.loads(x)["implementation"] for x in
                (d / "roles.jsonl").read_text().splitlines()} == {"claude"}
        recorded = {(a["role"], Path(a["path"]).name, a["sha256"])
                    for a in Ledger(run / "ledger.jsonl").artifacts(target)}
        assert {(r, n) for r, n, _ in recorded} == {
            ("planner", art.TUNING_PLAN), ("writer", art.KERNEL_TRITON),
            ("benchmark", art.BENCH_RESULTS), ("search", art.CANDIDATES),
            ("debugger", art.DEBUG_REPORT), ("profiler", art.PROFILE_REPORT)}
        assert all(sha == sha256_file(d / n) for _, n, sha in recorded)
    # every exchange recorded, the 529 and the malformed reply too
    exchanges = read_exchanges(run)
    assert [e["error"] for e in exchanges].count(
        "HTTP 529: overloaded_error (scripted by the test)") == 1
    assert [(e["role"], e["target"]) for e in exchanges if e["response"]] == [
        ("planner", "h100"), ("writer", "h100"), ("writer", "h100"), ("planner", "mi300x"),
        ("writer", "mi300x")]
    summary = result.summary
    assert summary["usage"]["requests"] == 5 and summary["usage"]["malformed"] == 1
    assert summary["usage"]["cache_read_tokens"] > 0 and summary["device_seconds"] > 0
    assert "variants cannot be told apart without timing" in \
        summary["targets"]["h100"]["stop_reason"]
    assert any("r1c1: passed" in line for line in lines)
    # the key is never written into the run folder
    assert not [p for p in run.rglob("*") if p.is_file() and b"test-key" in p.read_bytes()]

    _no_network(monkeypatch)
    replay_run, replay_packs = _replay(SPEC, ["h100", "mi300x"], run, tmp_path)
    _same_run(run, replay_run, ["h100", "mi300x"])
    for entry in read_manifest(replay_packs / "cumsum_t")["entries"]:
        for bucket in entry["buckets"]:
            assert (replay_packs / "cumsum_t" / bucket["file"]).read_bytes() == \
                (packs / "cumsum_t" / bucket["file"]).read_bytes()


def test_compile_failure_is_fixed_by_the_debugger_and_replays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = Script({"plan": [PLAN], "write_kernel": [write("nocompile")],
                     "diagnose": [diagnose("compile", "good", "tl.arange needs constexpr bounds: "
                                           "a BLOCK_N constexpr and a mask")]})
    run = tmp_path / "run"
    with StubServer(script) as server:
        llm, cfg = client(server.base_url, run)
        result = run_agent(SPEC, ["h100"], None, run_dir=run, client=llm, config=cfg)
    ledger = _ledger(run)
    assert [(e["config"]["id"], e["verdict"]) for e in ledger] == [
        ("r1c1", "rejected"), ("r1c1-fix", "kept")]
    assert "compile (compile)" in ledger[0]["reason"]
    assert "arange's arguments must be of type tl.constexpr" in ledger[0]["reason"]
    # the Debugger was shown the compiler's words and the failing source
    debug = next(r for r in server.requests if tool_of(r) == "diagnose")
    text = prompt_of(debug)
    assert "FAILED at stage compile (compile)" in text and "cols = tl.arange(0, n_cols)" in text
    fixed = art.KernelSource.read_file(run / "h100" / art.KERNEL_FIXED)
    assert fixed.source == kernel("good") and fixed.note.startswith("fixes compile (compile)")
    report = art.DebugReport.from_json((run / "h100" / art.DEBUG_REPORT).read_text())
    (diag,) = report.diagnoses
    assert diag.fixed and diag.kind == "compile error" and diag.classification == "compile"
    assert result.summary["targets"]["h100"]["kept"] == "r1c1-fix"

    # the Debugger's request carries the judge's words: the replay (new run folder, new random
    # inputs) must make the same request
    _no_network(monkeypatch)
    replay_run, _ = _replay(SPEC, ["h100"], run, tmp_path)
    _same_run(run, replay_run, ["h100"])


def test_wrong_cheating_and_crashing_kernels_are_rejected_and_the_run_goes_on(
        tmp_path: Path) -> None:
    # Two candidates in parallel: #1 numerically wrong, its fix crashes the process, the next
    # fix is right; #2 lets torch do the work, its fix is right.
    def route(request: dict) -> str:
        text = prompt_of(request)
        if tool_of(request) == "write_kernel":
            return "w1" if "candidate 1 of 2" in text else "w2"
        if tool_of(request) == "diagnose":
            if "torch.cumsum(x, dim=-1, out=y)" in text:
                return "fix-torch"
            return "fix-crash" if "1099511627776" in text else "fix-wrong"
        return tool_of(request)

    script = Script({"plan": [PLAN], "w1": [write("wrong")], "w2": [write("torch")],
                     "fix-wrong": [diagnose("mismatch", "crash", "the element itself was left "
                                            "out; load it at the row's stride")],
                     "fix-crash": [diagnose("crash", "good", "the offset multiplied the stride "
                                            "twice; mask the load")],
                     "fix-torch": [diagnose("cheat", "good", "compute the scan in the kernel")]},
                    route=route)
    run = tmp_path / "run"
    with StubServer(script) as server:
        llm, cfg = client(server.base_url, run, parallel=2)
        result = run_agent(SPEC, ["h100"], None, run_dir=run, client=llm, config=cfg)
    by_id = {}
    for e in _ledger(run):
        by_id.setdefault(e["config"]["id"], []).append(e)
    wrong, crash, fixed1 = by_id["r1c1"][0], by_id["r1c1-fix"][0], by_id["r1c1-fix-fix"]
    assert wrong["verdict"] == "rejected" and wrong["reason"].startswith("smoke (mismatch)")
    assert crash["verdict"] == "rejected" and "crashed: SIGSEGV" in crash["reason"]
    assert "_cumsum_fwd_kernel" in crash["reason"]  # where: the kernel's line, from the child
    cheat = by_id["r1c2"][0]
    assert cheat["verdict"] == "rejected"
    assert cheat["reason"].startswith("rejected as a cheat by the judge's no_torch_compute guard")
    assert "aten.cumsum" in cheat["reason"]
    finals = [fixed1[-1]["verdict"], by_id["r1c2-fix"][-1]["verdict"]]
    assert sorted(finals) == ["kept", "reverted"]
    assert result.summary["targets"]["h100"]["candidates_judged"] == 5
    assert (run / "h100" / art.KERNEL_FIXED).exists()


def test_every_reply_malformed_ends_with_no_kernel_and_says_why(tmp_path: Path) -> None:
    script = Script({"plan": [PLAN], "write_kernel": [MALFORMED]})
    run = tmp_path / "run"
    with StubServer(script) as server:
        llm, cfg = client(server.base_url, run, max_attempts=2, patience=2)
        result = run_agent(SPEC, ["mi300x"], tmp_path / "packs", run_dir=run, client=llm,
                           config=cfg)
    assert result.pack_path is None and not (tmp_path / "packs" / "cumsum_t").exists()
    assert result.summary["targets"]["mi300x"]["stop_reason"] == \
        "2 rounds without improvement (patience 2)"
    (target,) = result.port.targets
    assert target.choices == () and "no candidate passed" in target.failures[0]
    cands = json.loads((run / "mi300x" / art.CANDIDATES).read_text())
    whys = [c["why"] for u in cands.values() for c in u["candidates"]]
    assert len(whys) == 2 and all("2 replies broke the output contract" in w for w in whys)


def test_cuda_kernel_becomes_triton_and_metal_and_replays_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ROOT / "examples" / "cuda_cumsum" / "cuda_spec.py"

    def route(request: dict) -> str:
        return f"{tool_of(request)}:{target_of(request)}"

    script = Script({"plan:h100": [PLAN], "plan:m4": [PLAN],
                     "write_kernel:h100": [write("good")], "write_kernel:m4": [write("metal")]},
                    route=route)
    run, packs = tmp_path / "run", tmp_path / "packs"
    with StubServer(script) as server:
        llm, cfg = client(server.base_url, run)
        result = run_agent(spec, ["h100", "m4"], packs, run_dir=run, client=llm, config=cfg)
    writes = [r for r in server.requests if tool_of(r) == "write_kernel"]
    assert all("__global__ void cumsum_rows" in prompt_of(r) for r in writes)
    assert "Write the Metal kernel for m4" in prompt_of(writes[1])
    assert "Write the Triton kernel for h100" in prompt_of(writes[0])
    entries = {e["target"]: e for e in read_manifest(result.pack_path)["entries"]}
    assert (entries["h100"]["tier"], entries["m4"]["tier"]) == ("interpreted", "emulated")
    metal = art.KernelSource.read_file(run / "m4" / art.KERNEL_METAL)
    assert metal.language == "metal" and "threadgroup float offsets_c[256];" in metal.source
    assert (packs / "cuda_cumsum" / entries["m4"]["buckets"][0]["file"]).read_text() == \
        kernel("metal")

    _no_network(monkeypatch)
    replay_run, _ = _replay(spec, ["h100", "m4"], run, tmp_path)
    _same_run(run, replay_run, ["h100", "m4"])


@pytest.mark.parametrize(("stop_at", "expect_stop", "expect_kept"), [
    (0.9, "1 rounds without improvement (patience 1)", "s1v1"),
    (0.45, "reached 50% of the roofline (stop at 45%)", "s1v1"),
], ids=["patience", "roofline-share"])
def test_on_the_device_search_rounds_keep_the_fastest_and_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_at: float, expect_stop: str,
        expect_kept: str) -> None:
    """The loop's device path with the judge's timing stood in for (the real one needs the GPU:
    see test_device_judge_times_and_rejects_a_cheat): the first kernel is kept, the Search's
    faster variant replaces it, a slower one is reverted, and the loop stops by the rule set."""
    import porter.llm.agent as agent_mod
    from porter.llm.judge import Verdict

    good = kernel("good")
    faster = good.replace("min(1024,", "min(256,")
    slower = good.replace("min(1024,", "min(64,")
    times = {good: 0.100, faster: 0.080, slower: 0.120}

    def fake_judge(spec_path: object, source: str, hw: object, folder: object, *,
                   language: str, on_device: bool = False, **kw: object) -> Verdict:
        assert on_device  # the target is "this machine's GPU"
        t = times[source]
        return Verdict(True, "passed", "ok", "passed on the device", "measured", seconds=1.0,
                       numbers={"time_ms": t, "label": "measured", "floor_ms": 0.040,
                                "pct_of_peak": round(100 * 0.040 / t, 1)})

    monkeypatch.setattr(agent_mod, "judge", fake_judge)
    monkeypatch.setattr(agent_mod, "local_device", lambda: "h100")

    def variant(name: str, source: str) -> dict:
        return {"name": name, "change": f"BLOCK_N {name}", "why": "fewer idle lanes",
                "source": source}

    script = Script({"plan": [PLAN], "write_kernel": [write("good")],
                     "propose_variants": [
                         tool_reply("propose_variants", variants=[variant("256", faster),
                                                                  variant("64", slower)]),
                         tool_reply("propose_variants", variants=[variant("64", slower)])]})
    run = tmp_path / "run"
    with StubServer(script) as server:
        llm, cfg = client(server.base_url, run, stop_at_roofline=stop_at, patience=1)
        result = run_agent(SPEC, ["h100"], tmp_path / "packs", run_dir=run, client=llm,
                           config=cfg)
    summary = result.summary["targets"]["h100"]
    assert summary["stop_reason"] == expect_stop and summary["kept"] == expect_kept
    ledger = _ledger(run)
    assert ("r1c1", "kept") in [(e["config"]["id"], e["verdict"]) for e in ledger]
    assert ("s1v2", "reverted") in [(e["config"]["id"], e["verdict"]) for e in ledger]
    # the Search was shown the best kernel and its numbers, and the Profiler's report
    search = next(r for r in server.requests if tool_of(r) == "propose_variants")
    text = prompt_of(search)
    assert "The current best kernel for this device (kept: {'time_ms': 0.1" in text
    assert "The Profiler's report on the current best kernel" in text
    prof = json.loads((run / "h100" / art.PROFILE_REPORT).read_text())
    assert prof["units"][0]["roofline"]["time_ms"] == 0.08
    assert prof["units"][0]["roofline"]["pct_of_peak"] == 50.0
    cands = json.loads((run / "h100" / art.CANDIDATES).read_text())
    whys = {c["config"]["id"]: c["why"] for u in cands.values() for c in u["candidates"]}
    assert whys["s1v1"] == "BLOCK_N 256: fewer idle lanes"
    entry = read_manifest(result.pack_path)["entries"][0]
    assert entry["tier"] == "measured"
    assert entry["buckets"][0]["numbers"]["time_ms"] == 0.08


@pytest.mark.parametrize(("budget", "expect"), [
    ({"device_budget_s": 0.5}, "device-time budget spent (1 of 0.5 s)"),
    ({"token_budget": 300}, "token budget spent"),
], ids=["device-time", "tokens"])
def test_budgets_stop_the_loop_and_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          budget: dict, expect: str) -> None:
    import porter.llm.agent as agent_mod
    from porter.llm.judge import Verdict

    def fake_judge(*args: object, **kwargs: object) -> Verdict:
        return Verdict(True, "passed", "ok", "passed on the device", "measured", seconds=1.0,
                       numbers={"time_ms": 0.1, "label": "measured", "pct_of_peak": 40.0})

    monkeypatch.setattr(agent_mod, "judge", fake_judge)
    monkeypatch.setattr(agent_mod, "local_device", lambda: "h100")
    run = tmp_path / "run"
    script = Script({"plan": [PLAN], "write_kernel": [write("good")]})
    with StubServer(script) as server:
        llm, cfg = client(server.base_url, run, **budget)
        result = run_agent(SPEC, ["h100"], None, run_dir=run, client=llm, config=cfg)
    assert result.summary["targets"]["h100"]["stop_reason"].startswith(expect)
    assert not any(tool_of(r) == "propose_variants" for r in server.requests)
