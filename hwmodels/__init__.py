"""Hardware models: one YAML per device, typed on load, with a source for every number.

Public API (see docs/INTERNAL_API.md):

    hwmodels.get("H100")            -> HardwareModel   (name, full name or alias; case-insensitive)
    hwmodels.all_models()           -> list[HardwareModel], sorted by vendor then name
    hwmodels.load_file(path)        -> HardwareModel   (any YAML file, validated)
    hwmodels.detect()               -> Detection       (the live device, never raises)
    hwmodels.descriptor(hw)         -> str             (byte-stable text block for prompts)
    hwmodels.model_hash(hw)         -> str             (sha256 of the YAML file's bytes)

Importing this package is cheap: torch, pynvml and amdsmi are imported only inside `detect()`.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from hwmodels.descriptor import descriptor
from hwmodels.detect import Detection
from hwmodels.detect import detect
from hwmodels.loader import DEVICES_DIR
from hwmodels.loader import HardwareModelError
from hwmodels.loader import Registry
from hwmodels.loader import UnknownDeviceError
from hwmodels.loader import load_file
from hwmodels.model import DTYPES
from hwmodels.model import BuildTarget
from hwmodels.model import ComputeUnitLimits
from hwmodels.model import Fact
from hwmodels.model import HardwareModel
from hwmodels.model import MeasuredCeiling
from hwmodels.model import Memory

__all__ = [
    "DEVICES_DIR",
    "DTYPES",
    "BuildTarget",
    "ComputeUnitLimits",
    "Detection",
    "Fact",
    "HardwareModel",
    "HardwareModelError",
    "MeasuredCeiling",
    "Memory",
    "UnknownDeviceError",
    "all_models",
    "clear_cache",
    "descriptor",
    "detect",
    "get",
    "load_file",
    "model_hash",
    "registry",
]

_lock = threading.Lock()
_registry: Registry | None = None


def registry() -> Registry:
    """The registry of `hwmodels/devices/`, loaded once and cached.

    Raises:
        HardwareModelError: a shipped YAML is broken or two files claim the same alias.
    """
    global _registry
    with _lock:
        if _registry is None:
            _registry = Registry.from_dir(DEVICES_DIR)
        return _registry


def clear_cache() -> None:
    """Forgets the cached registry (after a YAML was edited, e.g. by measure_ceilings --write)."""
    global _registry
    with _lock:
        _registry = None


def get(name_or_alias: str) -> HardwareModel:
    """Looks a device up by name, full name or alias, case-insensitively.

    Args:
        name_or_alias: e.g. "h100", "H100", "NVIDIA H100 80GB HBM3", "sm_90", "gfx942".

    Returns:
        The matching `HardwareModel`.

    Raises:
        UnknownDeviceError: nothing matches; the message lists the known names.
        HardwareModelError: a shipped YAML is broken.
    """
    return registry().get(name_or_alias)


def all_models() -> list[HardwareModel]:
    """Every shipped model, sorted by vendor then name.

    Raises:
        HardwareModelError: a shipped YAML is broken.
    """
    return registry().all()


def model_hash(hw: HardwareModel) -> str:
    """sha256 hex digest of the bytes of the YAML file `hw` was loaded from.

    Goes into pack manifests so a kernel's evidence names the exact facts it was judged
    against. Any edit to the file (a new measured entry included) changes the hash.

    Raises:
        HardwareModelError: `hw` has no `source_file` or the file cannot be read.
    """
    if not hw.source_file:
        raise HardwareModelError(
            "<memory>", "source_file", f"model {hw.name!r} was not loaded from a file"
        )
    try:
        data = Path(hw.source_file).read_bytes()
    except OSError as e:
        raise HardwareModelError(hw.source_file, "", f"cannot read file: {e.strerror or e}") from e
    return hashlib.sha256(data).hexdigest()
