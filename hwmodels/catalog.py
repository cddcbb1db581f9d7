"""The device catalog: `Registry` (every device YAML of a folder, loaded one by one, broken
files kept apart, names and aliases indexed), the registry of `devices_dir()` loaded once per
folder, and the lookups on it (`get`, `all_models`, `broken`, `model_hash`). Re-exported by
`hwmodels`; a module of its own so `hwmodels.detect` can use it without importing the package
that imports it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

import yaml

from hwmodels.loader import DEVICES_DIR
from hwmodels.loader import DEVICES_DIR_ENV
from hwmodels.loader import BrokenDeviceError
from hwmodels.loader import HardwareModelError
from hwmodels.loader import UnknownDeviceError
from hwmodels.loader import display_path
from hwmodels.loader import load_file
from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

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


# -- registry ----------------------------------------------------------------------------------
def _key(name: str) -> str:
    """Lookup key: case- and surrounding-space-insensitive, inner whitespace collapsed."""
    return " ".join(name.split()).casefold()


class Registry:
    """Every model of one directory, indexed by name, full name and aliases.

    `from_dir` loads each `*.yaml` on its own: a file that does not load is kept as broken with
    its error instead of stopping the others. A label (name, full name or alias) claimed by two
    files breaks both, whatever their order: which device "sm_90" means must never depend on
    which file sorts first. Asking for a broken device raises `BrokenDeviceError`; `broken()`
    lists the errors.
    """

    def __init__(
        self, models: Iterable[HardwareModel] = (), broken: Iterable[HardwareModelError] = ()
    ) -> None:
        """Indexes `models` (and `broken`, the errors of files that did not load).

        Raises:
            HardwareModelError: two of `models` share a name or answer to the same label.
        """
        self._models: dict[str, HardwareModel] = {}
        self._index: dict[str, HardwareModel] = {}
        self._broken: dict[str, HardwareModelError] = {}  # file stem -> its error
        self._broken_index: dict[str, str] = {}  # lookup key -> file stem
        for hw in models:
            self._add(hw)
        for err in broken:
            self._add_broken(Path(err.path).stem, err, ())

    @classmethod
    def from_dir(cls, directory: str | os.PathLike[str]) -> Registry:
        """Loads every `*.yaml` in `directory`, each file on its own (sorted, so reproducible).

        Never raises for a bad file: its error is kept (`broken()`) and logged at INFO; `porter hw
        list` and `porter hw validate` show it, and `get` of that device raises it.

        Raises:
            HardwareModelError: `directory` is not a directory (field "", the path named).
        """
        d = Path(directory)
        if not d.is_dir():
            raise HardwareModelError(d, "", "not a directory of device YAML files")
        paths = sorted(d.glob("*.yaml"))
        log.debug("loading %d hardware models from %s", len(paths), d)
        reg = cls()
        loaded: list[HardwareModel] = []
        for p in paths:
            try:
                loaded.append(load_file(p))
            except HardwareModelError as e:
                log.info("hardware model not loaded: %s", e)
                reg._add_broken(p.stem, e, _salvage_labels(p))
        clashes = _clashes(loaded)
        for hw in loaded:
            if hw.name not in clashes:
                reg._add(hw)
        for hw in loaded:
            if hw.name in clashes:
                log.info("hardware model not loaded: %s", clashes[hw.name])
                reg._add_broken(Path(hw.source_file).stem, clashes[hw.name], _labels(hw))
        return reg

    def _add(self, hw: HardwareModel) -> None:
        """Indexes `hw` under all its labels, or raises leaving the registry as it was."""
        if hw.name in self._models:
            raise HardwareModelError(hw.source_file, "name", f"duplicate model name {hw.name!r}")
        for field, label in _labelled_fields(hw):
            other = self._index.get(_key(label))
            if other is not None:
                raise HardwareModelError(
                    hw.source_file,
                    field,
                    f"{label!r} is ambiguous: {display_path(other.source_file)} "
                    f"(model {other.name!r}) answers to it too",
                )
        self._models[hw.name] = hw
        for label in _labels(hw):
            self._index[_key(label)] = hw

    def _add_broken(self, stem: str, err: HardwareModelError, labels: Iterable[str]) -> None:
        """Remembers a file that did not load, under its stem and whatever labels it had."""
        self._broken[stem] = err
        for label in (stem, *labels):
            self._broken_index.setdefault(_key(label), stem)

    def get(self, name_or_alias: str) -> HardwareModel:
        """See `hwmodels.get`."""
        key = _key(name_or_alias) if isinstance(name_or_alias, str) else None
        hw = self._index.get(key) if key is not None else None
        if hw is not None:
            return hw
        stem = self._broken_index.get(key) if key is not None else None
        if stem is not None:
            raise BrokenDeviceError(str(name_or_alias), self._broken[stem], self._models)
        raise UnknownDeviceError(str(name_or_alias), self._models)

    def find(self, name_or_alias: str) -> HardwareModel | None:
        """Like `get`, but None instead of raising (for a broken device too)."""
        return self._index.get(_key(name_or_alias))

    def broken_error(self, name_or_alias: str) -> HardwareModelError | None:
        """The load error of the broken file answering to `name_or_alias`, else None."""
        stem = self._broken_index.get(_key(name_or_alias))
        return self._broken[stem] if stem is not None else None

    def all(self) -> list[HardwareModel]:
        """Every model that loaded, sorted by vendor then name."""
        return sorted(self._models.values(), key=lambda hw: (hw.vendor, hw.name))

    def names(self) -> list[str]:
        """The names of the models that loaded, sorted."""
        return sorted(self._models)

    def broken(self) -> list[HardwareModelError]:
        """The errors of the files that did not load, sorted by file name."""
        return [self._broken[stem] for stem in sorted(self._broken)]


def _labelled_fields(hw: HardwareModel) -> list[tuple[str, str]]:
    """(dotted field, label) for every name `hw` answers to: name, full name, aliases."""
    return [
        ("name", hw.name),
        ("full_name", hw.full_name),
        *((f"aliases[{i}]", alias) for i, alias in enumerate(hw.aliases)),
    ]


def _labels(hw: HardwareModel) -> list[str]:
    return [label for _, label in _labelled_fields(hw)]


def _clashes(models: list[HardwareModel]) -> dict[str, HardwareModelError]:
    """Model name -> the error for each model answering to a label another model claims too.

    Every claimant of a contested label gets an error naming the others, so the outcome does
    not depend on the order the files were read in. A model's first contested label is named.
    """
    claims: dict[str, list[tuple[HardwareModel, str, str]]] = {}
    for hw in models:
        for field, label in _labelled_fields(hw):
            owners = claims.setdefault(_key(label), [])
            if all(owner is not hw for owner, _, _ in owners):  # "h100" and "H100": one claim
                owners.append((hw, field, label))
    out: dict[str, HardwareModelError] = {}
    for owners in claims.values():
        if len(owners) < 2:
            continue
        for hw, field, label in owners:
            if hw.name in out:
                continue
            others = "; ".join(
                f"{display_path(o.source_file)} (model {o.name!r})"
                for o, _, _ in owners
                if o is not hw
            )
            out[hw.name] = HardwareModelError(
                hw.source_file, field, f"{label!r} is ambiguous: {others} answers to it too"
            )
    return out


def _salvage_labels(path: Path) -> tuple[str, ...]:
    """The full name and aliases a broken file declares, where its YAML still parses that far.

    So that `get("sm_90")` with a broken h100.yaml names the broken file instead of saying no
    device is called that. Anything unreadable gives nothing; the stem always works.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ()
    if not isinstance(data, dict):
        return ()
    labels = [data.get("full_name")]
    aliases = data.get("aliases")
    if isinstance(aliases, list):
        labels.extend(aliases)
    return tuple(x for x in labels if isinstance(x, str) and x.strip())
