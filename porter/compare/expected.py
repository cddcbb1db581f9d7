"""The expected error of a projected row, from the JSON `python -m bench.validate_projection`
wrote: the validated figure for a validated device pair, else widened by the stated factor for
the vendor and labelled unvalidated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hwmodels
from porter.compare.table import DEFAULT_VALIDATION
from porter.compare.table import CompareError


def load_expected_error(path: str | Path = DEFAULT_VALIDATION) -> dict[str, Any]:
    """The `expected_error` object `python -m bench.validate_projection` wrote.

    Raises:
        CompareError: the file is missing or has no `expected_error`.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        return dict(data["expected_error"])
    except FileNotFoundError:
        raise CompareError(f"{p}: no projection validation; run `python -m "
                           f"bench.validate_projection` to write it") from None
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CompareError(f"{p}: not a projection validation ({exc})") from None


def expected_error_for(device: str, expected: dict[str, Any], *, calibration: str | None,
                       method: str) -> tuple[float, bool]:
    """(expected error in percent, validated?) for a projected row.

    Args:
        device: the projected device.
        expected: `load_expected_error()`.
        calibration: the measured device a transfer starts from (None for first principles).
        method: "copy-model transfer", "ceiling-ratio transfer" or "first principles".

    The validated figure applies only when both devices are a validated pair and the method is a
    transfer; everything else is the validated figure widened by the stated factor for the vendor,
    and labelled unvalidated.
    """
    base = float(expected["naive_ceiling_ratio_p90_pct" if method == "ceiling-ratio transfer"
                          else "hwmodel_only_p90_pct"])
    pair = set(expected["validated_devices"])
    if method != "first principles" and device in pair and calibration in pair:
        return base, True
    vendor = hwmodels.get(device).vendor
    factor = float(expected["widen_same_vendor"] if vendor in expected["validated_vendors"]
                   else expected["widen_other_vendor"])
    return base * factor, False
