"""The judge on the target's own GPU: native check, resources from the compiled kernel, a time on
the roofline; a kernel that lets torch work and one that faults are rejected (GPU only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.llm.judge import judge
from tests.porter.llm.helpers import SPEC
from tests.porter.llm.helpers import kernel


@pytest.mark.gpu
def test_device_judge_times_and_rejects_a_cheat(tmp_path: Path) -> None:
    import hwmodels
    from porter.llm.agent import local_device

    name = local_device()
    if name is None:
        pytest.skip("this GPU matches no hardware model")
    hw = hwmodels.get(name)
    good = judge(SPEC, kernel("good"), hw, tmp_path, language="triton", on_device=True)
    assert good.passed and good.tier == "measured", good.message
    n = good.numbers
    assert n["label"] == "measured" and n["time_ms"] > 0 and 0 < n["pct_of_peak"] <= 105
    assert good.resources and good.resources[0]["registers"] > 0
    print(f"{name}: cumsum 4096x4096 fp32 {n['time_ms'] * 1e3:.1f} us, "
          f"{n['pct_of_peak']:.0f}% of the speed of light; {good.resources[0]}")
    cheat = judge(SPEC, kernel("torch"), hw, tmp_path, language="triton", on_device=True)
    assert not cheat.passed and cheat.cheat and cheat.caught_by == "no_torch_compute"
    crash = judge(SPEC, kernel("crash"), hw, tmp_path, language="triton", on_device=True)
    assert not crash.passed
    print(f"crash: {crash.stage} {crash.reason}: {crash.message[:300]}")
