"""YAML -> `HardwareModel`: strict schema validation and the name/alias registry.

Every device file in `hwmodels/devices/` is checked field by field. A problem raises
`HardwareModelError` whose message names the file and the dotted field, e.g.

    hwmodels/devices/h100.yaml: memory.bandwidth_gbps.value: must be a positive number, got -3

Strict means: unknown keys, missing keys, wrong types, zero/negative numbers, a number without
a `source`, a bad `kind`, unknown dtypes, backends, vendors or features, and duplicate keys all
fail. A silently ignored typo in a hardware fact would turn into a wrong roofline later.

Strict per file, not per directory: `Registry.from_dir` loads each file on its own. A broken
file is kept as a `HardwareModelError` (`Registry.broken()`), asking for that device raises
`BrokenDeviceError` with the file's error, and every other device still works: one typo in
`mi300x.yaml` must not stop a port to the H100.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from typing import get_args

import yaml

from hwmodels.errors import PorterError
from hwmodels.model import DTYPES
from hwmodels.model import Backend
from hwmodels.model import BuildTarget
from hwmodels.model import ComputeUnitLimits
from hwmodels.model import Fact
from hwmodels.model import FactKind
from hwmodels.model import HardwareModel
from hwmodels.model import MeasuredCeiling
from hwmodels.model import Memory
from hwmodels.model import Vendor

log = logging.getLogger(__name__)

DEVICES_DIR = Path(__file__).resolve().parent / "devices"
# Points the registry at another folder of device YAMLs (tests, a user's own models).
DEVICES_DIR_ENV = "PORTER_HWMODELS_DIR"

VENDORS: tuple[str, ...] = get_args(Vendor)
BACKENDS: tuple[str, ...] = get_args(Backend)
FACT_KINDS: tuple[str, ...] = get_args(FactKind)

# Which backend builds for which vendor. A mismatch is a typo, not a choice.
VENDOR_BACKEND: dict[str, str] = {"nvidia": "triton-cuda", "amd": "triton-hip", "apple": "metal"}

# The feature vocabulary other packages test with `hw.has(...)`. Closed on purpose: a misspelt
# feature ("wgmma " or "tma_load") would otherwise just never match and nobody would notice.
KNOWN_FEATURES: frozenset[str] = frozenset(
    {
        "async_copy",  # cp.async (sm_80+)
        "mma_sync",  # warp-level mma.sync tensor core instructions (sm_80+)
        "tma",  # Tensor Memory Accelerator (sm_90+)
        "wgmma",  # warpgroup MMA (sm_90a)
        "thread_block_clusters",  # distributed shared memory (sm_90+)
        "tcgen05",  # 5th-gen tensor core instructions with tensor memory (sm_100a)
        "tensor_memory",  # TMEM (sm_100a)
        "mfma",  # AMD matrix fused multiply-add (CDNA)
        "simdgroup_matrix",  # Apple simdgroup matrix multiply
        "bf16",
        "tf32",
        "fp8_e4m3",  # OCP FP8 (NVIDIA sm_89+, AMD gfx950)
        "fp8_e5m2",
        "fp8_e4m3fnuz",  # AMD gfx942 FP8 variants (no negative zero, different bias)
        "fp8_e5m2fnuz",
        "fp6",
        "fp4_e2m1",
        "mxfp4",  # OCP microscaling FP4 (block-scaled)
        "nvfp4",  # NVIDIA block-scaled FP4 (sm_100a)
        "unified_memory",  # CPU and GPU share one physical memory (Apple)
    }
)

_TOP_REQUIRED = (
    "name",
    "full_name",
    "aliases",
    "vendor",
    "architecture",
    "build",
    "memory",
    "dense_tflops",
    "compute_units",
    "boost_clock_mhz",
    "limits",
    "features",
)
_TOP_OPTIONAL = ("measured", "notes")
_BUILD_KEYS = ("backend", "arch", "warp_size")
_MEMORY_KEYS = ("bandwidth_gbps", "capacity_gb", "last_level_cache_bytes")
_LIMIT_KEYS = (
    "shared_memory_per_unit_bytes",
    "shared_memory_per_block_bytes",
    "registers_per_unit",
    "max_registers_per_thread",
    "max_threads_per_unit",
    "max_threads_per_block",
    "max_warps_per_unit",
    "max_blocks_per_unit",
)
_FACT_KEYS_REQUIRED = ("value", "source", "kind")
_MEASURED_REQUIRED = ("name", "value", "date", "method")
_MEASURED_OPTIONAL = ("versions",)
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


# The CLI turns any PorterError into one line and exit 2 (porter/errors.py, the one catalog of
# user-facing errors), so the errors below derive from it: a broken YAML or an unknown device
# name reaches the user as one line from every command, not only from `porter hw`. porter.errors
# imports nothing, so this costs hwmodels no weight.
class HardwareModelError(PorterError, ValueError):
    """A device YAML file is unreadable or breaks the schema.

    Attributes:
        path: the file, as shown in the message.
        field: dotted field name ("memory.bandwidth_gbps.value"), or "" for whole-file problems.
        problem: what is wrong with it.
    """

    def __init__(self, path: str | os.PathLike[str], field: str, problem: str) -> None:
        self.path = display_path(path)
        self.field = field
        self.problem = problem
        where = f"{self.path}: {field}: " if field else f"{self.path}: "
        super().__init__(where + problem)


class UnknownDeviceError(PorterError, LookupError):
    """A name or alias matches no hardware model. The message lists the known names."""

    def __init__(self, query: str, known: Iterable[str]) -> None:
        self.query = query
        self.known = tuple(sorted(known))
        super().__init__(
            f"unknown device {query!r}; known devices: {', '.join(self.known)} "
            "(names, full names and aliases such as 'H100', 'sm_90' or 'gfx942' also work; "
            "see `porter hw list`)"
        )


class BrokenDeviceError(HardwareModelError, UnknownDeviceError):
    """A name or alias belongs to a device whose YAML file did not load.

    Both a `HardwareModelError` (the message is the file's own error, naming the file and the
    dotted field) and an `UnknownDeviceError` (no usable model answers to the name), so code
    that handles either one handles this.

    Attributes:
        query: the name asked for.
        cause: the file's `HardwareModelError`.
        path, field, problem: the cause's.
        known: the devices that did load.
    """

    def __init__(self, query: str, cause: HardwareModelError, known: Iterable[str]) -> None:
        self.query = query
        self.cause = cause
        self.known = tuple(sorted(known))
        self.path = cause.path
        self.field = cause.field
        self.problem = cause.problem
        # ValueError/LookupError's own __init__: the two parents' __init__s build other messages.
        Exception.__init__(
            self,
            f"device {query!r} has a broken hardware model: {cause} "
            "(fix the file; `porter hw validate` checks every model)",
        )


def display_path(path: str | os.PathLike[str]) -> str:
    """The path relative to the working directory when it lies below it (shorter messages)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)


