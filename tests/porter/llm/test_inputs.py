"""What the model is shown of a spec: a CUDA C++ kernel named in it, checked before use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from porter.errors import SpecError
from porter.llm.inputs import existing_kernel
from porter.llm.inputs import op_context
from porter.session import input_kinds
from porter.specs import load_spec
from tests.porter.llm.helpers import ROOT

CUDA = ROOT / "examples" / "cuda_cumsum"


def test_cuda_kernel_and_its_signature_are_read_not_compiled() -> None:
    op = op_context(load_spec(CUDA / "cuda_spec.py"))
    ex = op["existing"]
    assert (ex["language"], ex["name"], ex["file"]) == ("CUDA C++", "cumsum_rows", "kernel.cu")
    assert ex["signature"].startswith("void cumsum_rows(const float* x, float* y, int n_rows")
    assert "__global__ void cumsum_rows" in ex["source"]
    assert (op["inputs"], op["output"], op["dtypes"]) == ("fp32[5, 37]", "fp32[5, 37]", "fp32")


@pytest.mark.parametrize(("edit", "problem"), [
    (('CUDA_KERNEL = "kernel.cu::cumsum_rows"', 'CUDA_KERNEL = "kernel.cu"'),
     "expected 'file.cu::kernel_name'"),
    (('CUDA_KERNEL = "kernel.cu::cumsum_rows"', 'CUDA_KERNEL = "missing.cu::cumsum_rows"'),
     "missing.cu does not exist"),
    (("CUDA_SIGNATURE = (", "_UNUSED = ("), "CUDA_KERNEL given without CUDA_SIGNATURE"),
], ids=["no-kernel-name", "missing-file", "no-signature"])
def test_a_bad_cuda_kernel_reference_is_named(tmp_path: Path, edit: tuple[str, str],
                                               problem: str) -> None:
    shutil.copy(CUDA / "kernel.cu", tmp_path / "kernel.cu")
    spec = tmp_path / "cuda_spec.py"
    text = (CUDA / "cuda_spec.py").read_text()
    assert edit[0] in text
    spec.write_text(text.replace(*edit))
    with pytest.raises(SpecError, match=problem):
        existing_kernel(load_spec(spec))


def test_input_kinds() -> None:
    import torch

    assert input_kinds((torch.zeros(2), 3, 0.5, True)) == ("tensor", "int", "float", "bool")
