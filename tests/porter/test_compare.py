"""`porter compare`, fleets and store merging: CPU only, on small synthetic stores."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.store import Record
from harness.store import ResultsStore
from harness.store import content_key
from porter import compare as cmp
from porter import compare_report as rep
from porter.cli import main
from porter.errors import FleetError
from porter.fleet import Fleet
from porter.fleet import FleetDevice
from porter.fleet import fleet_summary
from porter.fleet import load_fleet

OP = "toyop"
GB = 1e9


def _expected(path: Path, p90: float = 4.0) -> Path:
    path.write_text(json.dumps({"expected_error": {
        "validated_devices": ["h100", "h200"], "validated_vendors": ["nvidia"],
        "hwmodel_only_p90_pct": p90, "naive_ceiling_ratio_p90_pct": 20.0,
        "with_target_copy_curve_p90_pct": 3.0, "matmul_max_pct": 1.0,
        "widen_same_vendor": 2.0, "widen_other_vendor": 3.0}}))
    return path


def _rec(op: str, device: str, shape: tuple[int, ...], ms: float, *, nbytes: float = 0,
         variant: str = "v", run: str = "r1", tier: str = "measured", **metrics) -> Record:
    return Record(op=op, variant=variant, device=device, tier=tier, passed=True, shape=shape,
                  dtype="bf16" if op != cmp.COPY_OP else "bytes", run_id=run,
                  timestamp="2026-11-26T00:00:00+00:00", versions={"torch": "x"}, git_rev="abc",
                  config={"BLOCK": 1024, "dtype": "bf16"},
                  metrics={"median_ms": ms, **({"bytes_moved": nbytes, "flops": 0} if nbytes
                                               else {}), **metrics})


# Copy times (ms) of a 3 TB/s device with a 9 us on-device floor: the H100's shape.
def _copy_ms(nbytes: float, bw: float = 3000.0) -> float:
    return 0.009 + nbytes / (bw * 1e6)


SIZES = [25e6, 67e6, 134e6, 268e6, 537e6, 1074e6]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite"
    with ResultsStore(path, fill_env=False) as s:
        recs = [_rec(cmp.COPY_OP, "h100", (int(b),), _copy_ms(b)) for b in SIZES]
        # The kernel at two shapes on the H100: 1.02 x the copy at 537 MB and 1074 MB.
        recs.append(_rec(OP, "h100", (16384, 16384), 1.02 * _copy_ms(537e6), nbytes=537e6,
                         speedup_vs_eager=1.5))
        recs.append(_rec(OP, "h100", (32768, 16384), 1.02 * _copy_ms(1074e6), nbytes=1074e6))
        # and once on the H200 (measured there), at one shape only.
        recs.append(_rec(OP, "h200", (16384, 16384), 0.130, nbytes=537e6))
        # a slower variant of the same shape: best() must keep the faster one
        recs.append(_rec(OP, "h100", (16384, 16384), 0.5, nbytes=537e6, variant="slow"))
        s.add(recs)
    return path


def test_measured_rows_come_from_the_store_and_the_rest_is_projected(store, tmp_path):
    exp = _expected(tmp_path / "v.json")
    c = cmp.compare(OP, ["h100", "h200", "b200", "mi300x"], store_path=store,
                    packs_dir=tmp_path, validation_path=exp)
    assert [k[0] for k in c.keys] == [(16384, 16384), (32768, 16384)]
    h100 = c.row("h100", ((16384, 16384), "bf16"))
    assert h100.label == "measured" and h100.time_ms == pytest.approx(1.02 * _copy_ms(537e6))
    assert h100.speedup_vs_eager == 1.5
    assert h100.peak_basis == "measured ceiling"  # the H100 model has a measured copy ceiling
    assert h100.gbps == pytest.approx(537e6 / (h100.time_ms * 1e-3) / GB)
    # The H200 is measured at one shape, projected from the H100 at the other (validated pair).
    assert c.row("h200", ((16384, 16384), "bf16")).label == "measured"
    h200 = c.row("h200", ((32768, 16384), "bf16"))
    assert h200.label == "projected" and h200.calibration == "h100"
    assert h200.validated is True and h200.error_pct == pytest.approx(4.0)
    assert "copy-model transfer" in h200.source
    # A transferred bandwidth-bound time scales with the two devices' copy ceilings.
    assert h200.time_ms < c.row("h100", ((32768, 16384), "bf16")).time_ms
    # Another NVIDIA device: widened x2, unvalidated; another vendor: x3.
    b200 = c.row("b200", ((16384, 16384), "bf16"))
    assert (b200.validated, b200.error_pct, b200.peak_basis) == (False, 8.0, "datasheet")
    mi = c.row("mi300x", ((16384, 16384), "bf16"))
    assert (mi.validated, mi.error_pct) == (False, 12.0)
    # Never faster than the datasheet speed of light.
    assert mi.pct_peak <= 100.0 + 1e-9
    # Portability: geometric mean over devices of each device's geometric-mean % of peak.
    per = c.per_device_pct
    assert c.portability == pytest.approx(math.exp(sum(math.log(v) for v in per.values()) / 4))


def test_error_bars_are_read_from_the_validation_file(store, tmp_path):
    a = cmp.compare(OP, ["h200"], store_path=store, packs_dir=tmp_path,
                    validation_path=_expected(tmp_path / "a.json", p90=4.0))
    b = cmp.compare(OP, ["h200"], store_path=store, packs_dir=tmp_path,
                    validation_path=_expected(tmp_path / "b.json", p90=6.5))
    key = ((32768, 16384), "bf16")
    assert a.row("h200", key).error_pct == 4.0 and b.row("h200", key).error_pct == 6.5
    with pytest.raises(cmp.CompareError, match="validate_projection"):
        cmp.compare(OP, ["h200"], store_path=store, packs_dir=tmp_path,
                    validation_path=tmp_path / "missing.json")


def test_expected_error_rules():
    exp = {"validated_devices": ["h100", "h200"], "validated_vendors": ["nvidia"],
           "hwmodel_only_p90_pct": 5.0, "naive_ceiling_ratio_p90_pct": 20.0,
           "widen_same_vendor": 2.0, "widen_other_vendor": 3.0}
    f = cmp.expected_error_for
    assert f("h200", exp, calibration="h100", method="copy-model transfer") == (5.0, True)
    assert f("h200", exp, calibration="h100", method="ceiling-ratio transfer") == (20.0, True)
    assert f("h200", exp, calibration="a100", method="copy-model transfer") == (10.0, False)
    assert f("h200", exp, calibration=None, method="first principles") == (10.0, False)
    assert f("m4", exp, calibration="h100", method="copy-model transfer") == (15.0, False)


def test_unknown_op_is_one_clear_error(store, tmp_path):
    with pytest.raises(cmp.CompareError, match="no measured records"):
        cmp.compare("nosuchop", ["h100"], store_path=store, packs_dir=tmp_path,
                    validation_path=_expected(tmp_path / "v.json"))


# -- fleets --------------------------------------------------------------------------------

def test_example_fleet_loads():
    fleet = load_fleet(Path(__file__).resolve().parents[2] / "fleets" / "example.yaml")
    assert fleet.models and all(d.count > 0 for d in fleet.devices)


@pytest.mark.parametrize("text, field", [
    ("devices: []", "devices"),
    ("name: x", "devices"),
    ("devices:\n  - {model: h100, count: 2, colour: red}", "devices[0].colour"),
    ("devices:\n  - {model: h100}", "devices[0].count"),
    ("devices:\n  - {model: h100, count: 0}", "devices[0].count"),
    ("devices:\n  - {model: h100, count: two}", "devices[0].count"),
    ("devices:\n  - {model: h999, count: 1}", "devices[0].model"),
    ("devices:\n  - {model: h100, count: 1, hourly_price: -1}", "devices[0].hourly_price"),
    ("devices:\n  - {model: h100, count: 1}\n  - {model: H100, count: 2}", "devices[1].model"),
    ("fleet: [", "line"),
], ids=["empty", "no-devices", "unknown-key", "no-count", "zero", "text-count", "unknown-model",
        "negative-price", "twice", "bad-yaml"])
def test_bad_fleet_names_file_and_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(FleetError) as err:
        load_fleet(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {field}") and "\n" not in msg


def test_fleet_calls_and_cost():
    fleet = Fleet(name="f", devices=(FleetDevice("h100", 10, 2.0), FleetDevice("m4", 5, 0.1)))
    s = fleet_summary(fleet, {"h100": 0.1, "m4": 1.0})
    assert s["calls_per_s"] == pytest.approx(10 * 10_000 + 5 * 1_000)
    assert s["hourly_cost"] == pytest.approx(20.5)
    assert s["cost_per_million_calls"] == pytest.approx(20.5 / (105_000 * 3600) * 1e6)
    unpriced = Fleet(name="f", devices=(FleetDevice("h100", 1),))
    assert fleet_summary(unpriced, {"h100": 0.1})["cost_per_million_calls"] is None


# -- the store: merging machines' stores, importing suite runs ------------------------------

def test_merge_dedupes_by_content(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.sqlite", "b.sqlite", "c.sqlite"))
    shared = _rec(OP, "h100", (8, 8), 0.1, run="shared")
    with ResultsStore(a, fill_env=False) as s:
        s.add([shared, _rec(OP, "h100", (8, 8), 0.2, run="a")])
    with ResultsStore(b, fill_env=False) as s:
        s.add([shared, _rec(OP, "h200", (8, 8), 0.3, run="b")])
    result = CliRunner().invoke(main, ["store", "merge", str(a), str(b), "--into", str(c)])
    assert result.exit_code == 0, result.output
    assert "3 records added, 1 already there" in result.output
    with ResultsStore(c, fill_env=False) as s:
        assert len(s) == 3
        assert s.merge(a, b) == (0, 4)  # merging again adds nothing
        keys = [content_key(r) for r in s.history(OP)]
        assert len(set(keys)) == 3
        # the record is kept exactly: run id, timestamp and versions as on the first machine
        got = [r for r in s.history(OP) if r.run_id == "shared"][0]
        assert (got.timestamp, got.versions, got.git_rev) == (shared.timestamp,
                                                              shared.versions, "abc")
    bad = CliRunner().invoke(main, ["store", "merge", str(tmp_path / "nope.sqlite"),
                                    "--into", str(c)])
    assert bad.exit_code == 2 and "no such results store" in bad.output


def test_suite_rows_import(tmp_path):
    run = tmp_path / "h100-run"
    run.mkdir()
    rows = [
        {"op": OP, "provider": "ported", "shape": [8, 8], "dtype": "bf16", "device": "h100",
         "median_ms": 0.1, "p20_ms": 0.09, "p80_ms": 0.11, "bytes_moved": 1000, "flops": 0,
         "config": {"BLOCK": 8}, "speedup": {"eager": [1.5, 1.4, 1.6]}, "error": None},
        {"op": OP, "provider": "eager", "shape": [8, 8], "dtype": "bf16", "device": "h100",
         "median_ms": 0.15, "bytes_moved": 1000, "flops": 0},
        {"op": OP, "provider": "copy", "shape": [8, 8], "dtype": "bf16", "device": "h100",
         "median_ms": 0.09, "bytes_moved": 1000, "flops": 0},
    ]
    (run / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run / "meta.json").write_text(json.dumps({"date": "2026-11-25", "git_rev": "1acd0ae",
                                               "versions": {"torch": "2.11"}}))
    store = tmp_path / "s.sqlite"
    first = CliRunner().invoke(main, ["store", "import", str(run), "--store", str(store)])
    again = CliRunner().invoke(main, ["store", "import", str(run), "--store", str(store)])
    assert "3 records added" in first.output and "0 records added, 3 already" in again.output
    with ResultsStore(store, fill_env=False) as s:
        best = s.best(OP, "h100")
        assert len(best) == 1 and best[0].metrics["speedup_vs_eager"] == 1.5
        assert best[0].run_id == "h100-run" and best[0].git_rev == "1acd0ae"
        assert [r.shape for r in s.history(cmp.COPY_OP)] == [(1000,)]
        assert len(s.history(f"{OP}@eager")) == 1


# -- the command --------------------------------------------------------------------------

def test_cli_table_csv_json_and_report(store, tmp_path, monkeypatch):
    exp = _expected(tmp_path / "v.json")
    out = tmp_path / "report"
    args = ["compare", OP, "--devices", "h100,h200,mi300x", "--store", str(store),
            "--packs", str(tmp_path), "--validation", str(exp), "--json",
            str(tmp_path / "c.json"), "--report", str(out), "--fleet", str(tmp_path / "f.yaml")]
    (tmp_path / "f.yaml").write_text("devices:\n  - {model: h100, count: 4, hourly_price: 3}\n"
                                     "  - {model: mi300x, count: 2, hourly_price: 2}\n")
    monkeypatch.setattr(rep, "chart_available", lambda: False)
    # --report without matplotlib: the report's chart cannot be made, so one line, exit 2,
    # before any work (issue 48: it wrote no chart and exited 0)
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert "--report needs matplotlib (pip install kernel-porter[compare])" in refused.output
    result = CliRunner().invoke(main, [a for a in args if a not in ("--report", str(out))])
    assert result.exit_code == 0, result.output
    assert "portability score (toyop)" in result.output
    assert "±12% unvalidated" in result.output  # mi300x: 4% x 3
    assert "calls/s" in result.output and "USD per million calls" in result.output
    assert "chart: needs matplotlib (pip install kernel-porter[compare])" in result.output
    data = json.loads((tmp_path / "c.json").read_text())
    assert {r["device"] for r in data["rows"]} == {"h100", "h200", "mi300x"}
    # the report written without a chart (as code may still ask for one) says so in its page
    c = cmp.compare(OP, ["h100", "h200", "mi300x"], store_path=store, packs_dir=tmp_path,
                    validation_path=exp)
    rep.write_report(c, out)
    html = (out / f"{OP}-compare.html").read_text()
    assert "No chart" in html and "<table>" in html
    csv_out = CliRunner().invoke(main, ["compare", OP, "--devices", "h100", "--store",
                                        str(store), "--packs", str(tmp_path), "--validation",
                                        str(exp), "--csv", "-"])
    assert csv_out.output.splitlines()[0].startswith("op,device,shape")
    assert len(csv_out.output.splitlines()) == 3


def test_cli_report_embeds_the_png(store, tmp_path):
    pytest.importorskip("matplotlib", reason="the chart needs the compare extra (matplotlib)")
    out = tmp_path / "report"
    result = CliRunner().invoke(main, [
        "compare", OP, "--devices", "h100,h200,b200", "--store", str(store), "--packs",
        str(tmp_path), "--validation", str(_expected(tmp_path / "v.json")), "--report",
        str(out)])
    assert result.exit_code == 0, result.output
    png = (out / f"{OP}-compare.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert "data:image/png;base64," in (out / f"{OP}-compare.html").read_text()


@pytest.mark.parametrize("args, message", [
    (["--devices", "h999"], "h999"),
    (["--fleet", "missing.yaml"], "no such fleet file"),
    (["--store", "missing.sqlite"], "no such results store"),
], ids=["unknown-device", "missing-fleet", "missing-store"])
def test_cli_bad_input_exits_2_with_one_line(store, tmp_path, args, message):
    exp = _expected(tmp_path / "v.json")
    base = ["compare", OP, "--packs", str(tmp_path), "--validation", str(exp)]
    if "--store" not in args:
        base += ["--store", str(store)]
    result = CliRunner().invoke(main, base + args)
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_a_pack_folder_gives_tiers_and_first_principles_numbers(store, tmp_path):
    """OP as a pack folder: a device with no measurement anywhere falls back to the pack's own
    projected numbers, with its tier, never faster than the datasheet speed of light."""
    import hashlib

    import yaml

    pack = tmp_path / "packs" / OP
    (pack / "apple" / "m4").mkdir(parents=True)
    # an intact pack: compare verifies it as load_pack does
    files = {"reference.py": b"def reference(x):\n    return x\n",
             "apple/m4/k.metal": b"kernel void k() {}\n"}
    for rel, data in files.items():
        (pack / rel).write_bytes(data)
    bucket = {"bucket": "4096x4096", "dtype": "bf16", "shape": [4096, 4096],
              "config": {"BLOCK": 2048}, "file": "apple/m4/k.metal", "tier": "emitted",
              "numbers": {"time_ms": 1e-3, "label": "projected", "bytes_moved": 67e6,
                          "flops": 0}}
    (pack / "manifest.yaml").write_text(yaml.safe_dump({
        "format": "kernel-porter-pack/1", "op": OP,
        "files": {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}, "reference":
        {"file": "reference.py"}, "entries": [{"target": "m4", "tier": "emitted",
                                               "buckets": [bucket]}]}))
    c = cmp.compare(str(pack), ["h100", "m4"], store_path=store,
                    validation_path=_expected(tmp_path / "v.json"))
    m4 = c.row("m4", ((4096, 4096), "bf16"))  # a shape only the pack has
    assert m4.tier == "emitted" and m4.kernel == "BLOCK=2048"
    # The pack claimed 1 us for 67 MB on a 120 GB/s device: held at the speed of light.
    assert m4.time_ms == pytest.approx(67e6 / 120e9 * 1e3)
    assert "speed of light" in m4.source and m4.validated is False
    assert c.row("h100", ((4096, 4096), "bf16")).source.startswith("first-principles")
    # Where the H100 measured the shape, the M4 row starts from that measurement instead.
    assert c.row("m4", ((16384, 16384), "bf16")).calibration == "h100"


def test_a_tampered_pack_is_refused_not_compared(tmp_path):
    """compare verifies a pack as load_pack does: a tampered pack's numbers are never printed,
    one line and exit 2 (issue 48)."""
    from tests.porter.test_pack_helpers import make_pack

    pack = make_pack(tmp_path)
    victim = next((pack / "nvidia" / "h100").glob("*.py"))
    victim.write_text(victim.read_text() + "\n# changed\n")
    result = CliRunner().invoke(main, ["compare", str(pack), "--devices", "h100,h200"])
    assert result.exit_code == 2 and victim.name in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_garbage_store_is_one_line(tmp_path):
    bad = tmp_path / "store.sqlite"
    bad.write_text("garbage")
    result = CliRunner().invoke(main, ["compare", "rmsnorm", "--devices", "h100",
                                       "--store", str(bad)])
    assert result.exit_code == 2 and "not a usable results store" in result.output
    assert len(result.output.strip().splitlines()) == 1
