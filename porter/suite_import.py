"""A benchmark-suite run folder (`python -m bench.suite --out DIR`) as results-store records, for
`porter store import` and the fan-out's merge; `porter compare` reads them from the store."""

from __future__ import annotations

import json
from pathlib import Path

from harness.store import Record
from porter.compare import COPY_OP
from porter.compare import CompareError


def suite_records(run_dir: str | Path) -> list[Record]:
    """A suite run folder (`python -m bench.suite --out DIR`: rows.jsonl + meta.json) as store
    records: the porter's kernel as measured records of the op, eager PyTorch as `<op>@eager`,
    the same-size copies as `device_copy` (shape: [bytes]). Run id: the folder's name.

    Raises:
        CompareError: no rows.jsonl in `run_dir`.
    """
    d = Path(run_dir)
    rows_path = d / "rows.jsonl"
    if not rows_path.is_file():
        raise CompareError(f"{rows_path}: no such file (a `python -m bench.suite` output folder "
                           f"has rows.jsonl)")
    meta = json.loads((d / "meta.json").read_text()) if (d / "meta.json").is_file() else {}
    versions = {k: v for k, v in (meta.get("versions") or {}).items() if v is not None}
    stamp = str(meta.get("date", ""))
    out: list[Record] = []
    for line in rows_path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("median_ms") is None:
            continue
        provider = r["provider"]
        ok = not r.get("error") and not r.get("sol_exceeded")
        common = dict(device=r["device"], tier="measured", passed=ok, dtype=r["dtype"],
                      spread={"p20_ms": r.get("p20_ms"), "p80_ms": r.get("p80_ms")},
                      versions=versions, git_rev=meta.get("git_rev"), timestamp=stamp,
                      run_id=d.name, message=f"imported from {rows_path.as_posix()}")
        metrics = {"median_ms": r["median_ms"], "bytes_moved": r.get("bytes_moved"),
                   "flops": r.get("flops"), "gbps": r.get("gbps"), "tflops": r.get("tflops"),
                   "pct_measured_peak": r.get("pct_measured_peak"),
                   "pct_peak": r.get("pct_datasheet_peak"), "bound": r.get("bound")}
        if provider == "ported":
            eager = (r.get("speedup") or {}).get("eager")
            if eager:
                metrics["speedup_vs_eager"] = eager[0]
            cfg = dict(r.get("config") or {})
            out.append(Record(op=r["op"], variant=json.dumps(cfg, sort_keys=True),
                              config=cfg, shape=tuple(r["shape"]), metrics=metrics, **common))
        elif provider == "copy":
            out.append(Record(op=COPY_OP, variant="torch copy_",
                              shape=(int(r["bytes_moved"]),),
                              metrics={"median_ms": r["median_ms"], "gbps": r.get("gbps")},
                              **{**common, "dtype": "bytes"}))
        else:
            out.append(Record(op=f"{r['op']}@{provider}", variant=provider,
                              shape=tuple(r["shape"]), metrics=metrics, **common))
    return out
