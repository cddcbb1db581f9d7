"""The tuning cache (porter.packs.tuning): entries kept per pack and device, verified when read,
safe for concurrent writers, carried between machines; the loader using them; the candidates."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from porter.packs import tuning
from porter.packs.loader import load_pack
from tests.porter.test_loader_forms import _pack
from tests.porter.test_loader_forms import _probe

FILES = {"nvidia/h100/k.py": "ab" * 32}


def _tuned(shape: tuple[int, ...] = (100, 300), runs: str = "kernel",
           file: str = "nvidia/h100/k.py", sha: str = "ab" * 32) -> tuning.Tuned:
    return tuning.Tuned(shape, "fp32", runs, file if runs == "kernel" else None,
                        sha if runs == "kernel" else None,
                        {"strategy": "single_pass", "BLOCK_N": 512, "num_warps": 4}
                        if runs == "kernel" else None,
                        {"binding_us": 9.0, "device_us": 5.0, "eager_binding_us": 12.0,
                         "tried": 3}, "2026-12-02T00:00:00+00:00")


def test_entries_round_trip_and_are_verified_when_read(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    cache = tuning.TuningCache(tmp_path, "f" * 64, "h100", FILES)
    cache.put(_tuned())
    again = tuning.TuningCache(tmp_path, "f" * 64, "h100", FILES)
    got = again.get((100, 300), "fp32")
    assert got is not None and got.config == _tuned().config and got.runs == "kernel"
    assert again.get((100, 301), "fp32") is None
    assert tuning.TuningCache(tmp_path, "e" * 64, "h100", FILES).get((100, 300), "fp32") is None
    assert tuning.TuningCache(tmp_path, "f" * 64, "h200", FILES).get((100, 300), "fp32") is None
    # an edited entry (its sha256 no longer matches) is refused, with a line saying so
    data = json.loads(cache.path.read_text())
    data["entries"]["100x300/fp32"]["config"]["BLOCK_N"] = 64
    cache.path.write_text(json.dumps(data))
    edited = tuning.TuningCache(tmp_path, "f" * 64, "h100", FILES)
    assert edited.get((100, 300), "fp32") is None
    assert edited.refused and "sha256 does not match" in edited.refused[0]
    # an entry naming a file the pack does not hold with that sha256 is refused
    other = tuning.TuningCache(tmp_path / "b", "f" * 64, "h100", FILES)
    other.put(_tuned(sha="cd" * 32))
    assert other.get((100, 300), "fp32") is None and "not in this pack" in other.refused[0]
    # a garbage file is not a crash
    cache.path.write_text("{not json")
    assert tuning.TuningCache(tmp_path, "f" * 64, "h100", FILES).entries() == {}
    assert "unreadable" in caplog.text


def _writer(root: str, start: int) -> None:
    cache = tuning.TuningCache(root, "f" * 64, "h100", FILES)
    for i in range(start, start + 15):
        cache.put(_tuned(shape=(i, 300)))


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), s)) for s in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    cache = tuning.TuningCache(tmp_path, "f" * 64, "h100", FILES)
    assert len(cache.entries()) == 30


def test_export_and_import_carry_verified_entries(tmp_path: Path) -> None:
    a = tuning.TuningCache(tmp_path / "a", "f" * 64, "h100", FILES)
    a.put(_tuned())
    a.put(_tuned(shape=(7, 9), runs="reference"))
    assert a.export(tmp_path / "x.json") == 2
    b = tuning.TuningCache(tmp_path / "b", "f" * 64, "h100", FILES)
    assert b.import_(tmp_path / "x.json") == (2, [])
    assert b.get((7, 9), "fp32").runs == "reference"
    with pytest.raises(tuning.TuningError, match="not evidence for another"):
        tuning.TuningCache(tmp_path / "c", "f" * 64, "h200", FILES).import_(tmp_path / "x.json")
    with pytest.raises(tuning.TuningError, match="re-tune"):
        tuning.TuningCache(tmp_path / "c", "e" * 64, "h100", FILES).import_(tmp_path / "x.json")
    data = json.loads((tmp_path / "x.json").read_text())
    data["entries"]["7x9/fp32"]["runs"] = "kernel"
    (tmp_path / "y.json").write_text(json.dumps(data))
    c = tuning.TuningCache(tmp_path / "c", "f" * 64, "h100", FILES)
    merged, refused = c.import_(tmp_path / "y.json")
    assert merged == 1 and len(refused) == 1 and "7x9" in refused[0]


def test_candidates_are_bounded_and_distinct() -> None:
    def rules(file: str, form: str | None) -> tuple[dict[str, Any] | None, str]:
        if form == "split_coop":
            return None, "no split_coop here"
        return {"strategy": "looped" if form == "looped" else "single_pass", "num_warps": 8}, \
            "rowwise_default"

    neighbours = [("f.py", {"strategy": "single_pass", "num_warps": 8}, "64x256"),
                  ("f.py", {"strategy": "single_pass", "num_warps": 2}, "128x256")]
    got = tuning.candidates(rules, neighbours, "f.py", "bf16", 8)
    configs = [(c.config["strategy"], c.config["num_warps"]) for c in got]
    assert configs == [("single_pass", 8), ("looped", 8), ("single_pass", 2),
                       ("single_pass", 4), ("single_pass", 16)]
    assert all(c.config["dtype"] == "bf16" for c in got)
    assert len(tuning.candidates(rules, neighbours, "f.py", "bf16", 2)) == 2


def test_the_loader_runs_what_the_cache_holds(tmp_path: Path) -> None:
    pack = _pack(tmp_path, leading_dims=_probe())
    op = load_pack(pack, device="h100", tuning_cache=tmp_path / "cache")
    b = op.manifest["entries"][0]["buckets"][0]
    x = (torch.empty(100, 300, device="meta"), torch.empty(300, device="meta"))
    before = op.choose(*x)
    assert "tuned" not in before.reason
    assert op.tuning is not None
    op.tuning.put(_tuned(file=b["file"], sha=op.manifest["files"][b["file"]]))
    c = op.choose(*x)
    assert "tuned on this device" in c.reason and c.config["BLOCK_N"] == 512
    assert c.runs_kernel and "tuning cache" in c.basis
    op.tuning.put(_tuned(shape=(100, 300), runs="reference"))
    c = op.choose(*x)
    assert not c.runs_kernel and "eager is faster" in c.reference_why
    # a CPU-only load uses no cache; tuning there is one line, exit 2
    assert load_pack(pack, device="cpu").tuning is None
    from porter.cli import main

    r = CliRunner().invoke(main, ["pack", "tune", str(pack), "--shapes", "100x300"])
    assert r.exit_code == 2 and "tuning runs on a GPU" in r.output
    r = CliRunner().invoke(main, ["pack", "tune", str(pack), "--shapes", "100xabc"])
    assert r.exit_code == 2 and "not a shape" in r.output
