"""The role contract: every artifact and request round-trips through JSON exactly, and the
files the loop writes read back as the same objects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from porter.roles import artifacts as a
from porter.roles import base as b

PLAN = a.ShapePlan(shape=(4096, 4096), dtype="bf16", bytes_moved=64, flops=0,
                   memory_floor_ms=0.01, compute_floor_ms=0.0, floor_ms=0.01, bound="memory",
                   knob_order=("BLOCK_N", "num_warps"), preferred={"num_warps": 8}, note="n")
KERNEL = a.KernelSource(target="h100", language="triton", source="def launch():\n    pass\n",
                        config={"num_warps": 4}, bucket="4096x4096", dtype="bf16")
ROW = a.BenchRow(target="h100", bucket="4096x4096", dtype="bf16", config='{"num_warps":4}',
                 source_hash="ab" * 8, tier="interpreted", verdict="kept", time_ms=0.012,
                 label="projected", pct_of_peak=81.0, reason="first candidate to pass")

OBJECTS = [
    a.TuningPlan(target="h100", op="rmsnorm", shapes=(PLAN,)),
    a.UnitCandidates(shape=(4096, 4096), dtype="bf16", bucket="4096x4096",
                     candidates=(a.ProposedConfig({"num_warps": 4}, "default"),),
                     rejected=(a.RejectedConfig({"num_warps": 64}, ("too many threads",)),),
                     space_size=3, capped=1),
    KERNEL,
    ROW,
    a.Diagnosis(target="h100", bucket="4096x4096", dtype="bf16", config={"num_stages": 4},
                failure="k does not fit: shared memory 300000 > 232448", kind="misfit",
                smallest_failing=a.FailingInput((7, 129), "bf16", "odd_sizes"),
                fix_config={"num_stages": 3}, fix_change="num_stages 4 -> 3", fixed=True),
    a.DebugReport(target="h100"),
    a.ProfileReport(target="h100", units=(a.UnitProfile(
        bucket="4096x4096", dtype="bf16", shape=(4096, 4096), config={"num_warps": 4},
        tier="compiled", kernels=(a.KernelResources("k", registers=32, smem_bytes=0),),
        roofline={"floor_ms": 0.01}, counters=None, counters_note="not measured"),)),
    b.PlanRequest(op="rmsnorm", target="h100", family="rowwise", shapes=((4, 8),),
                  dtypes=("bf16",)),
    b.SearchRequest(target="h100", shape=(4, 8), dtype="bf16", bucket="4x8", plan=PLAN,
                    max_variants=3, winners=({"num_warps": 4},)),
    b.WriteRequest(target="h100", config={"num_warps": 4}),
    b.JudgeRequest(target="h100", bucket="4x8", dtype="bf16", shape=(4, 8), kernels=(KERNEL,)),
    b.DebugRequest(target="h100", shape=(4, 8), row=ROW, kernel=KERNEL, details={"k": 1}),
    b.ProfileRequest(target="h100", bucket="4x8", dtype="bf16", shape=(4, 8), config={},
                     tier="compiled"),
]


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: type(o).__name__)
def test_round_trip_through_json(obj: a.Artifact) -> None:
    text = obj.to_json()
    json.loads(text)  # plain JSON, no custom types
    assert type(obj).from_json(text) == obj


def test_candidates_file_is_keyed_by_unit(tmp_path: Path) -> None:
    cands = a.Candidates(target="h100", units=(OBJECTS[1],))
    path = cands.write(tmp_path / a.CANDIDATES)
    raw = json.loads(path.read_text())
    assert list(raw) == ["4096x4096/bf16"] and raw["4096x4096/bf16"]["candidates"][0]["config"]
    assert a.Candidates.from_json(path.read_text(), "h100") == cands


@pytest.mark.parametrize("language", ["triton", "metal"])
def test_kernel_file_keeps_source_and_metadata(tmp_path: Path, language: str) -> None:
    k = a.KernelSource(target="m4", language=language, source="kernel void f() {}\n",
                       config={"BLOCK": 256}, note="fixes: shared memory")
    path = k.write_file(tmp_path / k.filename)
    assert path.name == ("kernel.metal" if language == "metal" else "kernel.py")
    assert path.read_text().endswith(k.source)
    assert a.KernelSource.read_file(path) == k


def test_bench_csv_round_trip(tmp_path: Path) -> None:
    path = a.write_bench_csv([ROW], tmp_path / a.BENCH_RESULTS)
    assert path.read_text().splitlines()[0].split(",") == list(a.BENCH_COLUMNS)
    assert a.read_bench_csv(path) == [ROW]


def test_exchange_records_what_a_role_saw_and_said(tmp_path: Path) -> None:
    class Fake:
        name, implementation = "planner", "fake"

    req = OBJECTS[7]
    b.record_exchange(tmp_path / "roles.jsonl", Fake(), "h100", req, OBJECTS[0], 0.5)
    line = json.loads((tmp_path / "roles.jsonl").read_text())
    ex = b.Exchange.from_dict(line)
    assert (ex.role, ex.implementation, ex.target) == ("planner", "fake", "h100")
    assert b.PlanRequest.from_dict(ex.request) == req
    assert a.TuningPlan.from_dict(ex.response) == OBJECTS[0]
