"""The user's kernel side by side with the porter's, per target and unit, read from the ledger.

For each target and (bucket, dtype) unit of a port whose spec names a kernel (TRITON_KERNEL):

- **shipped**: the user's kernel as its launcher launches it (``{"origin": "existing"}``);
- **retuned**: the fastest user-kernel config that passed, the shipped one included, so the
  retuned kernel is never slower than the shipped one (where no other config beats it, it is the
  shipped config and says so);
- **generated**: the fastest porter-generated kernel that passed (none under
  ``--no-allow-generated``);
- **kept**: which of them the pack holds and why (the ledger's reason).

A target where every user-kernel candidate was rejected is one where the user's kernel
*cannot run*; `Status.why` names the cause in one line (`porter.recorder.blocker`: an
NVIDIA-only intrinsic, inline PTX, ... or the compiler's or judge's own words). A target whose
backend runs no Triton (Metal) is *not offered* the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

from porter.user_kernel import ORIGIN
from porter.user_kernel import is_shipped
from targets.tiers import tier_rank

if TYPE_CHECKING:
    from porter.ledger import LedgerEntry
    from porter.results import PortResult

# Exit status of `porter port` when the user's kernel could not run on a target it was offered
# to (1 stays "a target got no kernel at all"; 2 bad input; 3 a hung candidate).
USER_KERNEL_FAILED_EXIT = 4


@dataclass(frozen=True)
class Cell:
    """One kernel of a unit: config, tier, time and % of peak, verdict."""

    config: dict[str, Any]
    tier: str
    verdict: str
    time_ms: float | None
    label: str
    pct_of_peak: float | None
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict in ("kept", "reverted") and self.tier != "emitted"

    def text(self) -> str:
        if not self.passed:
            return f"{self.verdict}: {' '.join(self.reason.split())[:80]}"
        t = "-" if self.time_ms is None else f"{self.time_ms * 1e3:.1f} us {self.label}"
        pct = "" if self.pct_of_peak is None else f", {self.pct_of_peak:.0f}%"
        return f"{self.tier}, {t}{pct}"


@dataclass(frozen=True)
class UnitRow:
    target: str
    bucket: str
    dtype: str
    shipped: Cell | None
    retuned: Cell | None
    generated: Cell | None
    kept_origin: str  # "existing" | "generated" | ""
    kept_config: dict[str, Any]
    why_kept: str

    @property
    def retuned_is_shipped(self) -> bool:
        return self.retuned is not None and is_shipped(self.retuned.config)


@dataclass(frozen=True)
class Status:
    """The user's kernel on one target: "ran" | "cannot run" | "not checked" | "not offered"."""

    target: str
    state: str
    why: str = ""
    rows: tuple[UnitRow, ...] = field(default_factory=tuple)


def _cell(e: LedgerEntry) -> Cell:
    n = e.numbers
    return Cell(config=dict(e.config), tier=e.tier, verdict=e.verdict, time_ms=e.time_ms,
                label=n.get("label", ""), pct_of_peak=n.get("pct_of_peak"), reason=e.reason)


def _best(entries: list[LedgerEntry]) -> LedgerEntry | None:
    """The highest tier, then the fastest, of the entries that passed."""
    ok = [e for e in entries if e.verdict in ("kept", "reverted") and e.tier != "emitted"]
    if not ok:
        return None
    top = max(tier_rank(e.tier) for e in ok)
    ok = [e for e in ok if tier_rank(e.tier) == top]
    return min(ok, key=lambda e: (e.time_ms if e.time_ms is not None else float("inf"),
                                  not is_shipped(e.config)))


