"""The device catalog: the registry of the device YAMLs in `devices_dir()`, loaded once per
folder, and the lookups on it (`get`, `all_models`, `broken`, `model_hash`). Re-exported by
`hwmodels`; a module of its own so `hwmodels.detect` can use it without importing the package
that imports it.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from hwmodels.loader import DEVICES_DIR
from hwmodels.loader import DEVICES_DIR_ENV
from hwmodels.loader import HardwareModelError
from hwmodels.loader import Registry
from hwmodels.model import HardwareModel

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
