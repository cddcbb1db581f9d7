"""Fleet files: which accelerators a team runs, how many, and what each costs an hour.

A fleet is a small YAML file, schema-checked like the hardware models (unknown or missing keys are
errors that name the file and the field):

    name: example                  # optional; defaults to the file's stem
    currency: USD                  # optional; the unit of hourly_price (default USD)
    devices:
      - model: h100                # a hardware model name or alias (`porter hw list`)
        count: 64                  # how many of them
        hourly_price: 2.99         # optional: price per device-hour
      - model: mi300x
        count: 16

`porter compare OP --fleet FILE` turns it into calls per second for the whole fleet and a cost per
million calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from porter.errors import FleetError

_TOP_KEYS = {"name", "currency", "devices"}
_DEVICE_KEYS = {"model", "count", "hourly_price"}


@dataclass(frozen=True)
class FleetDevice:
    model: str  # canonical hardware model name, e.g. "h100"
    count: int
    hourly_price: float | None = None  # per device-hour, in the fleet's currency


@dataclass(frozen=True)
class Fleet:
    name: str
    devices: tuple[FleetDevice, ...]
    currency: str = "USD"
    source: str = ""

    @property
    def models(self) -> list[str]:
        return [d.model for d in self.devices]


def load_fleet(path: str | Path) -> Fleet:
    """Read and check a fleet file.

    Raises:
        FleetError: missing file, YAML that does not parse, an unknown/missing key, a bad count or
            price, an unknown device model (listing the known ones), or a model listed twice. The
            message is one line: "<file>: <field>: <problem>".
    """
    import hwmodels

    p = Path(path)
    if not p.is_file():
        raise FleetError(f"{p}: no such fleet file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        raise FleetError(f"{p}: {where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None

    def bad(field: str, problem: str) -> FleetError:
        return FleetError(f"{p}: {field}: {problem}")

    if not isinstance(data, dict):
        raise bad("(top level)", f"must be a mapping with 'devices', got {type(data).__name__}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise bad(unknown[0], f"unknown key; allowed: {sorted(_TOP_KEYS)}")
    if "devices" not in data:
        raise bad("devices", "missing; list the fleet's devices")
    items = data["devices"]
    if not isinstance(items, list) or not items:
        raise bad("devices", "must be a non-empty list")
    name = data.get("name", p.stem)
    if not isinstance(name, str) or not name:
        raise bad("name", f"must be a non-empty string, got {name!r}")
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or not currency:
        raise bad("currency", f"must be a non-empty string, got {currency!r}")
    devices: list[FleetDevice] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        field = f"devices[{i}]"
        if not isinstance(item, dict):
            raise bad(field, f"must be a mapping with model and count, got {item!r}")
        unknown = sorted(set(item) - _DEVICE_KEYS)
        if unknown:
            raise bad(f"{field}.{unknown[0]}", f"unknown key; allowed: {sorted(_DEVICE_KEYS)}")
        for key in ("model", "count"):
            if key not in item:
                raise bad(f"{field}.{key}", "missing")
        model = item["model"]
        if not isinstance(model, str):
            raise bad(f"{field}.model", f"must be a device name, got {model!r}")
        try:
            canonical = hwmodels.get(model).name
        except hwmodels.UnknownDeviceError as exc:
            raise bad(f"{field}.model", str(exc).splitlines()[0]) from None
        count = item["count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise bad(f"{field}.count", f"must be a positive integer, got {count!r}")
        price = item.get("hourly_price")
        if price is not None and (isinstance(price, bool) or not isinstance(price, (int, float))
                                  or price < 0):
            raise bad(f"{field}.hourly_price", f"must be a number >= 0, got {price!r}")
        if canonical in seen:
            raise bad(f"{field}.model", f"{canonical} is already devices[{seen[canonical]}]; "
                      f"list each model once with its count")
        seen[canonical] = i
        devices.append(FleetDevice(model=canonical, count=count,
                                   hourly_price=float(price) if price is not None else None))
    return Fleet(name=name, devices=tuple(devices), currency=currency, source=str(p))


def fleet_summary(fleet: Fleet, time_ms: dict[str, float | None]) -> dict[str, Any]:
    """Calls per second for the whole fleet and cost per million calls, at one shape.

    Args:
        fleet: the fleet.
        time_ms: device model -> time per call (ms) of the op at that shape; None: no kernel
            and no projection for that device (it adds no throughput and its price is still paid).

    Returns:
        {"calls_per_s", "cost_per_million_calls" (None unless every device has a price),
         "hourly_cost", "per_device": {model: calls per second of all its units}}.
    """
    per_device: dict[str, float] = {}
    for d in fleet.devices:
        t = time_ms.get(d.model)
        per_device[d.model] = d.count * 1000.0 / t if t else 0.0
    calls = sum(per_device.values())
    priced = all(d.hourly_price is not None for d in fleet.devices)
    hourly = sum(d.count * (d.hourly_price or 0.0) for d in fleet.devices) if priced else None
    cost = (hourly / (calls * 3600.0) * 1e6) if (hourly is not None and calls > 0) else None
    return {"calls_per_s": calls, "cost_per_million_calls": cost, "hourly_cost": hourly,
            "per_device": per_device}
