"""The only place target backends are looked up: by name, or by the device they build for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from targets.base import TargetBackend
from targets.metal import MetalBackend
from targets.triton_cuda import TritonCudaBackend
from targets.triton_hip import TritonHipBackend

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

# Backends are stateless, so one instance each is shared.
_BACKENDS: dict[str, TargetBackend] = {
    b.name: b for b in (TritonCudaBackend(), TritonHipBackend(), MetalBackend())
}


class UnknownTargetError(LookupError):
    """No backend has the requested name (or builds for the requested device)."""


def available() -> list[str]:
    """Names of every backend: ["metal", "triton-cuda", "triton-hip"]."""
    return sorted(_BACKENDS)


def get_backend(name: str) -> TargetBackend:
    """The backend called `name` (case-insensitive), e.g. "triton-cuda".

    Raises:
        UnknownTargetError: listing the available names.
    """
    backend = _BACKENDS.get(name.strip().lower())
    if backend is None:
        raise UnknownTargetError(
            f"unknown target backend {name!r}; available: {', '.join(available())}"
        )
    return backend


def for_device(hw: HardwareModel) -> TargetBackend:
    """The backend that builds for `hw` (from hw.build.backend), e.g. h100 -> triton-cuda.

    Raises:
        UnknownTargetError: when the model names a backend that does not exist.
    """
    backend = _BACKENDS.get(hw.build.backend)
    if backend is None or not backend.supports(hw):
        raise UnknownTargetError(
            f"{hw.name} ({hw.source_file or 'hardware model'}) asks for backend "
            f"{hw.build.backend!r}; available: {', '.join(available())}"
        )
    return backend
