"""A reduction over a dim that is not the last (RMS norm over the channels of (N, C, H, W)):
the config the port judged is the one its pack launches. The bucket name's width is the last
dim (W), while a row config's BLOCK_N is about the reduced dim (C): a fit check that compared
BLOCK_N with W refitted every one-block config to the column kernel in the device judge, which
then timed the column kernel while the pack shipped (and its loader ran) the strided row one
(KernelBench 36_RMSNorm_ on an H100: judged 7.6 ms, ran 89.5 ms)."""

from __future__ import annotations

import functools
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import hwmodels
from porter.codegen import generate
from porter.codegen import load_generated_module
from porter.judge.interpreted import RefittingCandidate
from porter.judge.interpreted import config_fits
from porter.packs.format import shape_bucket
from porter.packs.loader import PackFallbackWarning
from porter.packs.loader import load_pack
from porter.packs.writer import write_pack
from porter.port import BucketChoice
from porter.port import PortResult
from porter.port import TargetResult

REFERENCE = '''
import torch

def reference(x):
    return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)
'''

# (N, C, H, W): C = 8 channels reduced, rows of W = 16 contiguous elements
SHAPE = (4, 8, 4, 16)
# a one-block row config tuned for 8 channels (BLOCK_N = C, not W)
PERSISTENT = {"strategy": "persistent", "ROWS": 2, "BLOCK_N": 8, "num_warps": 1,
              "num_stages": 1, "PROGRAMS_PER_SM": 1, "dtype": "fp32"}


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)


@functools.lru_cache(maxsize=1)
def _op() -> Any:
    return generate(_rms, (torch.randn(*SHAPE),), name="rms_c")


def _x(shape: tuple[int, ...] = SHAPE, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _pack(tmp: Path, config: dict[str, Any]) -> Path:
    op = _op()
    choice = BucketChoice(bucket=shape_bucket(SHAPE), dtype="fp32", shape=SHAPE, config=config,
                          source=op.triton_module_source(), tier="interpreted",
                          numbers={"time_ms": 0.01, "label": "projected", "pct_of_peak": 80.0})
    spec = tmp / "spec.py"
    spec.write_text(REFERENCE)
    result = PortResult(op="rms_c", spec_path=spec, run_dir=tmp / "run",
                        targets=(TargetResult("h100", "nvidia", "triton-cuda", "90", "ab" * 32,
                                              "fp32: atol=1e-05", (choice,)),),
                        versions={"torch": "x", "triton": "y"}, fusion={},
                        signature=("tensor",), reference_function="reference")
    return write_pack(result, tmp / "packs").path


def _spy(op: Any) -> list[Any]:
    """Record the config of every launch of the pack's (only) kernel module under the
    interpreter."""
    rel = op.manifest["entries"][0]["buckets"][0]["file"]
    module = op._module(rel, True)
    launched: list[Any] = []
    real = module.launch

    def launch(*inputs: Any, out: Any = None, config: Any = None) -> Any:
        launched.append(config)
        return real(*inputs, out=out, config=config)

    module.launch = launch
    return launched


def test_the_row_of_a_non_last_dim_reduction_is_the_reduced_dim() -> None:
    op, hw = _op(), hwmodels.get("h100")
    x = (torch.empty(*SHAPE, device="meta"),)
    assert op.problem_sizes(x)["n_cols"] == SHAPE[1]
    assert config_fits(op, hw, x, PERSISTENT)
    # the KernelBench shape: 64 channels, rows of 512 (bucket "4194304x512")
    big = (torch.empty(112, 64, 512, 512, device="meta"),)
    assert shape_bucket(big[0].shape) == "4194304x512"
    assert config_fits(op, hw, big, {**PERSISTENT, "BLOCK_N": 64})
    assert not config_fits(op, hw, big, {**PERSISTENT, "BLOCK_N": 32})


def test_the_judge_runs_the_candidates_own_config_at_its_shape() -> None:
    """RefittingCandidate (the interpreted and the device judge) leaves a config that holds the
    reduced dim as it is: what it checks and times is the config the pack records."""
    op = _op()
    module = load_generated_module(op.triton_module_source(), "rms_c_judge", interpret=True)
    cand = RefittingCandidate(module, op, hwmodels.get("h100"), PERSISTENT)
    x = _x()
    torch.testing.assert_close(cand(x), _rms(x), atol=1e-5, rtol=1e-5)
    assert cand.refitted == []
    # more channels than BLOCK_N holds: refitted there, and said so
    wide = _x((2, 32, 4, 16), seed=1)
    torch.testing.assert_close(cand(wide), _rms(wide), atol=1e-5, rtol=1e-5)
    assert cand.refitted == [(2, 32, 4, 16)]


def test_the_pack_launches_its_exact_buckets_config(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    op = load_pack(_pack(tmp_path, PERSISTENT), device="h100")
    x = _x()
    c = op.choose(x)
    assert c.runs_kernel and not c.unseen and c.config == PERSISTENT
    launched = _spy(op)
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="porter.packs.loader"):
        warnings.simplefilter("error", PackFallbackWarning)
        y = op(x)
    torch.testing.assert_close(y, _rms(x), atol=1e-5, rtol=1e-5)
    assert launched == [PERSISTENT]
    assert not [r for r in caplog.records if "does not fit" in r.getMessage()]


def test_a_refit_at_load_time_names_the_config_it_ran(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """The bucket name keeps only the row count and the last dim: (2, 16, 4, 16) falls in the
    bucket of (4, 8, 4, 16) with twice the channels, which the bucket's BLOCK_N = 8 cannot hold.
    The launcher refuses it, and the loader runs another config: the log names that config
    (not the bucket's) and says its speed was never measured."""
    op = load_pack(_pack(tmp_path, PERSISTENT), device="h100")
    x = _x((2, 16, 4, 16), seed=2)
    assert shape_bucket(x.shape) == shape_bucket(SHAPE)
    launched = _spy(op)
    with caplog.at_level(logging.WARNING, logger="porter.packs.loader"):
        y = op(x)
    torch.testing.assert_close(y, _rms(x), atol=1e-5, rtol=1e-5)
    ran = launched[-1]
    assert launched[0] == PERSISTENT and ran is not None and ran != PERSISTENT
    said = [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()]
    assert len(said) == 1
    assert f"ran {ran} instead" in said[0] and "never measured" in said[0]
    assert str(PERSISTENT) in said[0]
