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

import hashlib
import os
import threading
from pathlib import Path

from hwmodels.descriptor import descriptor
from hwmodels.detect import Detection
from hwmodels.detect import detect
from hwmodels.loader import DEVICES_DIR
from hwmodels.loader import DEVICES_DIR_ENV
from hwmodels.loader import BrokenDeviceError
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

_lock = threading.Lock()
_registries: dict[Path, Registry] = {}  # one per folder, so tests pointing elsewhere stay apart


def devices_dir() -> Path:
    """The folder of device YAMLs: `$PORTER_HWMODELS_DIR` when set, else the shipped one.

    Raises:
        HardwareModelError: the variable names something that is not a directory.
    """
    raw = os.environ.get(DEVICES_DIR_ENV, "").strip()
    if not raw:
        return DEVICES_DIR
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise HardwareModelError(
            path,
            "",
            f"not a directory ({DEVICES_DIR_ENV}={raw!r}); point it at a folder of device "
            f"YAMLs, or unset it to use the shipped models in {DEVICES_DIR}",
        )
    return path


def registry() -> Registry:
    """The registry of `devices_dir()`, loaded once per folder and cached.

    A file that does not load is kept in the registry as broken (`broken()`), not raised.

    Raises:
        HardwareModelError: `$PORTER_HWMODELS_DIR` is not a directory.
    """
    directory = devices_dir().resolve()
    with _lock:
        reg = _registries.get(directory)
        if reg is None:
            reg = _registries[directory] = Registry.from_dir(directory)
        return reg


def clear_cache() -> None:
    """Forgets the cached registries (after a YAML was edited, e.g. by measure_ceilings --write)."""
    with _lock:
        _registries.clear()


def get(name_or_alias: str) -> HardwareModel:
    """Looks a device up by name, full name or alias, case-insensitively.

    Args:
        name_or_alias: e.g. "h100", "H100", "NVIDIA H100 80GB HBM3", "sm_90", "gfx942".

    Returns:
        The matching `HardwareModel`.

    Raises:
        BrokenDeviceError: the name belongs to a YAML file that did not load; the message is
            that file's error (file and dotted field). Also an `UnknownDeviceError` and a
            `HardwareModelError`.
        UnknownDeviceError: nothing matches; the message lists the known names.
        HardwareModelError: `$PORTER_HWMODELS_DIR` is not a directory.
    """
    return registry().get(name_or_alias)


def all_models() -> list[HardwareModel]:
    """Every model that loaded, sorted by vendor then name (broken files are left out).

    Raises:
        HardwareModelError: `$PORTER_HWMODELS_DIR` is not a directory.
    """
    return registry().all()


def broken() -> list[HardwareModelError]:
    """The errors of the device files that did not load, sorted by file name; [] when none.

    Raises:
        HardwareModelError: `$PORTER_HWMODELS_DIR` is not a directory.
    """
    return registry().broken()


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
