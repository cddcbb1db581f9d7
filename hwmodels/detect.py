"""Which accelerator is this machine running on, and which hardware model describes it?

Probes, in order: torch.cuda (NVIDIA, and AMD on ROCm builds of torch), pynvml (an NVIDIA driver
without a CUDA torch), amdsmi (a ROCm driver without a ROCm torch), torch.mps (Apple). The first
probe that sees a device decides. Every probe's import is lazy and every failure becomes a line of
the `reason`, so `detect()` never raises: on a CPU-only machine it says, probe by probe, why
nothing was found.
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Detection:
    """What `detect()` found.

    Attributes:
        model: the matching hardware model, or None (no device, or a device no YAML describes).
        device_name: the name the driver reported ("NVIDIA H100 80GB HBM3"), or None.
        via: the probe that saw the device ("torch.cuda", "torch.cuda (ROCm)", "pynvml",
            "amdsmi", "torch.mps"), or "none".
        reason: a plain sentence: what was found and how it was matched, or why nothing was.
    """

    model: HardwareModel | None
    device_name: str | None
    via: str
    reason: str


@dataclass(frozen=True)
class ProbeResult:
    """One probe's answer: a device name (None when it saw no device) and a note saying why."""

    probe: str
    device_name: str | None
    note: str
    arch: str | None = None  # "sm_90", "gfx942": used when the name is empty, and as a hint


Probe = Callable[[], ProbeResult]


# -- probes ------------------------------------------------------------------------------------
def probe_torch_cuda() -> ProbeResult:
    """torch.cuda; on a ROCm build of torch this is also the AMD path (torch.version.hip)."""
    name = "torch.cuda"
    try:
        import torch
    except ImportError as e:
        return ProbeResult(name, None, f"torch not importable ({e})")
    version = torch.__version__
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if not torch.cuda.is_available():
        if hip is None and cuda is None:
            return ProbeResult(name, None, f"not available (torch {version} is a CPU build)")
        built = f"ROCm/HIP {hip}" if hip else f"CUDA {cuda}"
        visible = os.environ.get("HIP_VISIBLE_DEVICES" if hip else "CUDA_VISIBLE_DEVICES")
        extra = (
            f"; {'HIP' if hip else 'CUDA'}_VISIBLE_DEVICES={visible!r}"
            if visible is not None
            else ""
        )
        return ProbeResult(
            name,
            None,
            f"not available (torch {version} is built for {built}, but no device is visible: "
            f"no driver, or no GPU{extra})",
        )
    props = torch.cuda.get_device_properties(0)
    device_name = torch.cuda.get_device_name(0).strip()
    if hip:
        # gcnArchName looks like "gfx942:sramecc+:xnack-"; the part before ':' is the LLVM target.
        arch = str(getattr(props, "gcnArchName", "") or "").split(":")[0] or None
        probe = "torch.cuda (ROCm)"
    else:
        arch = f"sm_{props.major}{props.minor}"
        probe = name
    return ProbeResult(probe, device_name or None, f"found {device_name!r} ({arch})", arch)


