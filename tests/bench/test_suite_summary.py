"""bench/suite.py's summary: the speed-of-light columns and the matmul target line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from bench.suite import resume_rows
from bench.suite import suite_units
from bench.suite import summarize

META = {"device": "TestGPU", "hw_model": "h100", "date": "2026-11-22", "versions": {},
        "git_rev": "abc", "method": "test"}


def row(op: str, provider: str, shape: list[int], ms: float, **extra: Any) -> dict[str, Any]:
    base = {"op": op, "provider": provider, "shape": shape, "dtype": "bf16", "median_ms": ms,
            "gbps": 1000.0 / ms, "tflops": 100.0 / ms, "pct_measured_peak": 50.0,
            "pct_datasheet_peak": 40.0, "bytes_moved": 128 << 20, "speedup": {}}
    base.update(extra)
    return base


def test_matmul_row_is_measured_against_cublas_alone() -> None:
    rows = [row("matmul_bias_gelu", "ported", [4096, 4096, 4096], 0.200,
                speedup={"eager": [1.05, 1.0, 1.1], "compile": [1.02, 1.0, 1.1]}),
            row("matmul_bias_gelu", "matmul_alone", [4096, 4096, 4096], 0.180)]
    text = summarize(rows, META)
    assert "90.0% of cuBLAS's matmul alone" in text
    assert "1.05x eager" in text and "1.02x torch.compile" in text


def test_memory_bound_row_is_measured_against_a_same_size_copy() -> None:
    rows = [row("rmsnorm", "ported", [16384, 8192], 0.250, pct_measured_peak=85.0,
                speedup={"compile": [1.6, 1.5, 1.7]}),
            row("rmsnorm", "copy", [16384, 8192], 0.200, pct_measured_peak=95.0)]
    text = summarize(rows, META)
    table_row = next(line for line in text.splitlines() if line.startswith("| rmsnorm"))
    assert [c.strip() for c in table_row.split("|")][9] == "80"  # % of copy: 0.200 / 0.250
    assert "rmsnorm 16384x8192 bf16: 85.0% (a copy of as many bytes: 95.0%)" in text
    assert "of cuBLAS" not in text


def test_resume_keeps_finished_ops_and_drops_partial_ones(tmp_path: Path) -> None:
    rows = [{"op": "gelu", "provider": p, "shape": list(s), "dtype": "bf16"}
            for s, _ in suite_units("gelu") for p in ("ported", "eager")]
    rows.append({"op": "rmsnorm", "provider": "ported", "shape": [4096, 4096], "dtype": "bf16"})
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "meta.json").write_text(json.dumps({"date": "first"}))
    meta = {"date": "second"}
    kept, done = resume_rows(rows_path, meta)
    assert done == {"gelu"}  # rmsnorm has one of its units: it runs again whole
    assert len(kept) == 2 * len(suite_units("gelu"))
    assert len(rows_path.read_text().splitlines()) == len(kept)
    assert meta == {"date": "first", "resumed": ["second"]}


def test_summary_only_writes_the_summary_of_a_cut_off_run(tmp_path: Path) -> None:
    from bench.suite import main

    rows = [row("rmsnorm", "ported", [16384, 8192], 0.250, pct_measured_peak=85.0,
                speedup={"compile": [1.6, 1.5, 1.7]}),
            row("rmsnorm", "copy", [16384, 8192], 0.200, pct_measured_peak=95.0)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "meta.json").write_text(json.dumps(META))
    assert main(["--out", str(tmp_path), "--summary-only"]) == 0
    assert (tmp_path / "SUMMARY.md").read_text() == summarize(rows, META)


def test_unseen_shapes_are_buckets_no_spec_ported() -> None:
    """Every --unseen shape falls in a bucket that neither the suite's units nor the example
    spec's SHAPES has, so the loader meets it as a shape it was never ported for; several are
    large enough for the 85%-of-copy target."""
    import importlib.util

    from bench.suite import REPO
    from bench.suite import UNSEEN
    from bench.suite import unseen_units
    from porter.packs.format import shape_bucket

    for op in UNSEEN:
        path = REPO / "examples" / op / "spec.py"
        mod_spec = importlib.util.spec_from_file_location(f"_spec_{op}", path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        ported = {shape_bucket(s) for s, _ in suite_units(op)} | {
            shape_bucket(s) for s in module.SHAPES}
        units = unseen_units(op)
        assert units and not {shape_bucket(s) for s, _ in units} & ported, op
        assert sum(2 * s[0] * s[1] * 2 >= 64 << 20 for s, _ in units) >= 4
    widths = {s[-1] for s, _ in unseen_units("softmax")}
    assert {3000, 6144, 12288, 20000, 50257, 151936} <= widths


def unseen_rows(op: str, shape: list[int], ours_ms: float, eager: float, *,
                runs: str = "kernel", basis: str = "derived for this shape by the module's "
                "own rule") -> list[dict[str, Any]]:
    ported = row(op, "ported", shape, ours_ms, unseen=True, pack_runs=runs, bucket="4096x4096",
                 config_basis=basis, speedup={"eager": [eager, eager, eager],
                                              "compile": [1.2, 1.1, 1.3]})
    return [ported, row(op, "copy", shape, 0.9 * ours_ms, unseen=True),
            row(op, "eager", shape, ours_ms * eager, unseen=True)]


def test_unseen_rows_get_their_own_table_and_targets() -> None:
    spec_rows = [row("softmax", "ported", [16384, 8192], 0.250, pct_measured_peak=85.0,
                     speedup={"compile": [1.6, 1.5, 1.7]}),
                 row("softmax", "copy", [16384, 8192], 0.200, pct_measured_peak=95.0)]
    forced = row("softmax", "kernel", [4096, 50257], 0.5, unseen=True,
                 speedup={"eager": [0.8, 0.7, 0.9]})
    rows = (spec_rows + unseen_rows("softmax", [4096, 3000], 0.1, 1.4)
            + unseen_rows("softmax", [4096, 50257], 0.4, 1.0,
                          runs="reference (pack: eager estimated faster)") + [forced]
            + unseen_rows("softmax", [1000, 8192], 0.1, 0.8,
                          basis="bucket 4096x8192's: tuned for rows this wide"))
    text = summarize(rows, META)
    spec_part, unseen_part = text.split("## Shapes no spec lists")
    assert summarize(spec_rows, META) == spec_part.rstrip("\n") + "\n"  # the suite's as before
    table = [line for line in unseen_part.splitlines() if line.startswith("| softmax")]
    assert [c.strip() for c in table[0].split("|")][4:6] == ["-", "derived config"]
    assert [c.strip() for c in table[1].split("|")][4] == "swept"  # item 57's sweep had it
    assert "reference (pack: eager estimated faster)" in table[1]
    assert [c.strip() for c in table[0].split("|")][13] == "1.4"  # ran the kernel: x eager
    assert [c.strip() for c in table[1].split("|")][13] == "0.8"  # the estimate held
    cells = [c.strip() for c in table[2].split("|")]
    assert cells[5] == "same-width bucket" and float(cells[10]) == 90.0  # % of copy
    assert "slower than eager (target: none): softmax 1000x8192 bf16: 0.80x (same-width " \
        "bucket)" in unseen_part
    assert "under 85% of copy bandwidth (target: none): none" in unseen_part


def test_resume_keeps_the_spec_rows_when_only_the_unseen_ones_are_missing(tmp_path: Path) -> None:
    from bench.suite import unseen_units

    spec = [{"op": "softmax", "provider": "ported", "shape": list(s),
             "dtype": {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[d]}
            for s, d in suite_units("softmax")]
    extra = [{"op": "softmax", "provider": "ported", "shape": list(s),
              "dtype": "bf16" if d == torch.bfloat16 else "fp32", "unseen": True}
             for s, d in unseen_units("softmax")]
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in spec + extra[:2]))
    kept, done = resume_rows(rows_path, {"date": "x"})
    assert done == {"softmax"} and kept == spec  # the partial unseen rows run again
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in spec + extra))
    kept, done = resume_rows(rows_path, {"date": "x"})
    assert done == {"softmax", "softmax:unseen"} and len(kept) == len(spec) + len(extra)
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in spec[:3] + extra))
    assert resume_rows(rows_path, {"date": "x"}) == ([], set())  # a new port: all again


def test_pack_choice_names_what_the_pack_ran() -> None:
    from bench.suite import pack_choice
    from porter.packs.loader import Choice

    b = {"bucket": "4096x4096", "dtype": "bf16", "config": {"num_warps": 8}}
    exact = Choice("h100", b, False, "exact", b["config"], "own", asked="4096x4096/bf16")
    assert pack_choice(exact) == {"pack_runs": "kernel", "config": {"num_warps": 8}}
    measured = Choice("h100", b, False, "exact", b["config"], "own", reference_why="eager",
                      asked="4096x4096/bf16")
    assert pack_choice(measured)["pack_runs"] == "reference (pack: eager measured faster)"
    unseen = Choice("h100", b, False, "near", {"num_warps": 4}, "derived for this shape",
                    reference_why="estimated slower", asked="4096x3072/bf16")
    d = pack_choice(unseen)
    assert d["pack_runs"] == "reference (pack: eager estimated faster)"
    assert d["bucket"] == "4096x4096" and d["estimate"] == "estimated slower"
    fallback = Choice(None, None, False, "no entry for b200")
    assert pack_choice(fallback)["pack_runs"] == "reference (fallback: no entry for b200)"
