"""Verdicts in words: a rejection's kind and detail, a unit's failures summed up by kind, a config
in one line. What the port prints and what the Debugger classifies by."""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from porter.ledger import Ledger


def cfg_text(config: dict[str, Any]) -> str:
    """A config on one line: "num_warps=4,BLOCK_N=4096"."""
    return ",".join(f"{k}={v}" for k, v in config.items())


def failure_summary(ledger: Ledger, target: str, bucket: str, dname: str) -> str:
    """What the candidates of one (target, bucket, dtype) with no kernel did, per candidate
    class (the config's strategy) and, inside it, by kind of failure: "8 candidates, none
    passed: looped x5: 3 failed sweep at bf16 (max abs err 3.1e-01), 2 misfit (registers);
    single_pass x3: misfit (registers)". The ledger keeps each candidate's whole reason."""
    entries = [e for e in ledger
               if (e.target, e.bucket, e.dtype) == (target, bucket, dname)]
    if not entries:
        return "no candidate was offered (the search's space was empty after pruning)"
    classes: dict[str, dict[str, list[str]]] = {}
    for e in entries:
        if e.verdict == "rejected":
            kind, detail = reject_kind(e.reason)
        elif e.verdict == "skipped":
            kind, detail = "not checked (check budget spent; raise --max-checks)", ""
        else:
            kind, detail = f"{e.verdict} ({' '.join(e.reason.split())[:60]})", ""
        classes.setdefault(candidate_class(e.config), {}).setdefault(kind, []).append(detail)
    parts = []
    for cls, kinds in sorted(classes.items(), key=lambda kv: -sum(map(len, kv[1].values()))):
        n = sum(map(len, kinds.values()))
        whys = []
        for kind, details in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            example = next((d for d in details if d), "")
            count = f"{len(details)} " if len(kinds) > 1 else ""
            whys.append(f"{count}{kind}" + (f" ({example})" if example else ""))
        parts.append(f"{cls} x{n}: " + ", ".join(whys))
    return f"{len(entries)} candidates, none passed: " + "; ".join(parts)


def candidate_class(config: dict[str, Any]) -> str:
    """The class a candidate belongs to, for summaries: the user's own kernel, else the
    generator's strategy ("looped", "single_pass", "tiled", ...)."""
    if config.get("origin") == "existing":
        return "existing kernel"
    return str(config.get("strategy") or "generated")


_STAGES = ("smoke", "sweep", "adversarial", "determinism", "odd_sizes")
# what a misfit ran out of, by the words of backend.compile's reasons
_RESOURCES = (("register", "registers"), ("spill", "spills"), ("shared memory", "shared memory"),
              ("lds", "LDS"), ("thread", "threads"), ("warp", "threads"))


def reject_kind(reason: str) -> tuple[str, str]:
    """A rejection reason as (kind, detail): kinds group candidates in the port's summary,
    e.g. ("misfit (registers)", ""), ("failed sweep at bf16", "max abs err 3.1e-01"),
    ("crashed", "RuntimeError: illegal memory access")."""
    text = " ".join(reason.split())
    low = text.lower()
    if "taken to be hung" in low:
        return "hung", ""
    if "does not fit" in low or "but not at the judge's" in low:
        what = next((name for key, name in _RESOURCES if key in low), "resources")
        return f"misfit ({what})", ""
    if low.startswith("compile error"):
        return "compile error", clip(text.split(":", 1)[-1])
    if "could not specialize" in low or "could not be specialized" in low:
        return "no such config", clip(text.split(":", 1)[-1])
    if "timed out" in low:
        return "check timed out", ""
    if "crashed" in low:
        last = text.split(" | ")[-1] if " | " in text else \
            " ".join(_first_line(reason).split()).split(": ", 1)[-1]
        return "crashed", clip(last, DETAIL_CHARS)
    stage = next((st for st in _STAGES if low.startswith(st + ":") or f"] {st}:" in low), None)
    if stage is not None:
        dtype = re.search(r"dtype (\w+)", text)
        kind = f"failed {stage}" + (f" at {dtype.group(1)}" if dtype else "")
        err = re.search(r"max abs err [0-9.e+-]+", text)
        if err:
            return kind, err.group(0)
        if "nan/inf" in low:
            return kind, "NaN/Inf where the reference is finite"
        raised = _raised(reason)
        return kind, raised if raised else clip(text.split(":", 1)[-1])
    if "speed of light" in low or "roofline" in low:
        return "faster than the roofline allows", ""
    return clip(text, 60), ""


# A raised exception's detail keeps its type and the first line of its text: "raised
# ValueError" alone said nothing of which check failed (KernelBench 34/35 on an H100: the
# launcher's "out (112, 64, 512, 512), expected (112, 8, 512, 512)").
DETAIL_CHARS = 140


def _first_line(text: str) -> str:
    return next((ln for ln in text.strip().splitlines() if ln.strip()), "")


def _raised(reason: str) -> str:
    """"raised ValueError: <first line of its text>" of a trial's "candidate raised X: ..."
    (the trial's "(input ..., shape ..., dtype ..., seed ...)" left off), or ""."""
    found = re.search(r"raised (\w+)(: )?(.*)", reason)
    if found is None:
        return ""
    message = re.sub(r"\s*\(input '[^']*', shape .*\)\s*$", "", found.group(3)) \
        if found.group(2) else ""
    return clip(f"raised {found.group(1)}" + (f": {message}" if message.strip() else ""),
                DETAIL_CHARS)


def brief_reason(reason: str) -> str:
    """A rejection reason in a few words for a progress line (the ledger keeps it whole)."""
    kind, detail = reject_kind(reason)
    return f"{kind} ({detail})" if detail else kind


def clip(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def crash_message(what: str, code: int, tail: str) -> str:
    """"<what> crashed (exit -11, SIGSEGV): <its last lines>", never with nothing after the
    colon: a child that died silently is said to have."""
    import signal

    name = ""
    if code < 0:
        with contextlib.suppress(ValueError):
            name = f", {signal.Signals(-code).name}"
    return f"{what} crashed (exit {code}{name}): {tail.strip() or 'it printed nothing'}"
