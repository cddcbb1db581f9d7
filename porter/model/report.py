"""A profile as text (ops by share, the ranked groups, what the porter cannot take), and as the
JSON file `porter profile --out` writes and `porter port --from-profile` reads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from porter.model.load import ModelLoadError
from porter.model.rank import combined_gain

PROFILE_FORMAT = 1


def format_profile(prof: dict[str, Any], *, top_ops: int = 15) -> str:
    """The profile as text: ops by share, the ranked groups, what the porter cannot take."""
    from tabulate import tabulate

    lines = [f"model {prof['model']} on {prof['device']} ({prof['clock']} time per forward, "
             f"{prof['steps']} passes profiled); ranking for {prof['hw']}"]
    lines += [f"note: {n}" for n in prof.get("notes", [])]
    label = "share of device time" if prof["clock"] == "device" else \
        "share of CPU time (indicative only)"
    rows_ = [[o["op"], o["shapes"][:60], o["calls"], f"{o['ms']:.3f}", f"{100 * o['share']:.1f}%"]
             for o in prof["ops"][:top_ops]]
    lines += ["", f"ops by {label}:",
              tabulate(rows_, headers=["op", "input shapes", "calls", "ms", "share"])]
    if prof.get("groups"):
        lines += ["", f"fused groups the porter can take, by expected whole-model gain "
                      f"({prof.get('basis', '')}):"]
        rows_ = []
        for i, g in enumerate(prof["groups"], 1):
            shapes = sorted({"x".join(map(str, inst["inputs"][0]["shape"])) for inst in
                             g["instances"]})
            rows_.append([i, g["pack_name"], g["family"], len(g["instances"]), ", ".join(shapes),
                          f"{100 * g['share']:.1f}%", f"{g['speedup']:.2f}x ({g['ours_label']})",
                          f"{g['gain']:.3f}x"])
        lines.append(tabulate(rows_, headers=["#", "group (pack)", "family", "instances",
                                              "first input", "share f", "est. s",
                                              "end-to-end 1/(1-f+f/s)"]))
        top = prof["groups"]
        lines.append(f"all {len(top)} groups together: {combined_gain(top):.3f}x expected "
                     "end to end")
    if prof.get("not_portable"):
        lines += ["", "not taken by the porter:"]
        rows_ = [[e["op"], e["count"], f"{100 * e['share']:.1f}%", e["reason"]]
                 for e in prof["not_portable"]]
        lines.append(tabulate(rows_, headers=["op", "count", "share", "why"],
                              maxcolwidths=[None, None, None, 70]))
    return "\n".join(lines)


def save_profile(prof: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(prof, indent=2) + "\n")
    return p


def read_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Raises ModelLoadError for a missing or malformed profile file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{p}: not a profile written by `porter profile --out` "
                             f"({exc})") from None
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT or "groups" not in data:
        raise ModelLoadError(f"{p}: not a profile written by `porter profile --out` "
                             f"(format {PROFILE_FORMAT})")
    return data
