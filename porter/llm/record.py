"""Every exchange with the model, kept in the run folder; and the replay that serves them back.

`<run>/llm/exchanges.jsonl`: one JSON object per request that got an answer or an error::

    {"seq": 3, "role": "debugger", "target": "h100", "request_sha256": "...",
     "request": {...the Messages API request, verbatim...},
     "response": {...the reply, verbatim JSON...} | null, "error": null | "overloaded (529)"}

Matching a request on replay: its canonical form (sorted keys, compact separators) is hashed,
with one exception. Inside `<judge>...</judge>` blocks (the harness's own words in a prompt),
numbers are masked: the judge draws fresh random inputs for every trial (its seed is in the
message), so error magnitudes, the worst index and how many elements were off change from run to
run while the verdict does not. Every other byte must match (the stage, reason, shape and dtype
of a failure are outside the block); the kernels and verdicts that follow are then the recorded
ones, because the replies are.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from porter.errors import PorterError

EXCHANGES = "exchanges.jsonl"
_JUDGE = re.compile(r"<judge>.*?</judge>", re.S)
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class ReplayError(PorterError):
    """A request the recorded run did not make; names the first difference."""


def canonical(request: dict[str, Any]) -> str:
    """The request as compared on replay (see the module docstring)."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _JUDGE.sub(lambda m: _VOLATILE.sub("#", m.group(0)), text)


def request_hash(request: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(request).encode()).hexdigest()


class Recorder:
    """Appends exchanges to `<folder>/exchanges.jsonl` (thread-safe; each line flushed)."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / EXCHANGES
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seq = sum(1 for _ in _lines(self.path)) if self.path.exists() else 0

    def append(self, *, role: str, target: str, request: dict[str, Any],
               response: dict[str, Any] | None, error: str | None = None) -> int:
        with self._lock:
            seq = self._seq
            self._seq += 1
            line = {"seq": seq, "role": role, "target": target,
                    "request_sha256": request_hash(request), "request": request,
                    "response": response, "error": error}
            with self.path.open("a") as fh:
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
                fh.flush()
        return seq


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    for n, text in enumerate(path.read_text().splitlines(), 1):
        if text.strip():
            try:
                yield json.loads(text)
            except json.JSONDecodeError as exc:
                raise ReplayError(f"{path}:{n}: not a JSON line ({exc.msg})") from None


def read_exchanges(folder: str | Path) -> list[dict[str, Any]]:
    """The recorded exchanges of a run (its `llm/` folder or the run folder itself)."""
    folder = Path(folder)
    path = folder / EXCHANGES if (folder / EXCHANGES).exists() else folder / "llm" / EXCHANGES
    if not path.exists():
        raise ReplayError(f"{folder}: no recorded exchanges ({EXCHANGES} in it or in its llm/)")
    return list(_lines(path))


class ReplayTransport:
    """Serves the recorded replies of a run for matching requests: no network, no key.

    Recorded errors (a 529 the run retried through) are not replayed: the retry that followed
    is what a replay needs, and it is served directly. Identical requests are served in the
    order they were recorded.
    """

    def __init__(self, folder: str | Path) -> None:
        self.exchanges = [e for e in read_exchanges(folder) if e.get("response") is not None]
        self._by_hash: dict[str, list[dict[str, Any]]] = {}
        for e in self.exchanges:
            self._by_hash.setdefault(request_hash(e["request"]), []).append(e)
        self._lock = threading.Lock()
        self.served = 0

    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            queue = self._by_hash.get(request_hash(request))
            if queue:
                self.served += 1
                return queue.pop(0)["response"] if len(queue) > 1 else queue[0]["response"]
        raise ReplayError(self._explain(request))

    def _explain(self, request: dict[str, Any]) -> str:
        """Name the first difference from the closest recorded request (same tool, most shared
        leading bytes)."""
        want = _tool_of(request)
        pool = [e["request"] for e in self.exchanges if _tool_of(e["request"]) == want] or [
            e["request"] for e in self.exchanges]
        if not pool:
            return "the recorded run made no requests; this run asked for " + str(want)
        mine = canonical(request)
        best = max(pool, key=lambda r: _common_prefix(canonical(r), mine))
        path, a, b = first_difference(best, request)
        return (f"replay: a request the recorded run did not make ({want or 'no tool'}); "
                f"first difference at {path}: recorded {a} != now {b}")


def _tool_of(request: dict[str, Any]) -> str | None:
    choice = request.get("tool_choice") or {}
    return choice.get("name") if isinstance(choice, dict) else None


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def first_difference(a: Any, b: Any, path: str = "request") -> tuple[str, str, str]:
    """(path, recorded excerpt, current excerpt) of the first place `a` and `b` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return (f"{path}.{key}", "absent" if key not in a else "present",
                        "absent" if key not in b else "present")
            if canonical({"x": a[key]}) != canonical({"x": b[key]}):
                return first_difference(a[key], b[key], f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if canonical({"x": x}) != canonical({"x": y}):
                return first_difference(x, y, f"{path}[{i}]")
        return f"{path} (length)", str(len(a)), str(len(b))
    if isinstance(a, str) and isinstance(b, str):
        i = _common_prefix(a, b)
        line = a[:i].count("\n") + 1
        return (f"{path} (line {line}, char {i})", repr(a[max(0, i - 30):i + 40]),
                repr(b[max(0, i - 30):i + 40]))
    return path, repr(a)[:80], repr(b)[:80]
