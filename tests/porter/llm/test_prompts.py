"""Each target's prompt holds that target's own hardware facts, and no other target's."""

from __future__ import annotations

import pytest

import hwmodels
from hwmodels.descriptor import format_number
from porter.llm.inputs import op_context
from porter.llm.prompts import ROLES
from porter.llm.prompts import render
from porter.llm.prompts import system_text
from porter.specs import load_spec
from tests.porter.llm.helpers import ROOT
from tests.porter.llm.helpers import SPEC

TARGETS = ("a100", "h100", "h200", "b200", "mi300x", "mi355x", "m4")


def _facts(name: str) -> list[str]:
    hw = hwmodels.get(name)
    t = {"nvidia": "warp", "amd": "wavefront", "apple": "SIMD-group"}[hw.vendor]
    smem = hw.limits.shared_memory_per_block_bytes.value
    return [f"device: {hw.name} ", f"bandwidth {format_number(hw.peak_bandwidth_gbps)} GB/s",
            f"{t} width: {hw.build.warp_size} threads",
            f"(max {int(smem) // 1024} KiB per", f"arch {hw.build.arch})"]


@pytest.mark.parametrize("name", TARGETS)
def test_prompt_holds_its_targets_facts_and_no_others(name: str) -> None:
    spec = load_spec(SPEC)
    hw = hwmodels.get(name)
    for role in ROLES:
        prompt = render(role, hw, op=op_context(spec))
        text = prompt.system + prompt.user
        for fact in _facts(name):
            assert fact in prompt.system, (role, fact)
        for other in TARGETS:
            if other != name:
                assert f"device: {other} " not in text
                bw = format_number(hwmodels.get(other).peak_bandwidth_gbps)
                if bw != format_number(hw.peak_bandwidth_gbps):
                    assert f"bandwidth {bw} GB/s" not in text, (role, other)
        wrong_warp = "warp width: 32" if hw.vendor == "amd" else "wavefront width: 64"
        assert wrong_warp not in text
        assert ("Metal Shading Language" in text) == (hw.vendor == "apple")
        assert "def launch(*inputs, out=None, config=None)" in prompt.user or hw.vendor == "apple" \
            or role == "planner"


def test_system_prefix_is_byte_stable_and_the_same_for_every_role() -> None:
    spec = load_spec(SPEC)
    hw = hwmodels.get("mi300x")
    systems = {render(role, hw, op=op_context(spec)).system for role in ROLES}
    assert systems == {system_text(hw)}
    assert system_text(hwmodels.get("mi300x")) == system_text(hwmodels.get("mi300x"))
    assert "LDS 64 KiB" in system_text(hw) and "wavefront is 64 threads" in system_text(hw)


def test_prompt_carries_feedback_profile_and_the_existing_kernel() -> None:
    spec = load_spec(ROOT / "examples" / "cuda_cumsum" / "cuda_spec.py")
    hw = hwmodels.get("h100")
    fb = {"stage": "odd_sizes", "reason": "mismatch", "shape": (2, 1023), "dtype": "float32",
          "message": "output 0: 3 of 2046 elements out of tolerance", "source": "def launch(): ..."}
    profile = {"_k registers": 26, "_k spill bytes": 0, "_k occupancy": 1.0,
               "roofline floor (us)": 40.05}
    best = {"source": "# best kernel", "verdict": "kept", "numbers": {"pct_of_peak": 61.0}}
    user = render("debugger", hw, op=op_context(spec), feedback=fb, profile=profile,
                  best=best).user
    assert "FAILED at stage odd_sizes (mismatch, shape (2, 1023), float32)" in user
    assert "<judge>\noutput 0: 3 of 2046 elements out of tolerance\n</judge>" in user
    assert "_k registers: 26" in user and "roofline floor (us): 40.05" in user
    assert "'pct_of_peak': 61.0" in user
    assert "__global__ void cumsum_rows" in user and "CUDA C++ kernel to port" in user
    assert "void cumsum_rows(const float* x, float* y, int n_rows, int n_cols)" in user
    assert "return torch.cumsum(x, dim=-1)" in user


def test_an_existing_triton_kernel_and_a_kernelbench_file_reach_the_prompt() -> None:
    spec = load_spec(ROOT / "examples" / "rmsnorm" / "spec.py")
    op = op_context(spec)
    assert (op["existing"]["language"], op["existing"]["name"]) == ("Triton",
                                                                    "_rmsnorm_fwd_kernel")
    user = render("writer", hwmodels.get("mi300x"), op=op).user
    assert "The existing Triton kernel to port (launch signature: `kernel.py::rmsnorm_forward`)" \
        in user
    assert "def _rmsnorm_fwd_kernel(" in user and "porting the existing kernel above" in user

    kb = sorted((ROOT / "examples" / "kernelbench" / "level1").glob("*.py"))[0]
    op = op_context(load_spec(kb))
    assert op["source_kind"] == "kernelbench" and "class Model" in op["reference_source"]
    assert op["existing"] is None
    assert "class Model" in render("planner", hwmodels.get("h200"), op=op).user