# -- YAML reading ------------------------------------------------------------------------------
class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (PyYAML keeps the last one silently)."""


def _construct_mapping_no_dups(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping_no_dups
)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise HardwareModelError(path, "", f"cannot read file: {e.strerror or e}") from e
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise HardwareModelError(path, "", f"invalid YAML{where}: {problem}") from e


# -- field checkers ----------------------------------------------------------------------------
class _Checker:
    """Validates one parsed file; every error names `self.path` and the dotted field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, field: str, problem: str) -> HardwareModelError:
        return HardwareModelError(self.path, field, problem)

    def mapping(
        self,
        obj: Any,
        field: str,
        required: Iterable[str],
        optional: Iterable[str] = (),
    ) -> dict[str, Any]:
        if not isinstance(obj, dict):
            if not field:
                raise self.fail("", f"top level must be a mapping, got {_describe(obj)}")
            raise self.fail(field, f"must be a mapping, got {_describe(obj)}")
        required = tuple(required)
        allowed = set(required) | set(optional)
        for key in obj:
            if not isinstance(key, str) or key not in allowed:
                raise self.fail(
                    _join(field, str(key)),
                    f"unknown key; allowed keys here: {', '.join(sorted(allowed))}",
                )
        for key in required:
            if key not in obj:
                raise self.fail(_join(field, key), "missing required key")
        return obj

    def string(self, obj: Any, field: str) -> str:
        if not isinstance(obj, str) or not obj.strip():
            raise self.fail(field, f"must be a non-empty string, got {_describe(obj)}")
        return obj

    def choice(self, obj: Any, field: str, choices: Iterable[str]) -> str:
        choices = tuple(choices)
        if obj not in choices:
            raise self.fail(field, f"must be one of {', '.join(choices)}; got {obj!r}")
        return obj

    def positive_number(self, obj: Any, field: str) -> float:
        # bool is an int subclass: `value: yes` must not become 1.
        ok = isinstance(obj, (int, float)) and not isinstance(obj, bool)
        if not ok or not math.isfinite(obj) or obj <= 0:
            raise self.fail(field, f"must be a positive number, got {_describe(obj)}")
        return float(obj)

    def positive_int(self, obj: Any, field: str) -> int:
        value = self.positive_number(obj, field)
        if value != int(value):
            raise self.fail(field, f"must be a whole number, got {obj!r}")
        return int(value)

    def fact(self, obj: Any, field: str, *, whole: bool = False) -> Fact:
        self.mapping(obj, field, _FACT_KEYS_REQUIRED)
        if whole:
            value: float = float(self.positive_int(obj["value"], _join(field, "value")))
        else:
            value = self.positive_number(obj["value"], _join(field, "value"))
        source = self.string(obj["source"], _join(field, "source"))
        kind = self.choice(obj["kind"], _join(field, "kind"), FACT_KINDS)
        return Fact(value=value, source=source.strip(), kind=kind)  # type: ignore[arg-type]

    def string_list(self, obj: Any, field: str) -> list[str]:
        if not isinstance(obj, list):
            raise self.fail(field, f"must be a list of strings, got {_describe(obj)}")
        return [self.string(item, f"{field}[{i}]") for i, item in enumerate(obj)]


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def _describe(obj: Any) -> str:
    if obj is None:
        return "nothing (null)"
    if isinstance(obj, (dict, list)):
        return f"a {type(obj).__name__}"
    if isinstance(obj, str):
        return f"the string {obj!r}"
    return repr(obj)


