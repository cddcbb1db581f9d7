"""detect(): on this CPU machine, and with fake probes standing in for real devices."""

from __future__ import annotations

import sys

import pytest

import hwmodels
from hwmodels.detect import Detection
from hwmodels.detect import ProbeResult
from hwmodels.detect import detect


def _has_any_gpu() -> bool:
    import torch

    return torch.cuda.is_available() or (
        sys.platform == "darwin" and torch.backends.mps.is_available()
    )


@pytest.mark.skipif("_has_any_gpu()", reason="this test describes a machine without any GPU")
def test_cpu_machine_reports_each_probe() -> None:
    d = hwmodels.detect()
    assert isinstance(d, Detection)
    assert d.model is None and d.device_name is None and d.via == "none"
    for probe in ("torch.cuda:", "pynvml:", "amdsmi:", "torch.mps:"):
        assert probe in d.reason, d.reason
    import torch

    if torch.version.cuda is None and torch.version.hip is None:
        assert "CPU build" in d.reason


def _fake(name: str | None, arch: str | None = None, probe: str = "fake") -> object:
    def probe_fn() -> ProbeResult:
        return ProbeResult(probe, name, f"found {name!r}" if name else "nothing here", arch)

    return probe_fn


def test_known_name_maps_to_model() -> None:
    d = detect([_fake(None, probe="first"), _fake("NVIDIA H100 80GB HBM3", "sm_90", "torch.cuda")])
    assert d.model is hwmodels.get("h100")
    assert d.device_name == "NVIDIA H100 80GB HBM3" and d.via == "torch.cuda"
    assert "h100" in d.reason


def test_unknown_name_is_named_in_reason() -> None:
    d = detect([_fake("NVIDIA H100 PCIe", "sm_90", "pynvml")])
    assert d.model is None
    assert d.device_name == "NVIDIA H100 PCIe"
    assert "'NVIDIA H100 PCIe'" in d.reason and "no hardware model recognises" in d.reason
    assert "h100" in d.reason and "h200" in d.reason  # same-arch hint names the sm_90 models


def test_nameless_device_falls_back_to_arch() -> None:
    d = detect([_fake(None, "gfx942", "torch.cuda (ROCm)")])
    assert d.model is hwmodels.get("mi300x")
    assert "arch" in d.reason


def test_a_crashing_probe_does_not_raise() -> None:
    def boom() -> ProbeResult:
        raise RuntimeError("driver exploded")

    d = detect([boom, _fake(None)])
    assert d.model is None
    assert "driver exploded" in d.reason and "fake: nothing here" in d.reason


def test_first_probe_that_sees_a_device_wins() -> None:
    d = detect([_fake("AMD Instinct MI300X", probe="amdsmi"), _fake("NVIDIA H200", probe="x")])
    assert d.model is hwmodels.get("mi300x") and d.via == "amdsmi"


@pytest.mark.gpu
def test_yaml_matches_the_live_device() -> None:
    """What the driver can tell us (SM/CU count, warp width, L2) must agree with the YAML."""
    import torch

    d = hwmodels.detect()
    if d.model is None:
        pytest.skip(f"no hardware model for this GPU: {d.reason}")
    props = torch.cuda.get_device_properties(0)
    assert props.multi_processor_count == d.model.compute_units.value
    warp = getattr(props, "warp_size", None)
    if warp is not None:
        assert warp == d.model.warp_size
    if d.model.vendor == "nvidia":
        assert props.L2_cache_size == d.model.llc_bytes
