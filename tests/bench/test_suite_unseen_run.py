"""bench/suite.py --unseen and --unseen-only end to end with the GPU parts stood in for (the
device, the port, the pack, the timing): which units are timed, which pack is used, how the
rows are marked and resumed. The timing itself runs on the GPU (docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import bench.suite as suite
from harness.bench_op import BenchRow
from harness.roofline import dtype_key
from harness.timing import Ratio
from porter.packs.loader import Choice


class FakePack:
    """choose(): the exact bucket at the spec's shapes, a derived config elsewhere."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def choose(self, x: torch.Tensor, *rest: Any) -> Choice:
        from porter.packs.format import shape_bucket

        asked = f"{shape_bucket(x.shape)}/bf16"
        exact = any(shape_bucket(s) == shape_bucket(x.shape)
                    for s, _ in suite.suite_units("softmax"))
        b = {"bucket": asked.split("/")[0] if exact else "4096x4096", "dtype": "bf16",
             "file": "k.py", "config": {"num_warps": 8}}
        return Choice("h100", b, False, "test", {"num_warps": 4 if not exact else 8},
                      "own" if exact else "derived for this shape by the module's own rule",
                      evidence="" if exact else "timed neighbours: ...", asked=asked,
                      reference_why="estimated slower" if x.shape[-1] > 40000 else None)

    def __call__(self, *a: Any) -> Any:
        return a[0]

    def force_kernel(self, *a: Any) -> Any:
        return a[0]


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    import hwmodels
    import porter.packs.loader
    import porter.port
    import porter.specs

    calls: dict[str, list[Any]] = {"port": [], "timed": [], "loaded": []}
    hw = hwmodels.get("h100")
    monkeypatch.setattr(hwmodels, "detect", lambda: SimpleNamespace(
        model=hw, device_name="TestGPU", reason="test", via="test"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("harness.env_info.versions", lambda: {"torch": "test"})
    monkeypatch.setattr(torch, "compile", lambda fn: fn)
    monkeypatch.setattr(torch, "Generator", lambda *a, **k: None)  # no CUDA generator here
    monkeypatch.setattr(torch.compiler, "reset", lambda: None)

    def port(spec_path: Path, targets: list[str], out: Path, **kw: Any) -> Any:
        calls["port"].append((spec_path.parent.name, [s for s, _ in kw["units"]]))
        pack = Path(out) / spec_path.parent.name
        pack.mkdir(parents=True, exist_ok=True)
        (pack / "manifest.yaml").write_text("fake")
        return SimpleNamespace(pack_path=pack)

    def load_pack(path: Path) -> FakePack:
        calls["loaded"].append(Path(path).name)
        return FakePack(Path(path))

    def bench_op(problem: Any, providers: dict[str, Any], *, shapes: Any, dtypes: Any,
                 **kw: Any) -> list[BenchRow]:
        shape, dtype = tuple(shapes[0]), dtypes[0]
        calls["timed"].append((shape, dtype, sorted(providers)))
        key = dtype_key(dtype)
        return [BenchRow(op=problem.name, provider=p, shape=shape, dtype=key, device="h100",
                         median_ms=0.1, p20_ms=0.1, p80_ms=0.1, bytes_moved=128 << 20, flops=0,
                         pct_measured_peak=90.0,
                         speedup={"eager": Ratio(1.2, 1.1, 1.3)} if p == "ported" else {})
                for p in providers]

    problem = SimpleNamespace(name="softmax", make_inputs=lambda shape, dtype, device, gen: (
        torch.empty(*shape, dtype=dtype, device="meta"),))
    spec = SimpleNamespace(reference=lambda x: x, problem=lambda: problem)
    monkeypatch.setattr(porter.port, "port", port)
    monkeypatch.setattr(porter.packs.loader, "load_pack", load_pack)
    monkeypatch.setattr(porter.specs, "load_spec", lambda path: spec)
    monkeypatch.setattr("harness.bench_op.bench_op", bench_op)
    monkeypatch.setattr(suite, "copy_provider", lambda *a: (lambda *b: None))
    monkeypatch.setattr(suite, "liger_provider", lambda op: (lambda *b: None))
    return calls


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]


def test_unseen_times_spec_rows_then_unseen_rows_of_one_port(
        tmp_path: Path, stand_ins: dict[str, list[Any]]) -> None:
    out = tmp_path / "run"
    assert suite.main(["--out", str(out), "--ops", "softmax", "--unseen"]) == 0
    spec_shapes = [s for s, _ in suite.suite_units("softmax")]
    assert stand_ins["port"] == [("softmax", spec_shapes)]  # ported at the spec's shapes only
    timed = stand_ins["timed"]
    assert [t[:2] for t in timed] == suite.suite_units("softmax") + suite.unseen_units("softmax")
    spec_providers, unseen_providers = timed[0][2], timed[-1][2]
    assert "liger" in spec_providers and "liger" not in unseen_providers
    assert {"ported", "eager", "compile", "copy"} <= set(unseen_providers)
    rows = _rows(out)
    ported = [r for r in rows if r["provider"] == "ported" and r.get("unseen")]
    assert len(ported) == len(suite.unseen_units("softmax"))
    vocab = [r for r in ported if r["shape"][-1] > 40000]
    wide = suite.VOCAB + suite.VOCAB_HELD_OUT
    assert len(vocab) == len(wide) and all(r["pack_runs"].startswith("reference") for r in vocab)
    assert all(r["pack_runs"] == "kernel" and "derived" in r["config_basis"]
               for r in ported if r not in vocab)
    # where the pack ran eager, its kernel is timed beside (the check of the estimate)
    assert [t[0] for t in timed if "kernel" in t[2]] == wide
    assert "## Shapes no spec lists" in (out / "SUMMARY.md").read_text()
    # run again: everything is there, nothing is ported or timed
    stand_ins["port"].clear()
    stand_ins["timed"].clear()
    assert suite.main(["--out", str(out), "--ops", "softmax", "--unseen"]) == 0
    assert stand_ins["port"] == [] and stand_ins["timed"] == []


def test_unseen_only_reuses_the_pack_of_an_earlier_run(tmp_path: Path,
                                                       stand_ins: dict[str, list[Any]]) -> None:
    out = tmp_path / "run"
    assert suite.main(["--out", str(out), "--ops", "softmax"]) == 0  # the plain suite first
    assert len(stand_ins["port"]) == 1 and not any(r.get("unseen") for r in _rows(out))
    stand_ins["port"].clear()
    stand_ins["timed"].clear()
    assert suite.main(["--out", str(out), "--ops", "softmax", "--unseen-only"]) == 0
    assert stand_ins["port"] == [] and stand_ins["loaded"][-1] == "softmax"
    assert [t[:2] for t in stand_ins["timed"]] == suite.unseen_units("softmax")
    rows = _rows(out)
    assert len([r for r in rows if r["provider"] == "ported"]) == (
        len(suite.suite_units("softmax")) + len(suite.unseen_units("softmax")))