def probe_pynvml() -> ProbeResult:
    """NVML: sees NVIDIA GPUs when the driver is installed, whatever torch was built for."""
    name = "pynvml"
    try:
        import pynvml
    except ImportError:
        return ProbeResult(name, None, "not installed (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        msg = str(e)
        if isinstance(e, getattr(pynvml, "NVMLError_LibraryNotFound", ())) or "Not Found" in msg:
            msg += " (no NVIDIA driver)"
        elif isinstance(e, getattr(pynvml, "NVMLError_DriverNotLoaded", ())):
            msg += " (the NVIDIA kernel driver is not loaded)"
        return ProbeResult(name, None, msg)
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return ProbeResult(name, None, "NVIDIA driver loaded, but it sees no GPU")
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        raw = pynvml.nvmlDeviceGetName(handle)
        device_name = (raw.decode() if isinstance(raw, bytes) else str(raw)).strip()
        arch = None
        try:
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            arch = f"sm_{major}{minor}"
        except pynvml.NVMLError as e:
            log.debug("pynvml: no compute capability: %s", e)
        return ProbeResult(name, device_name or None, f"found {device_name!r}", arch)
    except pynvml.NVMLError as e:
        return ProbeResult(name, None, f"driver loaded but query failed: {e}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            log.debug("pynvml shutdown failed: %s", e)


def probe_amdsmi() -> ProbeResult:
    """AMD SMI: sees AMD Instinct GPUs when ROCm's native library and driver are present."""
    name = "amdsmi"
    try:
        import amdsmi
    except ModuleNotFoundError:
        return ProbeResult(name, None, "not installed (pip install amdsmi, part of ROCm)")
    except (ImportError, OSError) as e:
        # The Python package exists but ROCm's libamd_smi.so does not.
        return ProbeResult(name, None, f"ROCm native library missing ({e})")
    lib_error: tuple[type[BaseException], ...] = (
        getattr(amdsmi, "AmdSmiException", OSError),
        OSError,
    )
    try:
        amdsmi.amdsmi_init()
    except lib_error as e:
        return ProbeResult(name, None, f"init failed, no AMD GPU driver? ({e})")
    try:
        handles = amdsmi.amdsmi_get_processor_handles()
        if not handles:
            return ProbeResult(name, None, "ROCm library loaded, but it sees no GPU")
        info = amdsmi.amdsmi_get_gpu_asic_info(handles[0])
        device_name = str(info.get("market_name", "")).strip()
        arch = str(info.get("target_graphics_version", "") or "").strip() or None
        return ProbeResult(name, device_name or None, f"found {device_name!r}", arch)
    except lib_error as e:
        return ProbeResult(name, None, f"query failed: {e}")
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except lib_error as e:
            log.debug("amdsmi shutdown failed: %s", e)


def _apple_chip_name() -> str | None:
    """'Apple M4' etc. from sysctl; torch.mps has no device-name API."""
    try:
        out = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("sysctl failed: %s", e)
        return None
    return out.stdout.strip() or None


def probe_mps() -> ProbeResult:
    """torch.backends.mps: Apple silicon GPUs; the chip name comes from sysctl."""
    name = "torch.mps"
    if sys.platform != "darwin":
        return ProbeResult(name, None, f"not a macOS machine (platform {sys.platform})")
    try:
        import torch
    except ImportError as e:
        return ProbeResult(name, None, f"torch not importable ({e})")
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        built = mps is not None and mps.is_built()
        why = "no Metal device" if built else f"torch {torch.__version__} built without MPS"
        return ProbeResult(name, None, f"not available ({why}; macOS {platform.mac_ver()[0]})")
    chip = _apple_chip_name()
    if chip is None:
        return ProbeResult(name, None, "MPS is available but sysctl gave no chip name")
    return ProbeResult(name, chip, f"found {chip!r}", None)


DEFAULT_PROBES: tuple[Probe, ...] = (probe_torch_cuda, probe_pynvml, probe_amdsmi, probe_mps)


def _run(probe: Probe) -> ProbeResult:
    label = probe.__name__.removeprefix("probe_").replace("_", ".")
    try:
        return probe()
    except Exception as e:  # noqa: BLE001 - detect() promises never to raise; the reason says why
        log.warning("hardware probe %s failed: %s: %s", label, type(e).__name__, e)
        return ProbeResult(label, None, f"probe failed: {type(e).__name__}: {e}")


def detect(probes: Sequence[Probe] | None = None) -> Detection:
    """Maps the live device to a hardware model.

    Args:
        probes: the probes to try in order (tests pass fakes); default torch.cuda, pynvml,
            amdsmi, torch.mps.

    Returns:
        A `Detection`. `model` is None when no probe saw a device (the reason then has one
        clause per probe saying why) or when the reported name matches no YAML (the reason
        names it). Never raises.
    """
    from hwmodels.catalog import registry

    notes: list[str] = []
    for probe in probes if probes is not None else DEFAULT_PROBES:
        result = _run(probe)
        notes.append(f"{result.probe}: {result.note}")
        if result.device_name is None and result.arch is None:
            continue
        try:
            reg = registry()
        except Exception as e:  # noqa: BLE001 - a broken YAML must not make detect() raise
            return Detection(
                None,
                result.device_name,
                result.probe,
                f"{'; '.join(notes)}; hardware models failed to load: {e}",
            )
        if result.device_name is not None:
            hw = reg.find(result.device_name)
            if hw is not None:
                return Detection(
                    hw,
                    result.device_name,
                    result.probe,
                    f"{result.probe} found {result.device_name!r} -> hardware model {hw.name!r}",
                )
            broken = reg.broken_error(result.device_name)
            if broken is not None:
                return Detection(
                    None,
                    result.device_name,
                    result.probe,
                    f"{result.probe} found {result.device_name!r}, whose hardware model did not "
                    f"load: {broken}",
                )
            hint = ""
            if result.arch:
                same_arch = [m.name for m in reg.all() if _arch_matches(m, result.arch)]
                if same_arch:
                    hint = (
                        f"; same architecture ({result.arch}) as {', '.join(same_arch)}, but "
                        "clocks, bandwidth and SM counts differ: add a YAML for it, or pick one "
                        "explicitly if you know it matches"
                    )
            return Detection(
                None,
                result.device_name,
                result.probe,
                f"{result.probe} found {result.device_name!r}, a device name no hardware model "
                f"recognises (known: {', '.join(reg.names())}){hint}",
            )
        # A device without a name (some ROCm versions report ''): match the arch string alone.
        hw = reg.find(result.arch or "")
        if hw is not None:
            return Detection(
                hw,
                None,
                result.probe,
                f"{result.probe} found a device with no name, arch {result.arch} -> "
                f"hardware model {hw.name!r} (matched by arch alias only)",
            )
        broken = reg.broken_error(result.arch or "")
        if broken is not None:
            return Detection(
                None,
                None,
                result.probe,
                f"{result.probe} found a device with no name, arch {result.arch}, whose hardware "
                f"model did not load: {broken}",
            )
        return Detection(
            None,
            None,
            result.probe,
            f"{result.probe} found a device with no name and unrecognised arch {result.arch!r}",
        )
    return Detection(None, None, "none", "no GPU found: " + "; ".join(notes))


def _arch_matches(hw: HardwareModel, arch: str) -> bool:
    a = arch.casefold()
    return a in (
        hw.architecture.casefold(),
        f"sm_{hw.build.arch}".casefold(),
        hw.build.arch.casefold(),
    )