# -- the loader --------------------------------------------------------------------------------
def load_file(path: str | os.PathLike[str]) -> HardwareModel:
    """Loads and validates one device YAML file.

    Args:
        path: a YAML file following the schema of `hwmodels/devices/h100.yaml`.

    Returns:
        The frozen `HardwareModel`, with `source_file` set to the file's absolute path.

    Raises:
        HardwareModelError: the file cannot be read, is not YAML, or breaks the schema; the
            message names the file and the dotted field.
    """
    p = Path(path)
    data = _read_yaml(p)
    c = _Checker(p)
    if not isinstance(data, dict):
        raise HardwareModelError(p, "", f"top level must be a mapping, got {_describe(data)}")
    c.mapping(data, "", _TOP_REQUIRED, _TOP_OPTIONAL)

    name = c.string(data["name"], "name")
    if name != p.stem:
        raise c.fail("name", f"must equal the file name stem {p.stem!r}, got {name!r}")
    full_name = c.string(data["full_name"], "full_name")
    aliases = c.string_list(data["aliases"], "aliases")
    vendor = c.choice(data["vendor"], "vendor", VENDORS)
    architecture = c.string(data["architecture"], "architecture")

    b = c.mapping(data["build"], "build", _BUILD_KEYS)
    backend = c.choice(b["backend"], "build.backend", BACKENDS)
    if VENDOR_BACKEND[vendor] != backend:
        raise c.fail(
            "build.backend",
            f"vendor {vendor!r} is built with {VENDOR_BACKEND[vendor]!r}, got {backend!r}",
        )
    # Quoted on purpose in the YAML: an unquoted 90 would be an int, and "80" vs 80 matters to
    # Triton's GPUTarget for cuda (int) vs hip (str); the backend converts, the model keeps text.
    build = BuildTarget(
        backend=backend,  # type: ignore[arg-type]
        arch=c.string(b["arch"], "build.arch"),
        warp_size=c.positive_int(b["warp_size"], "build.warp_size"),
    )

    m = c.mapping(data["memory"], "memory", _MEMORY_KEYS)
    memory = Memory(
        bandwidth_gbps=c.fact(m["bandwidth_gbps"], "memory.bandwidth_gbps"),
        capacity_gb=c.fact(m["capacity_gb"], "memory.capacity_gb"),
        last_level_cache_bytes=c.fact(
            m["last_level_cache_bytes"], "memory.last_level_cache_bytes", whole=True
        ),
    )

    dt = data["dense_tflops"]
    if not isinstance(dt, dict) or not dt:
        raise c.fail("dense_tflops", f"must be a non-empty mapping, got {_describe(dt)}")
    dense: dict[str, Fact] = {}
    for key in DTYPES:  # canonical order, whatever the file's order
        if key in dt:
            dense[key] = c.fact(dt[key], f"dense_tflops.{key}")
    for key in dt:
        if key not in DTYPES:
            raise c.fail(f"dense_tflops.{key}", f"unknown dtype; allowed: {', '.join(DTYPES)}")

    lim = c.mapping(data["limits"], "limits", _LIMIT_KEYS)
    limits = ComputeUnitLimits(
        **{k: c.fact(lim[k], f"limits.{k}", whole=True) for k in _LIMIT_KEYS}
    )
    _check_limit_order(c, limits)

    features = c.string_list(data["features"], "features")
    for i, feat in enumerate(features):
        if feat not in KNOWN_FEATURES:
            raise c.fail(
                f"features[{i}]",
                f"unknown feature {feat!r}; known: {', '.join(sorted(KNOWN_FEATURES))} "
                "(add new ones to KNOWN_FEATURES in hwmodels/loader.py)",
            )

    measured = _measured(c, data.get("measured"))
    notes = data.get("notes", "")
    if notes is None:
        notes = ""
    if not isinstance(notes, str):
        raise c.fail("notes", f"must be a string, got {_describe(notes)}")

    return HardwareModel(
        name=name,
        full_name=full_name,
        aliases=tuple(aliases),
        vendor=vendor,  # type: ignore[arg-type]
        architecture=architecture,
        build=build,
        memory=memory,
        dense_tflops=dense,
        compute_units=c.fact(data["compute_units"], "compute_units", whole=True),
        boost_clock_mhz=c.fact(data["boost_clock_mhz"], "boost_clock_mhz"),
        limits=limits,
        features=frozenset(features),
        measured=measured,
        notes=notes.strip(),
        source_file=str(p.resolve()),
    )


