"""The keep/revert ledger: verdicts, durability, and resume after an interrupt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from porter.ledger import Ledger
from porter.ledger import candidate_key


def _judge(ledger: Ledger, i: int, t: float | None, *, passed: bool = True,
           label: str = "projected", tier: str = "interpreted", bucket: str = "4096x4096",
           target: str = "h100"):
    numbers = {} if t is None else {"time_ms": t, "label": label}
    return ledger.judge(target=target, bucket=bucket, dtype="bf16", config={"num_warps": i},
                        src_hash=f"{i:064x}", tier=tier, passed=passed,
                        reason_failed="sweep: off by 0.3", numbers=numbers)


def test_keeps_fastest_and_reverts_slower(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "ledger.jsonl")
    assert _judge(led, 1, 2.0).verdict == "kept"
    slower = _judge(led, 2, 3.0)
    assert slower.verdict == "reverted" and "slower" in slower.reason
    faster = _judge(led, 4, 1.0)
    assert faster.verdict == "kept"
    assert led.kept("h100", "4096x4096", "bf16").config == {"num_warps": 4}
    # the first keep was demoted, and the history of that is on disk
    first_key = candidate_key("h100", f"{1:064x}", {"num_warps": 1}, "4096x4096", "bf16")
    assert led.get(first_key).verdict == "reverted"
    failed = _judge(led, 8, 0.1, passed=False)
    assert failed.verdict == "rejected" and "sweep" in failed.reason
    assert led.kept("h100", "4096x4096", "bf16").config == {"num_warps": 4}


def test_projection_never_displaces_measurement(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.jsonl")
    _judge(led, 1, 2.0, label="measured", tier="measured")
    e = _judge(led, 2, 0.5, label="projected")
    assert e.verdict == "reverted" and "measured" in e.reason


def test_buckets_are_judged_apart(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.jsonl")
    _judge(led, 1, 2.0, bucket="1024x1024")
    assert _judge(led, 2, 9.0, bucket="8192x8192").verdict == "kept"


def test_every_line_is_on_disk_and_csv(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    led = Ledger(path)
    for i, t in enumerate([3.0, 2.0, 5.0]):
        _judge(led, i, t)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["verdict"] for x in lines] == ["kept", "reverted", "kept", "reverted"]
    csv_text = led.write_csv(tmp_path / "bench_results.csv").read_text()
    assert csv_text.splitlines()[0].startswith("target,bucket,dtype,config")
    assert len(csv_text.splitlines()) == 1 + 3  # header + latest verdict per candidate


def _run(path: Path, configs: list[int], stop_after: int | None = None) -> list[int]:
    """A fake search loop: judges each config unless the ledger has it; returns what it ran."""
    led = Ledger(path)
    ran = []
    for i in configs:
        key = candidate_key("mi300x", f"{i:064x}", {"num_warps": i}, "4096x4096", "bf16")
        if led.done(key):
            continue
        if stop_after is not None and len(ran) == stop_after:
            raise KeyboardInterrupt
        _judge(led, i, float(10 - i), target="mi300x")
        ran.append(i)
    return ran


def test_resume_after_interrupt_does_only_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(path, [1, 2, 4, 8, 16], stop_after=2)
    assert _run(path, [1, 2, 4, 8, 16]) == [4, 8, 16]
    assert _run(path, [1, 2, 4, 8, 16]) == []
    led = Ledger(path)
    assert led.kept("h100", "4096x4096", "bf16") is None
    # the fastest of all five (10 - 16 < 10 - 8 ...) is kept across the interruption
    kept = [e for e in led if e.verdict == "kept"]
    assert [e.config["num_warps"] for e in kept] == [16]


def test_torn_last_line_is_dropped_and_rerun(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _run(path, [1, 2])
    with path.open("a") as fh:
        fh.write('{"target": "mi300x", "buck')  # the process died mid-write
    assert _run(path, [1, 2, 4]) == [4]
    assert all(json.loads(x) for x in path.read_text().splitlines())


def test_corruption_before_the_last_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _run(path, [1])
    path.write_text("garbage\n" + path.read_text())
    with pytest.raises(ValueError, match="ledger.jsonl:1"):
        Ledger(path)


def test_a_skipped_candidate_is_not_done(tmp_path: Path) -> None:
    # skipped = not judged (e.g. the check budget was spent): a resumed run with budget left
    # must check it, so it is not "done"; a later verdict for the same key makes it done
    led = Ledger(tmp_path / "l.jsonl")
    skipped = led.skip(target="h100", bucket="4096x4096", dtype="bf16", config={"num_warps": 4},
                       source_hash=f"{4:064x}", tier="compiled", reason="check budget spent")
    assert not led.done(skipped.key) and not Ledger(tmp_path / "l.jsonl").done(skipped.key)
    judged = _judge(led, 4, 1.0)
    assert judged.key == skipped.key and led.done(judged.key)
    assert Ledger(tmp_path / "l.jsonl").done(judged.key)


@pytest.mark.parametrize("bad", ['["a", "list"]', '{"target": "h100"}', '{"verdict": "maybe"}',
                                 "not json"],
                         ids=["json-list", "missing-fields", "unknown-verdict", "not-json"])
def test_a_corrupted_line_names_the_file_and_line(tmp_path: Path, bad: str) -> None:
    # a complete line (newline-terminated) that is not an entry is corruption, also as the last
    # line: only a line with no newline yet can be a torn write
    from porter.errors import PorterError
    from porter.ledger import LedgerError

    path = tmp_path / "ledger.jsonl"
    _run(path, [1, 2])
    good = path.read_text().splitlines()
    for lineno, lines in ((2, [good[0], bad, *good[1:]]), (len(good) + 1, [*good, bad])):
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(LedgerError, match=rf"ledger.jsonl:{lineno}: not a ledger entry") as err:
            Ledger(path)
        assert isinstance(err.value, PorterError) and "\n" not in str(err.value)
        assert path.read_text() == "\n".join(lines) + "\n"  # never truncated
