"""What the judge's steps share: a candidate waiting for its verdict, how a verdict is recorded,
and the keys under which a correctness check is shared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from porter.ledger import config_key
from porter.verdicts import brief_reason
from porter.verdicts import cfg_text

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from porter.ledger import LedgerEntry
    from porter.search import Candidate
    from porter.session import PortSession


@dataclass(frozen=True)
class Existing:
    """Variant marker: the spec's own TRITON_KERNEL run through its TRITON_LAUNCHER."""

    knobs: tuple[str, ...]  # launcher parameters that take this candidate's config values


def is_existing(cand: Candidate) -> bool:
    return isinstance(cand.variant, Existing)


@dataclass
class Pending:
    """A candidate past the compile tier, waiting for its check and time."""

    cand: Candidate
    source: str
    src_hash: str
    key: str
    numbers: dict[str, Any]
    details: dict[str, Any]
    tier: str


def record_verdict(session: PortSession, hw: HardwareModel, bucket: str, dname: str,
                   shape: tuple[int, ...], p: Pending, *, passed: bool,
                   why: str = "") -> LedgerEntry:
    """The ledger keeps, reverts or rejects `p`; one detail line says which and why."""
    e = session.ledger.judge(target=hw.name, bucket=bucket, dtype=dname, config=p.cand.config,
                             src_hash=p.src_hash, tier=p.tier, passed=passed,
                             reason_failed=why if not passed else "",
                             note=why if passed else "",
                             numbers=p.numbers, shape=shape, details=p.details)
    session.judged_in_target += 1
    t = p.numbers.get("time_ms")
    ttxt = f"{t * 1e3:.1f} us {p.numbers.get('label', '')}" if t is not None else "no time"
    # a rejection says why in a few words; the ledger keeps the whole reason
    why_txt = f": {brief_reason(e.reason)}" if e.verdict == "rejected" else ""
    session.detail(f"  [{hw.name}] {bucket}/{dname} {cfg_text(p.cand.config)}: {p.tier}, "
                   f"{ttxt} -> {e.verdict}{why_txt}")
    return e


def check_key(p: Pending) -> str:
    """The key an interpreted check is shared under: kernel body + semantic config. "dtype" is
    left out: the judge checks every dtype the spec claims in one check."""
    from porter.search import semantic_config

    sem = {k: v for k, v in semantic_config(p.cand.config).items() if k != "dtype"}
    return f"{p.src_hash[:16]}|{config_key(sem)}"


def device_check_key(p: Pending, dname: str) -> str:
    """`check_key` plus the launch knobs: on the device those decide whether a kernel
    launches at all (the shared memory it needs at some shape), so a device check is not
    shared across them. Sharing one let a 3-stage config inherit a 4-stage config's
    out-of-resources failure."""
    from porter.search import LAUNCH_KNOBS

    launch = {k: v for k, v in p.cand.config.items() if k in LAUNCH_KNOBS}
    return f"{check_key(p)}|{config_key(launch)}|{dname}"