def _check_limit_order(c: _Checker, limits: ComputeUnitLimits) -> None:
    """Per-block limits cannot exceed per-unit ones; catches swapped or mistyped numbers."""
    pairs = (
        ("shared_memory_per_block_bytes", "shared_memory_per_unit_bytes"),
        ("max_threads_per_block", "max_threads_per_unit"),
        ("max_registers_per_thread", "registers_per_unit"),
    )
    for small, big in pairs:
        a = getattr(limits, small).value
        b = getattr(limits, big).value
        if a > b:
            raise c.fail(f"limits.{small}.value", f"{a:g} exceeds limits.{big}.value {b:g}")


def _measured(c: _Checker, obj: Any) -> tuple[MeasuredCeiling, ...]:
    if obj is None:
        return ()
    if not isinstance(obj, list):
        raise c.fail("measured", f"must be a list of entries, got {_describe(obj)}")
    out = []
    for i, entry in enumerate(obj):
        field = f"measured[{i}]"
        c.mapping(entry, field, _MEASURED_REQUIRED, _MEASURED_OPTIONAL)
        date = entry["date"]
        # YAML turns an unquoted 2026-11-22 into a date; accept it, store the ISO text.
        if isinstance(date, _dt.date):
            date = date.isoformat()
        if not isinstance(date, str) or not _ISO_DATE.match(date):
            raise c.fail(f"{field}.date", f"must be an ISO date YYYY-MM-DD, got {_describe(date)}")
        try:
            _dt.date.fromisoformat(date)
        except ValueError as e:
            raise c.fail(f"{field}.date", f"not a real date: {date!r}") from e
        versions = entry.get("versions", {}) or {}
        if not isinstance(versions, dict):
            raise c.fail(f"{field}.versions", f"must be a mapping, got {_describe(versions)}")
        for key, val in versions.items():
            if not isinstance(key, str) or not isinstance(val, str):
                raise c.fail(
                    f"{field}.versions.{key}",
                    f'must be a string (quote version numbers: "2.11"), got {_describe(val)}',
                )
        out.append(
            MeasuredCeiling(
                name=c.string(entry["name"], f"{field}.name"),
                value=c.positive_number(entry["value"], f"{field}.value"),
                date=date,
                method=c.string(entry["method"], f"{field}.method"),
                versions=dict(versions),
            )
        )
    return tuple(out)
