"""Hardware models: one YAML per device, typed on load, with a source for every number.

Public API (see docs/INTERNAL_API.md):

    hwmodels.get("H100")            -> HardwareModel   (name, full name or alias; case-insensitive)
    hwmodels.all_models()           -> list[HardwareModel], sorted by vendor then name
    hwmodels.broken()               -> list[HardwareModelError], the files that did not load
    hwmodels.devices_dir()          -> Path            (the folder the registry reads)
    hwmodels.load_file(path)        -> HardwareModel   (any YAML file, validated)
    hwmodels.detect()               -> Detection       (the live device, never raises)
    hwmodels.descriptor(hw)         -> str             (byte-stable text block for prompts)
    hwmodels.model_hash(hw)         -> str             (sha256 of the YAML file's bytes)

Each file loads on its own: a broken YAML is reported (`broken()`, `porter hw list`, `porter hw
validate`) and asking for that device raises `BrokenDeviceError` naming the file and the field,
while every other device works. `PORTER_HWMODELS_DIR` points the registry at another folder of
device YAMLs instead of the shipped `hwmodels/devices/` (tests use it).

Importing this package is cheap: torch, pynvml and amdsmi are imported only inside `detect()`.
"""

from __future__ import annotations

from hwmodels.catalog import Registry  # noqa: F401 - importable from here as before
from hwmodels.catalog import all_models
from hwmodels.catalog import broken
from hwmodels.catalog import clear_cache
from hwmodels.catalog import devices_dir
from hwmodels.catalog import get
from hwmodels.catalog import model_hash
from hwmodels.catalog import registry
from hwmodels.descriptor import descriptor
from hwmodels.detect import Detection
from hwmodels.detect import detect
from hwmodels.loader import DEVICES_DIR
from hwmodels.loader import DEVICES_DIR_ENV
from hwmodels.loader import BrokenDeviceError
from hwmodels.loader import HardwareModelError
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
    "DEVICES_DIR_ENV",
    "DTYPES",
    "BrokenDeviceError",
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
    "broken",
    "clear_cache",
    "descriptor",
    "detect",
    "devices_dir",
    "get",
    "load_file",
    "model_hash",
    "registry",
]
