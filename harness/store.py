"""The results store: every check and measurement, one SQLite file, append-only.

- One file, no server (stdlib `sqlite3`), WAL journal so readers never block the writer.
- Each `record()` commits at once: interrupting a run loses nothing already recorded.
- Rows are only ever inserted; a second run adds rows under its own `run_id`.
- The schema carries a version (`PRAGMA user_version`); a file written by a newer schema is
  refused with a message naming the file rather than misread.

`best()` answers "fastest passing variant per (op, device, shape)": measured rows win over
projected ones for the same shape, because a projection is an estimate and a measurement is not.

Stores written on several machines merge into one (`merge()`, `porter store merge A B --into C`)
without duplicates: a record's identity is its content (`content_key`: every column but the row
id, which is local to one file), so merging the same file twice, or two files that both hold a
copy of a third, adds each record once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from datetime import datetime
from datetime import timezone
from pathlib import Path
from typing import Any
from typing import Literal

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
Tier = Literal["emitted", "compiled", "interpreted", "emulated", "measured", "projected"]
TIERS: tuple[str, ...] = ("emitted", "compiled", "interpreted", "emulated", "measured",
                          "projected")

_COLUMNS = ("run_id", "timestamp", "op", "variant", "config", "target", "device", "shape",
            "dtype", "tier", "metrics", "spread", "passed", "message", "versions", "git_rev")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id    TEXT NOT NULL,
    timestamp TEXT NOT NULL,           -- ISO 8601, UTC
    op        TEXT NOT NULL,
    variant   TEXT NOT NULL,
    config    TEXT NOT NULL,           -- JSON object
    target    TEXT NOT NULL,           -- backend, e.g. triton-cuda
    device    TEXT NOT NULL,           -- hardware model name, e.g. h100
    shape     TEXT NOT NULL,           -- JSON list of ints
    dtype     TEXT NOT NULL,
    tier      TEXT NOT NULL,
    metrics   TEXT NOT NULL,           -- JSON object: median_ms, gbps, pct_peak, ...
    spread    TEXT NOT NULL,           -- JSON object: p20_ms, p80_ms, ...
    passed    INTEGER NOT NULL,
    message   TEXT NOT NULL,
    versions  TEXT NOT NULL,           -- JSON object: torch, triton, driver, ...
    git_rev   TEXT
);
CREATE INDEX IF NOT EXISTS records_op_device ON records (op, device);
CREATE INDEX IF NOT EXISTS records_run ON records (run_id);
"""


class StoreError(Exception):
    """The store file cannot be used; the message names the file and why."""


@dataclass(frozen=True)
class Record:
    """One check or measurement of one variant on one device, shape and dtype.

    `metrics` holds numbers keyed with their units (`median_ms`, `gbps`, `pct_peak`,
    `pct_measured_peak`, ...); projected rows put their predicted time in `median_ms` too and are
    told apart by `tier`. Empty `run_id`/`timestamp`/`versions` are filled in by the store.
    """

    op: str
    variant: str
    device: str
    tier: Tier
    passed: bool
    shape: tuple[int, ...] = ()
    dtype: str = ""
    target: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    spread: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    versions: dict[str, Any] = field(default_factory=dict)
    git_rev: str | None = None
    timestamp: str = ""
    run_id: str = ""
    id: int | None = None  # row id, set when read back

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"Record.tier: must be one of {TIERS}, got {self.tier!r}")

    @property
    def median_ms(self) -> float | None:
        value = self.metrics.get("median_ms")
        return float(value) if value is not None else None


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    first: str  # timestamp of its first record
    last: str
    count: int


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _dumps(obj: Any) -> str:
    # default=str keeps odd values (torch dtypes, paths) recordable instead of failing a run.
    return json.dumps(obj, sort_keys=True, default=str)


