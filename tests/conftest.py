"""Shared test set-up: GPU-only tests are skipped at run time on machines without a GPU."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The repo root on sys.path, so tests run from a plain checkout too (examples/ is not a package
# install target).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
# Packs loaded by tests read (and GPU tests write) a tuning cache of their own, never the user's.
if "PORTER_TUNING_CACHE" not in os.environ:
    import tempfile

    os.environ["PORTER_TUNING_CACHE"] = tempfile.mkdtemp(prefix="porter_tuning_tests_")


def _cuda_visible() -> bool:
    # Cheap test that avoids importing torch here: a GPU machine has a driver device node.
    return any(Path(p).exists() for p in ("/dev/nvidia0", "/dev/kfd"))


# Triton decides interpreted-vs-compiled when a kernel is decorated, and parts of it read the
# variable at first import; on a machine with no GPU every kernel a test runs is interpreted,
# so set it before any test imports triton. (Cross-compiling code imports its kernels with the
# variable temporarily "0": targets.load_kernel does that.)
if not _cuda_visible():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not _has_gpu():
        pytest.skip(
            "needs a CUDA/ROCm GPU; this machine has none (torch.cuda.is_available() is False)"
        )


@pytest.fixture(autouse=True)
def _restore_triton_env(request: pytest.FixtureRequest) -> Iterator[None]:
    """Undo any test's change to the TRITON_* variables (e.g. a CLI command run in-process that
    switches the interpreter off), so later tests in the same worker see the session's setting.
    A GPU test runs with the interpreter off: the interpreter tests' modules set
    TRITON_INTERPRET=1 when imported, and in one `pytest -m gpu tests` process a GPU test's
    kernels were then loaded interpreted and failed ("InterpreterBuilder has no grid_idx")."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}
    if request.node.get_closest_marker("gpu") is not None:
        os.environ.pop("TRITON_INTERPRET", None)
    yield
    for k in [k for k in os.environ if k.startswith("TRITON_")]:
        if k not in saved:
            del os.environ[k]
    os.environ.update(saved)
