"""The keep/revert ledger of one port run: every candidate, its verdict, its numbers, and why.

One JSON object per line in `runs/<id>/ledger.jsonl`, appended and flushed (and fsync'ed) per
line, so an interrupted run loses nothing it already wrote. On restart the ledger is read back
and every finished candidate is skipped: the key is target + source hash + config (+ the shape
bucket and dtype the candidate was tried for, since one config is judged per bucket).

Verdicts:
    kept      best so far for its (target, bucket, dtype): passed every tier it reached and was
              the fastest (measured, else projected) at the time it was judged
    reverted  passed, but slower than the kept one (the reason says by how much)
    rejected  failed a tier: did not fit, did not compile, or failed a correctness stage
    skipped   not judged (e.g. the interpreted-check budget on a CPU was spent); says why. Not
              "done": a resumed run with budget left judges it.

Besides verdicts the ledger records each role's artifact per target as it is written, one line
{"kind": "artifact", "target", "role", "implementation", "path" (relative to the ledger's
folder), "sha256", "at"} in `ledger.artifacts.jsonl` beside `ledger.jsonl` (so readers of the
verdict lines see only verdicts); `artifacts()` returns the latest per (target, role, path).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import Literal

from porter.errors import PorterError
from targets.tiers import TIERS  # noqa: F401 - importable from here as before
from targets.tiers import tier_rank

log = logging.getLogger(__name__)

Verdict = Literal["kept", "reverted", "rejected", "skipped"]
VERDICTS = ("kept", "reverted", "rejected", "skipped")

CSV_COLUMNS = (
    "target",
    "bucket",
    "dtype",
    "config",
    "source_hash",
    "tier",
    "verdict",
    "time_ms",
    "p20_ms",
    "p80_ms",
    "label",
    "pct_of_peak",
    "reason",
)


def source_hash(source: str) -> str:
    """sha256 hex of a kernel's source text (the identity of its body)."""
    return hashlib.sha256(source.encode()).hexdigest()


