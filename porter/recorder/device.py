"""The device, answered from the hardware model: what a launcher asks of torch and Triton
(`torch.cuda.get_device_properties`, `torch.version.hip`, `triton.runtime.driver.active`)
answered for a target while it is recorded."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

def device_properties(hw: HardwareModel) -> SimpleNamespace:
    """What ``torch.cuda.get_device_properties`` says on `hw` (fields launchers read)."""
    lim = hw.limits
    major, minor = capability(hw)
    return SimpleNamespace(
        name=hw.full_name, multi_processor_count=int(hw.compute_units.value),
        total_memory=int(hw.memory.capacity_gb.value * 2**30), major=major, minor=minor,
        warp_size=hw.build.warp_size,
        max_threads_per_multi_processor=int(lim.max_threads_per_unit.value),
        max_threads_per_block=int(lim.max_threads_per_block.value),
        regs_per_multiprocessor=int(lim.registers_per_unit.value),
        shared_memory_per_block=min(49152, int(lim.shared_memory_per_block_bytes.value)),
        shared_memory_per_block_optin=int(lim.shared_memory_per_block_bytes.value),
        shared_memory_per_multiprocessor=int(lim.shared_memory_per_unit_bytes.value),
        L2_cache_size=int(hw.memory.last_level_cache_bytes.value),
        gcnArchName=hw.build.arch if hw.vendor == "amd" else "",
        is_integrated=False, uuid="porter-" + hw.name)


def capability(hw: HardwareModel) -> tuple[int, int]:
    """``torch.cuda.get_device_capability`` on `hw`: (9, 0) for sm_90; (9, 4) for gfx942."""
    arch = hw.build.arch
    digits = re.sub(r"\D", "", arch.removeprefix("sm_").removeprefix("gfx"))
    if hw.vendor == "amd":
        return (int(digits[:1] or 9), int(digits[1:2] or 0))
    return (int(digits[:-1] or 0), int(digits[-1:] or 0))


def triton_properties(hw: HardwareModel) -> dict[str, Any]:
    """``triton.runtime.driver.active.utils.get_device_properties(i)`` on `hw`."""
    lim = hw.limits
    return {"multiprocessor_count": int(hw.compute_units.value),
            "max_shared_mem": int(lim.shared_memory_per_block_bytes.value),
            "max_num_regs": int(lim.registers_per_unit.value),
            "warpSize": hw.build.warp_size,
            "sm_clock_rate": int(hw.boost_clock_mhz.value * 1000),
            "mem_clock_rate": 0, "mem_bus_width": 0}


class _FakeDriver:
    """Enough of ``triton.runtime.driver.active`` for a launcher sizing itself to `hw`."""

    def __init__(self, hw: HardwareModel) -> None:
        from triton.backends.compiler import GPUTarget

        backend = "hip" if hw.vendor == "amd" else "cuda"
        arch: Any = hw.build.arch
        if backend == "cuda":
            arch = int(re.sub(r"\D", "", str(arch)) or 0)
        self._target = GPUTarget(backend, arch, hw.build.warp_size)
        self.utils = SimpleNamespace(get_device_properties=lambda *_: triton_properties(hw))

    def get_current_target(self) -> Any:
        return self._target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, *_: Any) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


@contextlib.contextmanager
def device_answers(hw: HardwareModel) -> Iterator[None]:
    """Inside the block, the device questions launchers ask are answered for `hw`."""
    import importlib

    import torch

    holder = importlib.import_module("triton.runtime.driver").driver
    props = device_properties(hw)
    patches: list[tuple[Any, str, Any]] = [
        (torch.cuda, "get_device_properties", lambda *_a, **_k: props),
        (torch.cuda, "get_device_capability", lambda *_a, **_k: capability(hw)),
        (torch.cuda, "get_device_name", lambda *_a, **_k: hw.full_name),
        (torch.cuda, "current_device", lambda: 0),
        (torch.version, "hip", "6.2.0" if hw.vendor == "amd" else None),
    ]
    saved = [(obj, name, getattr(obj, name, None)) for obj, name, _ in patches]
    before = holder._active
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        holder._active = _FakeDriver(hw)
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        holder._active = before
