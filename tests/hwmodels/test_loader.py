"""Schema validation: every shipped YAML loads; every broken one names the file and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import hwmodels
from hwmodels import HardwareModelError
from hwmodels.catalog import Registry
from hwmodels.loader import KNOWN_FEATURES
from hwmodels.model import DTYPES

SHIPPED = sorted(hwmodels.DEVICES_DIR.glob("*.yaml"))
H100 = hwmodels.DEVICES_DIR / "h100.yaml"


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_yaml_loads(path: Path) -> None:
    hw = hwmodels.load_file(path)
    assert hw.name == path.stem
    assert Path(hw.source_file) == path.resolve()
    assert set(hw.dense_tflops) <= set(DTYPES)
    assert hw.features <= KNOWN_FEATURES
    # Dense peaks, never sparse: every matrix rate is at most 64x the SIMT fp32 rate here (the
    # B200's fp4 is 120x fp32 dense and would be 240x if a sparse number slipped in).
    for dtype, fact in hw.dense_tflops.items():
        assert fact.source.strip(), dtype
        assert fact.value / hw.dense_tflops["fp32"].value <= 130, (path.stem, dtype)


def test_required_devices_are_shipped() -> None:
    names = {hw.name for hw in hwmodels.all_models()}
    assert {"a100", "h100", "h200", "b200", "mi300x", "m4"} <= names


def test_all_models_sorted_by_vendor_then_name() -> None:
    models = hwmodels.all_models()
    assert [(m.vendor, m.name) for m in models] == sorted((m.vendor, m.name) for m in models)


def test_h100_measured_entries_kept() -> None:
    hw = hwmodels.get("h100")
    # the newest entry wins: 2026-11-23's, measured after the harness's flush (NOTES item 32)
    assert hw.measured_value("copy_bandwidth_gbps") == 3073.3
    assert hw.measured_value("matmul_bf16_tflops") == 757.0
    assert [m.value for m in hw.measured if m.name == "copy_bandwidth_gbps"][0] == 3006
    assert all(m.versions["torch"].startswith("2.11") for m in hw.measured)


def test_build_targets_match_vendor() -> None:
    assert hwmodels.get("h100").build.arch == "90"
    mi = hwmodels.get("mi300x")
    assert (mi.build.backend, mi.build.arch, mi.warp_size) == ("triton-hip", "gfx942", 64)
    m4 = hwmodels.get("m4")
    assert (m4.build.backend, m4.build.arch, m4.warp_size) == ("metal", "apple-m4", 32)
    assert mi.limits.shared_memory_per_block_bytes.value == 65536
    assert hwmodels.get("h100").limits.shared_memory_per_block_bytes.value > 65536


# -- broken files --------------------------------------------------------------------------------
def _h100_data() -> dict:
    return yaml.safe_load(H100.read_text())


def _write(tmp_path: Path, data: dict | str, stem: str = "h100") -> Path:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _error(path: Path) -> HardwareModelError:
    with pytest.raises(HardwareModelError) as info:
        hwmodels.load_file(path)
    msg = str(info.value)
    assert path.name in msg, msg  # every error names the file
    return info.value


def test_negative_bandwidth_names_file_and_field(tmp_path: Path) -> None:
    data = _h100_data()
    data["memory"]["bandwidth_gbps"]["value"] = -3
    err = _error(_write(tmp_path, data))
    assert err.field == "memory.bandwidth_gbps.value"
    assert str(err).endswith("memory.bandwidth_gbps.value: must be a positive number, got -3")


def test_zero_is_rejected(tmp_path: Path) -> None:
    data = _h100_data()
    data["compute_units"]["value"] = 0
    assert _error(_write(tmp_path, data)).field == "compute_units.value"


def test_missing_field(tmp_path: Path) -> None:
    data = _h100_data()
    del data["limits"]["max_warps_per_unit"]
    err = _error(_write(tmp_path, data))
    assert err.field == "limits.max_warps_per_unit"
    assert "missing" in err.problem


def test_missing_top_level_field(tmp_path: Path) -> None:
    data = _h100_data()
    del data["boost_clock_mhz"]
    assert _error(_write(tmp_path, data)).field == "boost_clock_mhz"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (
            lambda d: d["dense_tflops"]["bf16"].__setitem__("value", "fast"),
            "dense_tflops.bf16.value",
        ),
        (lambda d: d["dense_tflops"]["bf16"].__setitem__("value", True), "dense_tflops.bf16.value"),
        (lambda d: d.__setitem__("aliases", "H100"), "aliases"),
        (lambda d: d["build"].__setitem__("arch", 90), "build.arch"),
        (lambda d: d["build"].__setitem__("warp_size", 32.5), "build.warp_size"),
        (lambda d: d.__setitem__("memory", [1, 2]), "memory"),
        (
            lambda d: d["limits"]["max_threads_per_block"].__setitem__("value", 1024.5),
            "limits.max_threads_per_block.value",
        ),
        (lambda d: d["measured"][0].__setitem__("value", "3006"), "measured[0].value"),
        (
            lambda d: d["measured"][1]["versions"].__setitem__("torch", 2.11),
            "measured[1].versions.torch",
        ),
        (lambda d: d["measured"][0].__setitem__("date", "22 Nov 2026"), "measured[0].date"),
    ],
    ids=[
        "str-number",
        "bool-number",
        "aliases-not-list",
        "arch-int",
        "warp-float",
        "memory-list",
        "limit-fraction",
        "measured-str",
        "version-float",
        "bad-date",
    ],
)
def test_mistyped_fields(tmp_path: Path, mutate, field: str) -> None:
    data = _h100_data()
    mutate(data)
    assert _error(_write(tmp_path, data)).field == field


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.__setitem__("bandwidth", 1), "bandwidth"),
        (lambda d: d["memory"].__setitem__("l2_bytes", 1), "memory.l2_bytes"),
        (lambda d: d["memory"]["capacity_gb"].__setitem__("unit", "GB"), "memory.capacity_gb.unit"),
        (lambda d: d["measured"][0].__setitem__("gpu", "x"), "measured[0].gpu"),
    ],
    ids=["top", "memory", "fact", "measured"],
)
def test_unknown_keys(tmp_path: Path, mutate, field: str) -> None:
    data = _h100_data()
    mutate(data)
    err = _error(_write(tmp_path, data))
    assert err.field == field
    assert "unknown key" in err.problem


def test_fact_without_source(tmp_path: Path) -> None:
    data = _h100_data()
    del data["dense_tflops"]["fp8"]["source"]
    err = _error(_write(tmp_path, data))
    assert err.field == "dense_tflops.fp8.source"


def test_empty_source(tmp_path: Path) -> None:
    data = _h100_data()
    data["memory"]["capacity_gb"]["source"] = "  "
    assert _error(_write(tmp_path, data)).field == "memory.capacity_gb.source"


def test_bad_kind(tmp_path: Path) -> None:
    data = _h100_data()
    data["memory"]["capacity_gb"]["kind"] = "guess"
    err = _error(_write(tmp_path, data))
    assert err.field == "memory.capacity_gb.kind"
    assert "spec" in err.problem and "measured" in err.problem


def test_unknown_dtype(tmp_path: Path) -> None:
    data = _h100_data()
    data["dense_tflops"]["int8"] = {"value": 1979, "source": "datasheet", "kind": "spec"}
    err = _error(_write(tmp_path, data))
    assert err.field == "dense_tflops.int8"
    assert "bf16" in err.problem  # lists the allowed dtypes


def test_unknown_backend(tmp_path: Path) -> None:
    data = _h100_data()
    data["build"]["backend"] = "cuda"
    err = _error(_write(tmp_path, data))
    assert err.field == "build.backend"
    assert "triton-cuda" in err.problem


def test_backend_must_match_vendor(tmp_path: Path) -> None:
    data = _h100_data()
    data["build"]["backend"] = "triton-hip"
    assert _error(_write(tmp_path, data)).field == "build.backend"


def test_unknown_vendor_and_feature(tmp_path: Path) -> None:
    data = _h100_data()
    data["vendor"] = "intel"
    assert _error(_write(tmp_path, data)).field == "vendor"
    data = _h100_data()
    data["features"].append("tma_load")
    assert re.fullmatch(r"features\[\d+\]", _error(_write(tmp_path, data)).field)


def test_measured_entry_needs_method(tmp_path: Path) -> None:
    data = _h100_data()
    del data["measured"][0]["method"]
    assert _error(_write(tmp_path, data)).field == "measured[0].method"


def test_measured_versions_optional(tmp_path: Path) -> None:
    data = _h100_data()
    del data["measured"][0]["versions"]
    hw = hwmodels.load_file(_write(tmp_path, data))
    assert hw.measured[0].versions == {}


def test_per_block_cannot_exceed_per_unit(tmp_path: Path) -> None:
    data = _h100_data()
    data["limits"]["shared_memory_per_block_bytes"]["value"] = 300000
    assert _error(_write(tmp_path, data)).field == "limits.shared_memory_per_block_bytes.value"


def test_name_must_match_file_stem(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, _h100_data(), stem="h100-copy"))
    assert err.field == "name"


def test_duplicate_key_and_bad_yaml(tmp_path: Path) -> None:
    text = H100.read_text().replace("vendor: nvidia\n", "vendor: nvidia\nvendor: amd\n")
    err = _error(_write(tmp_path, text))
    assert "duplicate key 'vendor'" in str(err)
    err = _error(_write(tmp_path, "name: [unclosed\n"))
    assert "invalid YAML" in str(err) and "line" in str(err)


def test_missing_file(tmp_path: Path) -> None:
    _error(tmp_path / "nope.yaml")


def test_ambiguous_alias_is_a_load_error(tmp_path: Path) -> None:
    data = _h100_data()
    _write(tmp_path, data)
    data["name"] = "h100-twin"
    data["full_name"] = "Twin"
    data["aliases"] = ["twin", "SM_90"]  # sm_90 already belongs to h100
    _write(tmp_path, data, stem="h100-twin")
    reg = Registry.from_dir(tmp_path)
    # Which one is wrong cannot be known: both files are broken, each error naming the other
    # file and the alias, whatever order the files are read in.
    for stem, other in (("h100", "h100-twin.yaml"), ("h100-twin", "h100.yaml")):
        with pytest.raises(HardwareModelError) as info:
            reg.get(stem)
        msg = str(info.value)
        assert f"{stem}.yaml" in msg and other in msg
        assert re.fullmatch(r"aliases\[\d+\]", info.value.field)
        assert "ambiguous" in msg and "sm_90" in msg.lower()
    with pytest.raises(HardwareModelError, match="ambiguous"):
        reg.get("sm_90")
    assert reg.names() == []


def test_registry_of_models_rejects_duplicates() -> None:
    """Built from models in code (not a folder), a clash is still an error at once."""
    h100 = hwmodels.get("h100")
    with pytest.raises(HardwareModelError, match="duplicate model name"):
        Registry([h100, h100])