def statuses(result: PortResult, kernel_source: str = "") -> list[Status]:
    """The user's kernel on every target of `result` (empty when its spec names no kernel)."""
    from porter.ledger import Ledger

    ledger = Ledger(result.run_dir / "ledger.jsonl")
    entries = list(ledger)
    if not any(e.config.get("origin") == ORIGIN for e in entries):
        return []
    import hwmodels

    out = []
    for tr in result.targets:
        mine = [e for e in entries if e.target == tr.target]
        user = [e for e in mine if e.config.get("origin") == ORIGIN]
        units = list(dict.fromkeys((e.bucket, e.dtype) for e in mine))
        rows = []
        for bucket, dtype in units:
            here = [e for e in mine if (e.bucket, e.dtype) == (bucket, dtype)]
            ue = [e for e in here if e.config.get("origin") == ORIGIN]
            ge = [e for e in here if e.config.get("origin") != ORIGIN]
            shipped = next((e for e in ue if is_shipped(e.config)), None)
            retuned = _best(ue)
            if retuned is not None and shipped is not None and _best([shipped]) is not None \
                    and (retuned.time_ms is None or shipped.time_ms is None
                         or shipped.time_ms <= retuned.time_ms) \
                    and tier_rank(shipped.tier) >= tier_rank(retuned.tier):
                retuned = shipped  # no retuned config beat the shipped one
            generated = _best(ge)
            kept = ledger.kept(tr.target, bucket, dtype)
            rows.append(UnitRow(
                target=tr.target, bucket=bucket, dtype=dtype,
                shipped=_cell(shipped) if shipped is not None else None,
                retuned=_cell(retuned) if retuned is not None else None,
                generated=_cell(generated) if generated is not None else None,
                kept_origin=("" if kept is None else
                             ORIGIN if kept.config.get("origin") == ORIGIN else "generated"),
                kept_config=dict(kept.config) if kept is not None else {},
                why_kept=kept.reason if kept is not None else ""))
        if not user:
            state, why = "not offered", (f"the {tr.backend} backend does not run Triton "
                                         "kernels; the generated kernel is ported there")
        elif any(_best([e]) is not None and (tier_rank(e.tier) >= tier_rank("interpreted")
                                             or e.numbers.get("label") == "measured")
                 for e in user):
            # (a config that passed the device's smoke check and was timed, then lost to the
            # kept kernel, stays at tier compiled; it ran, right, at its shape)
            state, why = "ran", ""
        elif all(e.verdict == "rejected" for e in user):
            from porter.recorder import blocker

            first = next(e for e in user if e.verdict == "rejected")
            state = "cannot run"
            why = first.reason
            if "compile" in why.lower():  # a compiler's refusal: name what in the source
                kernel_source = kernel_source or _kernel_source(result)
                why = blocker(kernel_source, hwmodels.get(tr.target), first.reason)
        else:
            state = "not checked"
            why = next((e.reason for e in user if e.verdict == "skipped"),
                       "compiled; its correctness was not checked here")
        out.append(Status(tr.target, state, " ".join(why.split()), tuple(rows)))
    return out


def _kernel_source(result: PortResult) -> str:
    from porter.errors import PorterError
    from porter.specs import load_spec

    try:
        kernel = load_spec(result.spec_path).triton_kernel
    except PorterError:
        return ""
    return kernel.source if kernel is not None else ""


def failed(rows: list[Status]) -> list[Status]:
    """Targets where the user's kernel was offered and could not run."""
    return [s for s in rows if s.state == "cannot run"]


def table(rows: list[Status]) -> list[list[str]]:
    """Rows for the CLI: target, unit, shipped, retuned, generated, what the pack keeps."""
    from porter.verdicts import cfg_text

    out = []
    for s in rows:
        for r in s.rows:
            if r.retuned is None:
                retuned = "-"
            elif r.retuned_is_shipped:
                retuned = "= shipped"
            else:
                knobs = {k: v for k, v in r.retuned.config.items() if k != "origin"}
                retuned = f"{r.retuned.text()} ({cfg_text(knobs)})"
            keeps = {"existing": "user's kernel" + (" (shipped)" if is_shipped(r.kept_config)
                                                    else " (retuned)"),
                     "generated": "generated", "": "nothing"}[r.kept_origin]
            out.append([s.target, f"{r.bucket}/{r.dtype}",
                        "-" if r.shipped is None else r.shipped.text(), retuned,
                        "-" if r.generated is None else r.generated.text(), keeps])
    return out


def lines(rows: list[Status], *, allow_generated: bool = True) -> list[str]:
    """One line per target: did the user's kernel run, and what stands in where it did not."""
    out = []
    for s in rows:
        if s.state == "ran":
            n_user = sum(r.kept_origin == ORIGIN for r in s.rows)
            out.append(f"{s.target}: the user's kernel ran (reached the interpreted tier or "
                       f"better); the pack keeps it for {n_user} of {len(s.rows)} units, the "
                       "generated kernel where it is faster")
        elif s.state == "cannot run":
            stand = ("the generated kernel stands in" if allow_generated else
                     "no entry (--no-allow-generated)")
            out.append(f"{s.target}: the user's kernel cannot run: {s.why}; {stand}")
        else:
            out.append(f"{s.target}: the user's kernel {s.state}: {s.why}")
    return out
