"""Gaps found by running the porter on upstream KernelBench level-1 files, each reproduced here
with a small self-written problem file (the upstream text stays out of this repo).

See bench/kernelbench_dir.py and results/kernelbench-level1-upstream.md.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from porter.codegen.errors import UnsupportedOpError
from porter.commands.common import generated_candidate
from porter.commands.common import generated_module
from porter.commands.common import set_interpreter
from porter.specs import load_spec
from porter.specs.kernelbench import kernelbench_problem

HEADER = "import torch\nimport torch.nn as nn\n\n"


def _problem(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body), encoding="utf-8")
    return path


def _check(path: Path) -> object:
    """What `porter check FILE` does on a CPU: generate, then the five stages."""
    set_interpreter(True)
    from harness.check import check as harness_check

    spec = load_spec(str(path))
    _, module = generated_module(spec, interpret=True)
    return harness_check(spec.problem(interpret=True), generated_candidate(module), device="cpu",
                         interpret=True, dtypes=spec.dtypes)


# A model attribute named like a size global (`self.dim` next to `dim = 3000`) is not a read of
# that global: the model is size-independent and the kernel must not be specialized to one size.
LOG_SOFTMAX = """
class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.log_softmax(x, dim=self.dim)

batch_size = 64
dim = 3000

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""


def test_attribute_named_like_a_size_global_is_not_a_size_dependency(tmp_path: Path) -> None:
    spec = load_spec(str(_problem(tmp_path, "1_LogSoftmaxAttr.py", LOG_SOFTMAX)))
    assert len(spec.interpret_shapes) == 2, "two reduced sizes, so the sweep sees a second shape"
    assert kernelbench_problem(spec)._size_independent_model() is not None


def test_forward_reading_a_size_global_stays_size_dependent(tmp_path: Path) -> None:
    body = LOG_SOFTMAX.replace("torch.log_softmax(x, dim=self.dim)", "x[:, :dim] * 2.0")
    spec = load_spec(str(_problem(tmp_path, "2_ReadsGlobal.py", body)))
    assert kernelbench_problem(spec)._size_independent_model() is None


def test_log_softmax_with_dim_attribute_passes_all_stages(tmp_path: Path) -> None:
    report = _check(_problem(tmp_path, "3_LogSoftmaxAttr.py", LOG_SOFTMAX))
    assert report.passed, report.summary()


MAX_DIM = """
class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.max(x, dim=self.dim)[0]

batch_size = 16
dim1 = 40
dim2 = 33

def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]

def get_init_inputs():
    return [1]
"""


def test_max_over_a_dim_values_only_passes_all_stages(tmp_path: Path) -> None:
    report = _check(_problem(tmp_path, "4_MaxDim.py", MAX_DIM))
    assert report.passed, report.summary()


@pytest.mark.parametrize("body", [
    MAX_DIM.replace("torch.max(x, dim=self.dim)[0]", "torch.argmax(x, dim=self.dim)"),
    MAX_DIM.replace("torch.max(x, dim=self.dim)[0]", "torch.argmin(x, dim=self.dim)"),
], ids=["argmax", "argmin"])
def test_argmax_argmin_over_a_dim_pass_all_stages(tmp_path: Path, body: str) -> None:
    # KernelBench 51/52's form (the dim from get_init_inputs, an int64 output compared exactly)
    report = _check(_problem(tmp_path, "6_ArgDim.py", body))
    assert report.passed, report.summary()


@pytest.mark.parametrize("body, needle", [
    (MAX_DIM.replace("torch.max(x, dim=self.dim)[0]",
                     "torch.min(x.int(), dim=self.dim)[1].float()"), "indices of min"),
    (MAX_DIM.replace("torch.max(x, dim=self.dim)[0]", "torch.argmax(x)"),
     "argmax over all dims"),
    (MAX_DIM.replace("torch.max(x, dim=self.dim)[0]", "torch.cummax(x, dim=self.dim)[0]"),
     "aten.cummax"),
])
def test_index_and_scan_ops_fail_with_a_clear_not_covered_error(tmp_path: Path, body: str,
                                                                needle: str) -> None:
    spec = load_spec(str(_problem(tmp_path, "5_NotCovered.py", body)))
    with pytest.raises(UnsupportedOpError, match=needle):
        generated_module(spec, interpret=True)


BATCH_NORM = """
class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x):
        return self.bn(x)

batch_size = 16
features = 6
dim1 = 24
dim2 = 24

def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]

def get_init_inputs():
    return [features]
"""


def test_batch_norm_inference_passes_all_stages(tmp_path: Path) -> None:
    # The loader builds the model in eval mode: running statistics, a per-channel affine. The
    # decomposition also leaves a dead `empty` reserve buffer, which must not need a template.
    path = _problem(tmp_path, "6_BatchNorm.py", BATCH_NORM)
    spec = load_spec(str(path))
    assert any(t.ndim == 1 and t.shape[0] == 6 for t in spec.make_inputs(
        spec.smoke_shape, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(0))[1:])
    report = _check(path)
    assert report.passed, report.summary()


def test_tuple_sizes_written_as_arithmetic_are_reduced(tmp_path: Path) -> None:
    body = """
class Model(nn.Module):
    def forward(self, p, t):
        return torch.nn.functional.kl_div(torch.log(p), t, reduction='batchmean')

batch_size = 4096 * 2
input_shape = (4096 * 2,)
dim = 1

def get_inputs():
    return [torch.rand(batch_size, *input_shape).softmax(dim=-1),
            torch.rand(batch_size, *input_shape).softmax(dim=-1)]

def get_init_inputs():
    return []
"""
    spec = load_spec(str(_problem(tmp_path, "7_KLDiv.py", body)))
    assert spec.shape_names == ("batch_size", "input_shape[0]", "dim")
    assert spec.shapes[0] == (8192, 8192, 1)
    x = spec.make_inputs(spec.interpret_shapes[0], torch.float32, torch.device("cpu"),
                         torch.Generator().manual_seed(0))[0]
    assert x.shape[1] < 8192 and x.numel() <= 1 << 15
