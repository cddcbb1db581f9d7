"""Instance norm and group norm as row-wise kernels (porter/codegen/trace.py lowers them to
rows of one flattened group of dims), under the interpreter against float64; training batch
norm over a batch of more than one stays uncovered, with a one-line reason."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from porter.codegen import generate  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from porter.codegen.errors import UnsupportedOpError  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402
from tests.porter.test_codegen import check  # noqa: E402
from tests.porter.test_codegen import rand  # noqa: E402

F32 = torch.float32


def instance_norm(x):
    return F.instance_norm(x)  # KernelBench 34: nn.InstanceNorm2d, no affine, no running stats


def instance_norm_affine(x, w, b):
    return F.instance_norm(x, weight=w, bias=b, eps=1e-5)


def group_norm(x, w, b):
    return F.group_norm(x, 3, w, b, 1e-5)  # KernelBench 35's form


def group_norm_plain(x):
    return F.group_norm(x, 2)


def batch_norm_training(x):
    return F.batch_norm(x, None, None, training=True)


@pytest.mark.parametrize(("fn", "inputs"), [
    (instance_norm, lambda: (rand(2, 4, 7, 9),)),
    (instance_norm, lambda: (rand(3, 5, 33),)),
    (group_norm, lambda: (rand(2, 6, 5, 7), rand(6, seed=1), rand(6, seed=2))),
    (group_norm_plain, lambda: (rand(3, 6, 11),)),
], ids=["instance-4d", "instance-3d", "group-affine-4d", "group-3d"])
def test_norm_matches_float64(fn, inputs) -> None:
    op = check(fn, inputs(), f"norm_{fn.__name__}", F32)
    assert op.family == "rowwise" and op.plan.out_kind == ["full"]
    # one row per (sample, channel) or (sample, group): the spatial dims flattened, last
    assert op.plan.dim == len(op.plan.space) - 1


def test_instance_norm_looks_through_its_batch_view() -> None:
    # the rows are (N, C, H * W) of the input itself, not of PyTorch's (1, N * C, H, W) view
    op = generate(instance_norm, (rand(2, 4, 7, 9),), name="inst_rows")
    assert len(op.plan.space) == 3 and op.plan.space[1] != 1


def test_instance_norm_affine_matches_float64() -> None:
    check(instance_norm_affine, (rand(2, 4, 7, 9), rand(4, seed=1), rand(4, seed=2)),
          "inst_affine", F32)


def test_training_batch_norm_over_a_batch_says_why() -> None:
    with pytest.raises(UnsupportedOpError, match="batch of more than one"):
        generate(batch_norm_training, (rand(2, 4, 7, 9),), name="bn_train")


@pytest.mark.parametrize("fn", [lambda x: x.repeat(2, 1, 3) * 2,
                                lambda x: torch.softmax(x.repeat(1, 3), -1)],
                         ids=["repeat-leading-dim", "repeat-then-softmax"])
def test_repeat_is_coordinates(fn) -> None:
    check(fn, (rand(3, 5),), "repeat", F32)


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """The same values stored channels-last: not contiguous."""
    return x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "channels-last"])
@pytest.mark.parametrize("config", [
    None,
    {"strategy": "looped", "ROWS": 1, "BLOCK_N": 16, "num_warps": 1},
    {"strategy": "split_row", "ROWS": 1, "BLOCK_N": 16, "SPLIT": 4, "num_warps": 1},
], ids=["default", "looped", "split_row"])
def test_group_norm_rows_address_contiguous_tensors_without_divisions(contiguous, config) -> None:
    # GroupNorm's rows are (sample, group) of C/G * H * W elements: a reshape no trailing merge
    # expresses, addressed through the linear index. Where x (or out) is contiguous the address
    # is that index itself (a constexpr branch); else the division path, which must stay right.
    x = rand(2, 6, 5, 7)
    x = x if contiguous else _channels_last(x)
    ex = (x, rand(6, seed=1), rand(6, seed=2))
    op = generate(group_norm, ex, name="gn_flat")
    src = op.triton_module_source()
    assert "in0_flat: tl.constexpr" in src and "if in0_flat else" in src
    assert "out0_flat: tl.constexpr" in src and "if out0_flat else" in src
    mod = load_generated_module(src, "gn_flat", interpret=True)
    out = torch.full(x.shape, float("nan"))
    out = out if contiguous else _channels_last(out)
    assert x.is_contiguous() == out.is_contiguous() == contiguous
    got = mod.launch(*ex, out=out, config=config)
    assert got is out
    assert_close((got,), (group_norm(*(t.double() for t in ex)),), F32)