def config_key(config: dict[str, Any]) -> str:
    """Canonical text of a config: sorted keys, no spaces, so equal configs give equal keys."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)


def candidate_key(
    target: str, src_hash: str, config: dict[str, Any], bucket: str, dtype: str
) -> str:
    """The resume key of one candidate (target + source hash + config, for one bucket/dtype)."""
    return f"{target}|{src_hash[:16]}|{config_key(config)}|{bucket}|{dtype}"


@dataclass(frozen=True)
class LedgerEntry:
    """One judged candidate.

    numbers: {"time_ms", "p20_ms", "p80_ms", "label" ("measured" | "projected"), "pct_of_peak",
    "floor_ms", ...}; empty when no number was taken.
    """

    target: str
    bucket: str
    dtype: str
    config: dict[str, Any]
    source_hash: str
    tier: str  # highest tier reached: emitted | compiled | interpreted | measured
    verdict: Verdict
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)  # compile resources, check stages, ...
    at: float = 0.0  # unix time it was written

    @property
    def key(self) -> str:
        return candidate_key(self.target, self.source_hash, self.config, self.bucket, self.dtype)

    @property
    def time_ms(self) -> float | None:
        value = self.numbers.get("time_ms")
        return None if value is None else float(value)


class LedgerError(PorterError, ValueError):
    """A ledger line that is not a ledger entry (other than a torn last line); names the file
    and the line number."""


def _parse_line(line: str) -> LedgerEntry:
    """One ledger line as an entry; raises ValueError/TypeError/KeyError on anything else."""
    raw = json.loads(line)
    if not isinstance(raw, dict):
        raise TypeError(f"expected a JSON object, got {type(raw).__name__}")
    if raw.get("verdict") not in VERDICTS:
        raise ValueError(f"verdict {raw.get('verdict')!r} is not one of {', '.join(VERDICTS)}")
    for name, kind in (("config", dict), ("numbers", dict), ("details", dict), ("shape", list)):
        if name in raw and not isinstance(raw[name], kind):
            raise TypeError(f"{name} is a {type(raw[name]).__name__}, not a {kind.__name__}")
    return LedgerEntry(**{**raw, "shape": tuple(raw.get("shape", ()))})


def _brief_exc(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


class Ledger:
    """Append-only JSONL ledger; reopening the same path continues where it stopped."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._entries: dict[str, LedgerEntry] = {}
        self._order: list[str] = []
        self._artifacts: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.artifacts_path = self.path.with_name(self.path.stem + ".artifacts.jsonl")
        if self.path.exists():
            self._read_back()
        if self.artifacts_path.exists():
            for line in self.artifacts_path.read_text().splitlines():
                try:
                    raw = json.loads(line)
                    self._artifacts[(raw["target"], raw["role"], raw["path"])] = raw
                except (ValueError, KeyError, TypeError):
                    continue  # a torn line: that artifact is recorded again when rewritten

    def _read_back(self) -> None:
        text = self.path.read_text()
        lines = text.splitlines()
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = _parse_line(line)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                # A kill can tear only the last line, and a torn line has no newline yet (each
                # line is written with its newline in one call): that one is dropped and its
                # candidate reruns. Any other bad line is corruption, which a resume must not
                # guess its way past.
                if lineno == len(lines) and not text.endswith("\n"):
                    log.warning("%s:%d: dropping a torn last line (%s); that candidate reruns",
                                self.path, lineno, exc)
                    self._truncate_to(lines[: lineno - 1])
                    break
                raise LedgerError(
                    f"{self.path}:{lineno}: not a ledger entry ({_brief_exc(exc)}); fix or "
                    "delete that line, or start the run afresh with --no-resume") from exc
            self._remember(entry)

    def _truncate_to(self, good_lines: list[str]) -> None:
        text = "".join(f"{line}\n" for line in good_lines if line.strip())
        self.path.write_text(text)

    def _remember(self, entry: LedgerEntry) -> None:
        if entry.key not in self._entries:
            self._order.append(entry.key)
        self._entries[entry.key] = entry

    # -- queries -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return (self._entries[k] for k in self._order)

    def done(self, key: str) -> bool:
        """True when the candidate with this key was already judged (in this or a past run).

        A "skipped" candidate was not judged (e.g. the check budget was spent): it is not done,
        so a resumed run with budget left checks it.
        """
        entry = self._entries.get(key)
        return entry is not None and entry.verdict != "skipped"

    def get(self, key: str) -> LedgerEntry | None:
        return self._entries.get(key)

    def kept(self, target: str, bucket: str, dtype: str) -> LedgerEntry | None:
        """The candidate currently kept for (target, bucket, dtype), or None."""
        found = None
        for entry in self:
            if (entry.target, entry.bucket, entry.dtype) == (target, bucket, dtype) and (
                entry.verdict == "kept"
            ):
                found = entry  # later keeps supersede earlier ones
        return found

    def artifacts(self, target: str | None = None) -> list[dict[str, Any]]:
        """The artifact records (latest per target, role and path), in the order written."""
        return [a for a in self._artifacts.values() if target is None or a["target"] == target]

    # -- writing -------------------------------------------------------------------------
    def artifact(self, *, target: str, role: str, implementation: str,
                 path: str | os.PathLike[str]) -> dict[str, Any]:
        """Record that `role` wrote `path` for `target` (its sha256 taken now)."""
        file = Path(path)
        try:
            rel = str(file.resolve().relative_to(self.path.parent.resolve()))
        except ValueError:
            rel = str(file)
        line = {"kind": "artifact", "target": target, "role": role,
                "implementation": implementation, "path": rel,
                "sha256": hashlib.sha256(file.read_bytes()).hexdigest(), "at": time.time()}
        self._append(json.dumps(line, sort_keys=True), self.artifacts_path)
        self._artifacts.pop((target, role, rel), None)
        self._artifacts[(target, role, rel)] = line
        return line

    def _append(self, line: str, path: Path | None = None) -> None:
        with (path or self.path).open("a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def record(self, entry: LedgerEntry) -> LedgerEntry:
        """Append one entry and flush it to disk before returning."""
        if not entry.at:
            entry = LedgerEntry(**{**asdict(entry), "at": time.time()})
        self._append(json.dumps(asdict(entry), sort_keys=True, default=str))
        self._remember(entry)
        return entry

    def judge(
        self,
        *,
        target: str,
        bucket: str,
        dtype: str,
        config: dict[str, Any],
        src_hash: str,
        tier: str,
        passed: bool,
        reason_failed: str = "",
        numbers: dict[str, Any] | None = None,
        shape: tuple[int, ...] = (),
        details: dict[str, Any] | None = None,
        note: str = "",
    ) -> LedgerEntry:
        """Keep or revert one candidate against the one kept so far, and record the verdict.

        A candidate that failed is rejected with `reason_failed`. One that passed is kept when
        nothing is kept yet for its (target, bucket, dtype), or when it is faster; measured
        numbers outrank projected ones (a projection never displaces a measurement).
        """
        numbers = dict(numbers or {})
        if not passed:
            verdict: Verdict = "rejected"
            reason = reason_failed or "failed"
        else:
            verdict, reason = _compare(self.kept(target, bucket, dtype), numbers, tier)
            if verdict == "kept":
                self._demote(target, bucket, dtype)
            if note:
                reason = f"{reason}; {note}"
        return self.record(
            LedgerEntry(
                target=target,
                bucket=bucket,
                dtype=dtype,
                config=dict(config),
                source_hash=src_hash,
                tier=tier,
                verdict=verdict,
                reason=reason,
                numbers=numbers,
                shape=tuple(shape),
                details=dict(details or {}),
            )
        )

    def skip(self, **kwargs: Any) -> LedgerEntry:
        """Record a candidate that was not judged, with why (kwargs as for `LedgerEntry`)."""
        return self.record(LedgerEntry(verdict="skipped", **kwargs))

    def _demote(self, target: str, bucket: str, dtype: str) -> None:
        """Mark the previously kept entry as reverted (appended, so the history stays)."""
        previous = self.kept(target, bucket, dtype)
        if previous is not None:
            self.record(
                LedgerEntry(
                    **{
                        **asdict(previous),
                        "verdict": "reverted",
                        "reason": "superseded by a faster candidate",
                        "at": 0.0,
                    }
                )
            )

    def write_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write every entry (latest verdict per key) as `bench_results.csv`."""
        out = Path(path)
        with out.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for entry in self:
                writer.writerow(
                    {
                        "target": entry.target,
                        "bucket": entry.bucket,
                        "dtype": entry.dtype,
                        "config": config_key(entry.config),
                        "source_hash": entry.source_hash[:16],
                        "tier": entry.tier,
                        "verdict": entry.verdict,
                        "time_ms": entry.numbers.get("time_ms", ""),
                        "p20_ms": entry.numbers.get("p20_ms", ""),
                        "p80_ms": entry.numbers.get("p80_ms", ""),
                        "label": entry.numbers.get("label", ""),
                        "pct_of_peak": entry.numbers.get("pct_of_peak", ""),
                        "reason": entry.reason,
                    }
                )
        return out


def _compare(kept: LedgerEntry | None, numbers: dict[str, Any], tier: str) -> tuple[Verdict, str]:
    if kept is None:
        return "kept", "first candidate to pass for this bucket"
    new_t = numbers.get("time_ms")
    old_t = kept.time_ms
    new_measured = numbers.get("label") == "measured"
    old_measured = kept.numbers.get("label") == "measured"
    if old_measured and not new_measured:
        return "reverted", "kept candidate was measured; a projection does not displace it"
    if new_measured and not old_measured:
        return "kept", "measured on the device; replaces a projected keep"
    if new_t is None:
        # No number: rank by tier reached, so a checked kernel beats an unchecked one.
        if old_t is None and tier_rank(tier) > tier_rank(kept.tier):
            return "kept", f"reached tier {tier} (kept one reached {kept.tier})"
        return "reverted", "no time to compare against the kept candidate"
    if old_t is None:
        return "kept", f"{new_t:.4g} ms; the kept candidate had no time"
    if tier_rank(tier) < tier_rank(kept.tier):
        return "reverted", f"reached only {tier}; kept one reached {kept.tier}"
    if new_t < old_t:
        faster = (old_t / new_t - 1) * 100
        return "kept", f"{new_t:.4g} ms < kept {old_t:.4g} ms ({faster:.1f}% faster)"
    slower = (new_t / old_t - 1) * 100
    return "reverted", f"{new_t:.4g} ms >= kept {old_t:.4g} ms ({slower:.1f}% slower)"
