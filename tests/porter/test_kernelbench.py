"""KernelBench files are taken unmodified: reduced sizes, lifted params, same meaning as Model."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch

from porter.errors import SpecError
from porter.kernelbench import INTERPRET_ELEMENT_BUDGET
from porter.kernelbench import PARAM_SEED
from porter.kernelbench import kernelbench_problem
from porter.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
KB_FILES = sorted((ROOT / "examples" / "kernelbench" / "level1").glob("*.py"))


def test_at_least_fourteen_problem_files() -> None:
    assert len(KB_FILES) >= 14


@pytest.mark.parametrize("path", KB_FILES, ids=lambda p: p.stem)
def test_ingest_matches_model_called_directly(path: Path) -> None:
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    spec = load_spec(path)
    assert spec.source_kind == "kernelbench"
    kb = kernelbench_problem(spec)
    shape = spec.interpret_shapes[0]
    # reduced, structure kept: same number of size globals, none grew, the file's own are the GPU shape
    assert spec.shapes == (kb.original,)
    assert len(shape) == len(kb.original) and all(r <= o for r, o in zip(shape, kb.original))
    gen = torch.Generator().manual_seed(1)
    args = spec.make_inputs(shape, torch.float32, torch.device("cpu"), gen)
    inputs, params = args[: kb.n_inputs], args[kb.n_inputs:]
    assert sum(t.numel() for t in inputs if isinstance(t, torch.Tensor)) <= INTERPRET_ELEMENT_BUDGET
    # the same inputs' rank as the file's real get_inputs (checked on the meta device: no memory)
    mod = kb.module(kb.original)
    with torch.device("meta"):
        try:
            real = mod.get_inputs()
        except Exception:  # noqa: BLE001 - a sampler without meta support: skip the rank check
            real = None
    if real is not None:
        assert [t.dim() for t in real] == [t.dim() for t in inputs]

    # The reference equals Model(*get_init_inputs()) built under the same seed, called directly.
    small = kb.module(shape)
    torch.manual_seed(PARAM_SEED)
    model = small.Model(*small.get_init_inputs())
    assert len(params) == len(list(model.parameters())) + len(list(model.buffers()))
    for p, q in zip(params, model.parameters()):
        torch.testing.assert_close(p, q.detach())
    expected = model(*inputs)
    got = spec.reference(*args)
    torch.testing.assert_close(got, expected)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "the file must not be edited"


def test_layernorm_params_are_lifted_and_used() -> None:
    spec = load_spec(ROOT / "examples/kernelbench/level1/40_LayerNorm.py")
    kb = kernelbench_problem(spec)
    args = spec.make_inputs(spec.interpret_shapes[0], torch.float32, torch.device("cpu"), torch.Generator().manual_seed(0))
    x, weight, bias = args
    assert weight.shape == x.shape[1:] and bias.shape == x.shape[1:]
    # the reference really uses the lifted weight: changing it changes the output
    out1 = spec.reference(x, weight, bias)
    out2 = spec.reference(x, weight * 2, bias)
    assert not torch.allclose(out1, out2)
    assert kb.n_inputs == 1


def test_size_report_says_what_was_used() -> None:
    spec = load_spec(ROOT / "examples/kernelbench/level1/19_ReLU.py")
    text = spec.describe_shape(spec.interpret_shapes[0])
    assert "batch_size=16 (was 4096)" in text and "(was 200000)" in text
    # non-power-of-two sizes stay odd so masking paths are exercised
    assert spec.interpret_shapes[0][1] % 2 == 1


def test_equal_sizes_stay_equal_for_broadcasting() -> None:
    # HingeLoss multiplies (batch, N) by (batch,): legal only while N == batch.
    spec = load_spec(ROOT / "examples/kernelbench/level1/100_HingeLoss.py")
    b, n, _ = spec.interpret_shapes[0]
    assert b == n and math.prod((b, n)) <= INTERPRET_ELEMENT_BUDGET


def test_derived_globals_follow_overrides() -> None:
    # input_shape = (num_classes,) must follow num_classes when it is reduced.
    spec = load_spec(ROOT / "examples/kernelbench/level1/95_CrossEntropyLoss.py")
    shape = spec.interpret_shapes[0]
    logits, target = spec.make_inputs(shape, torch.bfloat16, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert logits.dtype == torch.bfloat16 and target.dtype == torch.int64  # class ids keep their dtype
    assert logits.shape[1] == dict(zip(spec.shape_names, shape))["num_classes"]
    assert int(target.max()) < logits.shape[1]


def test_fresh_inputs_per_trial() -> None:
    spec = load_spec(ROOT / "examples/kernelbench/level1/21_Sigmoid.py")
    s = spec.interpret_shapes[0]
    a = spec.make_inputs(s, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(1))[0]
    b = spec.make_inputs(s, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(2))[0]
    assert not torch.equal(a, b)


def test_kernelbench_file_without_get_inputs(tmp_path: Path) -> None:
    p = tmp_path / "1_Bad.py"
    p.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                 "def get_init_inputs():\n    return []\n")
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(p) in str(info.value) and "get_inputs" in str(info.value)