class ResultsStore:
    """Append-only SQLite store of `Record`s. Safe to share between threads; several processes
    may write the same file (SQLite serialises writers; `timeout_s` bounds the wait)."""

    def __init__(self, path: str | Path, *, run_id: str | None = None, fill_env: bool = True,
                 timeout_s: float = 30.0) -> None:
        """Open (creating if needed) the store at `path`.

        Args:
            path: the SQLite file.
            run_id: id stamped on records that carry none; default a fresh uuid per store.
            fill_env: fill empty `versions`/`git_rev` from `harness.env_info`.
            timeout_s: how long a writer waits for another process's lock.

        Raises:
            StoreError: the file is not a store this code can read (not SQLite, newer schema).
        """
        self.path = Path(path)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._fill_env = fill_env
        self._env: tuple[dict[str, Any], str | None] | None = None
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout_s,
                                         check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: schema version {version} is newer than this "
                                 f"code's {SCHEMA_VERSION}; upgrade kernel-porter to read it")
            self._conn.executescript(_SCHEMA)
            if version == 0:
                self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a usable results store ({exc})") from exc

    # -- writing ----------------------------------------------------------------------------
    def _environment(self) -> tuple[dict[str, Any], str | None]:
        if self._env is None:
            from harness import env_info

            self._env = (dict(env_info.versions()), env_info.git_rev())
        return self._env

    def record(self, rec: Record) -> int:
        """Insert `rec` and commit immediately.

        Returns:
            The new row id.
        """
        if self._fill_env and (not rec.versions or rec.git_rev is None):
            versions, rev = self._environment()
            rec = replace(rec, versions=rec.versions or versions,
                          git_rev=rec.git_rev if rec.git_rev is not None else rev)
        values = (
            rec.run_id or self.run_id,
            rec.timestamp or _now(),
            rec.op,
            rec.variant,
            _dumps(rec.config),
            rec.target,
            rec.device,
            json.dumps([int(x) for x in rec.shape]),
            rec.dtype,
            rec.tier,
            _dumps(rec.metrics),
            _dumps(rec.spread),
            int(bool(rec.passed)),
            rec.message,
            _dumps(rec.versions),
            rec.git_rev,
        )
        sql = (f"INSERT INTO records ({', '.join(_COLUMNS)}) "
               f"VALUES ({', '.join('?' * len(_COLUMNS))})")
        with self._lock:
            # Autocommit mode (isolation_level=None): the insert is durable when execute returns.
            cur = self._conn.execute(sql, values)
            return int(cur.lastrowid)

    def add(self, records: Sequence[Record]) -> tuple[int, int]:
        """Insert `records` exactly as they are (run id, timestamp, versions kept), skipping any
        whose `content_key` the store already holds or that repeats one earlier in `records`.

        Returns:
            (added, skipped).
        """
        with self._lock:
            rows = self._conn.execute(
                f"SELECT id, {', '.join(_COLUMNS)} FROM records").fetchall()
        seen = {content_key(self._to_record(r)) for r in rows}
        added = skipped = 0
        for rec in records:
            key = content_key(rec)
            if key in seen:
                skipped += 1
                continue
            seen.add(key)
            self._insert(rec)
            added += 1
        return added, skipped

    def merge(self, *sources: str | Path) -> tuple[int, int]:
        """Add every record of the stores at `sources` (see `add`; the sources are only read).

        Returns:
            (added, skipped) over all sources.

        Raises:
            StoreError: a source is missing or not a store.
        """
        added = skipped = 0
        for src in sources:
            path = Path(src)
            if not path.is_file():
                raise StoreError(f"{path}: no such results store")
            other = ResultsStore(path, fill_env=False)
            try:
                a, s = self.add(other._select("1 = 1", ()))
            finally:
                other.close()
            added += a
            skipped += s
        return added, skipped

    def _insert(self, rec: Record) -> int:
        values = (rec.run_id or self.run_id, rec.timestamp or _now(), rec.op, rec.variant,
                  _dumps(rec.config), rec.target, rec.device,
                  json.dumps([int(x) for x in rec.shape]), rec.dtype, rec.tier,
                  _dumps(rec.metrics), _dumps(rec.spread), int(bool(rec.passed)), rec.message,
                  _dumps(rec.versions), rec.git_rev)
        sql = (f"INSERT INTO records ({', '.join(_COLUMNS)}) "
               f"VALUES ({', '.join('?' * len(_COLUMNS))})")
        with self._lock:
            return int(self._conn.execute(sql, values).lastrowid)

    # -- reading ----------------------------------------------------------------------------
    def _select(self, where: str, params: Sequence[Any]) -> list[Record]:
        sql = f"SELECT id, {', '.join(_COLUMNS)} FROM records WHERE {where} ORDER BY id"
        with self._lock:
            rows = self._conn.execute(sql, tuple(params)).fetchall()
        return [self._to_record(r) for r in rows]

    @staticmethod
    def _to_record(row: Sequence[Any]) -> Record:
        d = dict(zip(("id",) + _COLUMNS, row, strict=True))
        return Record(
            id=d["id"], run_id=d["run_id"], timestamp=d["timestamp"], op=d["op"],
            variant=d["variant"], config=json.loads(d["config"]), target=d["target"],
            device=d["device"], shape=tuple(json.loads(d["shape"])), dtype=d["dtype"],
            tier=d["tier"], metrics=json.loads(d["metrics"]), spread=json.loads(d["spread"]),
            passed=bool(d["passed"]), message=d["message"], versions=json.loads(d["versions"]),
            git_rev=d["git_rev"])

    def history(self, op: str, device: str | None = None) -> list[Record]:
        """Every record of `op` (optionally on one device), oldest first."""
        if device is None:
            return self._select("op = ?", (op,))
        return self._select("op = ? AND device = ?", (op, device))

    def best(self, op: str, device: str, shape: Sequence[int] | None = None,
             dtype: str | None = None) -> list[Record]:
        """Fastest passing record per (shape, dtype) of `op` on `device`.

        Only passing rows with tier "measured" or "projected" and a `median_ms` metric count.
        For each (shape, dtype) a measured row beats any projected one; among rows of the same
        tier the smallest `median_ms` wins.

        Args:
            op: op name.
            device: hardware model name.
            shape: restrict to one shape.
            dtype: restrict to one dtype.

        Returns:
            One record per (shape, dtype), sorted by shape then dtype; empty when none qualify.
        """
        where = "op = ? AND device = ? AND passed = 1 AND tier IN ('measured', 'projected')"
        params: list[Any] = [op, device]
        if shape is not None:
            where += " AND shape = ?"
            params.append(json.dumps([int(x) for x in shape]))
        if dtype is not None:
            where += " AND dtype = ?"
            params.append(dtype)
        winners: dict[tuple[tuple[int, ...], str], Record] = {}
        for rec in self._select(where, params):
            t = rec.median_ms
            if t is None:
                continue
            key = (rec.shape, rec.dtype)
            cur = winners.get(key)
            if cur is None or _rank(rec) < _rank(cur):
                winners[key] = rec
        return [winners[k] for k in sorted(winners)]

    def runs(self) -> list[RunInfo]:
        """Every run in the store, oldest first, with its record count."""
        sql = ("SELECT run_id, MIN(timestamp), MAX(timestamp), COUNT(*) FROM records "
               "GROUP BY run_id ORDER BY MIN(id)")
        with self._lock:
            rows = self._conn.execute(sql).fetchall()
        return [RunInfo(run_id=r[0], first=r[1], last=r[2], count=r[3]) for r in rows]

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def content_key(rec: Record) -> str:
    """A record's identity across files: sha256 of every column but the row id.

    Two records with the same key are the same measurement (same run, time, numbers and
    versions), wherever they were copied to.
    """
    payload = [rec.run_id, rec.timestamp, rec.op, rec.variant, _dumps(rec.config), rec.target,
               rec.device, [int(x) for x in rec.shape], rec.dtype, rec.tier,
               _dumps(rec.metrics), _dumps(rec.spread), bool(rec.passed), rec.message,
               _dumps(rec.versions), rec.git_rev]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


def _rank(rec: Record) -> tuple[int, float]:
    # measured (0) before projected (1); then fastest.
    return (0 if rec.tier == "measured" else 1, rec.median_ms or float("inf"))
