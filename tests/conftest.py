"""Shared test set-up: GPU-only tests are skipped at run time on machines without a GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The repo root on sys.path, so tests run from a plain checkout too (examples/ is not a package
# install target).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not _has_gpu():
        pytest.skip("needs a CUDA/ROCm GPU; this machine has none (torch.cuda.is_available() is False)")
