"""A model-written Metal source is judged on the CPU Metal executor (the emulated tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

import hwmodels
from porter.llm.judge import judge
from porter.llm.tools import ReplyError
from porter.llm.tools import validate
from targets.metal_exec import available
from tests.porter.llm.helpers import ROOT
from tests.porter.llm.helpers import kernel

SPEC = ROOT / "examples" / "cuda_cumsum" / "cuda_spec.py"


@pytest.mark.skipif(not available()[0], reason="no C++ compiler for the Metal executor")
def test_metal_port_passes_on_the_executor_and_a_wrong_one_fails(tmp_path: Path) -> None:
    m4 = hwmodels.get("m4")
    good = judge(SPEC, kernel("metal"), m4, tmp_path, language="metal")
    assert good.passed and good.tier == "emulated", good.message
    assert "on the CPU Metal executor" in good.message
    wrong = kernel("metal").replace("        yr[i] = s;\n", "        yr[i] = s - xr[i];\n")
    bad = judge(SPEC, wrong, m4, tmp_path, language="metal")
    assert not bad.passed and bad.stage == "smoke" and bad.tier == "none"
    assert "out of tolerance" in bad.message


def test_metal_reply_without_its_dispatch_line_is_malformed() -> None:
    source = "\n".join(kernel("metal").splitlines()[1:])
    with pytest.raises(ReplyError, match="no `// porter-dispatch: {...}` line"):
        validate("write_kernel", {"language": "metal", "source": source, "kernel_name": "k",
                                  "notes": ""}, language="metal")
