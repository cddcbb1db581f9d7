"""Run Metal kernels on the CPU: translate, compile with the system C++ compiler, call via ctypes.

`MetalProgram(source)` translates the Metal source (`translate.translate`), compiles it once
into a shared library cached by the sha256 of the C++ text, header and flags (in
`$PORTER_METAL_CACHE`, else `<tmp>/porter-metal-exec-<uid>`), and `program.launch(kernel, args,
threadgroups=(gx, gy, gz), threads=(tx, ty, tz))` dispatches it like
`dispatchThreadgroups:threadsPerThreadgroup:` does: every threadgroup's threads run as fibers, a
SIMD-group is 32 threads. `args` are in buffer-index order: a CPU tensor for a pointer
parameter (its dtype must be the parameter's element type), a Python number for a
`constant T&` one (an `atomic_int*` / `atomic_uint*` buffer takes an int32 tensor, an
`atomic_float*` one a float32 tensor). A broken rule (an out-of-bounds access, a race on
threadgroup memory, a barrier not every thread reaches, a spin-wait on another thread) raises
`MetalExecError` with the runtime's message. `fast::` math carries the error Apple documents
(metal_stdlib.h, `porter_rt::fm`); unqualified math is computed as the precise variant.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import struct
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from targets.metal_exec.translate import KernelSig
from targets.metal_exec.translate import Param
from targets.metal_exec.translate import translate

log = logging.getLogger(__name__)

HEADER = Path(__file__).with_name("metal_stdlib.h")
# -O1: the kernels are small and compile time dominates a check; -fno-strict-aliasing because
# the runtime moves operands through byte slots.
CXX_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-w", "-fno-strict-aliasing")
SIMD_WIDTH = 32
MAX_THREADS = 1024

# Metal element type -> (torch dtype, struct code for a `constant T&` scalar)
_TYPES: dict[str, tuple[torch.dtype, str]] = {
    "float": (torch.float32, "f"), "half": (torch.float16, "e"), "bfloat": (torch.bfloat16, "H"),
    "int": (torch.int32, "i"), "uint": (torch.int32, "I"), "long": (torch.int64, "q"),
    "ulong": (torch.int64, "Q"), "short": (torch.int16, "h"), "ushort": (torch.int16, "H"),
    "char": (torch.int8, "b"), "uchar": (torch.uint8, "B"), "bool": (torch.bool, "?"),
    "int32_t": (torch.int32, "i"), "uint32_t": (torch.int32, "I"), "int64_t": (torch.int64, "q"),
    # an atomic buffer is a tensor of its value type
    "atomic_int": (torch.int32, "i"), "atomic_uint": (torch.int32, "I"),
    "atomic_float": (torch.float32, "f"),
}
_VECTOR = {"float4": "float", "float2": "float", "half4": "half", "half2": "half",
           "bfloat4": "bfloat", "bfloat2": "bfloat"}


class MetalExecError(RuntimeError):
    """A kernel broke a rule while running on the executor (the message says which)."""


class CompilerMissingError(RuntimeError):
    """No C++ compiler to build the executor's libraries (install g++ or clang)."""


def find_compiler() -> str | None:
    """The C++ compiler to use: $CXX, else g++, else clang++; None when there is none."""
    for name in (os.environ.get("CXX"), "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def available() -> tuple[bool, str]:
    """(True, compiler) when Metal kernels can be executed here, else (False, why not)."""
    cxx = find_compiler()
    if cxx is None:
        return False, "no C++ compiler (g++ or clang++) on PATH; the Metal executor needs one"
    return True, cxx


def cache_dir() -> Path:
    """Where compiled kernels are kept ($PORTER_METAL_CACHE, else a per-user temp folder)."""
    given = os.environ.get("PORTER_METAL_CACHE")
    default = Path(tempfile.gettempdir()) / f"porter-metal-exec-{os.getuid()}"
    path = Path(given) if given else default
    path.mkdir(parents=True, exist_ok=True)
    return path


_LIBS: dict[str, ctypes.CDLL] = {}
_LOCK = threading.Lock()


def _compile(cpp: str) -> ctypes.CDLL:
    cxx = find_compiler()
    if cxx is None:
        raise CompilerMissingError(available()[1])
    header = HEADER.read_text()
    key = hashlib.sha256("\0".join([cpp, header, " ".join(CXX_FLAGS), cxx]).encode()).hexdigest()
    with _LOCK:
        if key in _LIBS:
            return _LIBS[key]
        lib_path = cache_dir() / f"k_{key[:24]}.so"
        if not lib_path.exists():
            work = Path(tempfile.mkdtemp(prefix="build_", dir=cache_dir()))
            try:
                (work / "metal_stdlib.h").write_text(header)
                (work / "kernel.cpp").write_text(cpp)
                out = work / "kernel.so"
                proc = subprocess.run([cxx, *CXX_FLAGS, "-I", str(work), "-o", str(out),
                                       str(work / "kernel.cpp")],
                                      capture_output=True, text=True, timeout=300, check=False)
                if proc.returncode != 0:
                    lines = [ln for ln in proc.stderr.splitlines() if "error" in ln][:5]
                    raise MetalExecError("the Metal source did not build for the executor: "
                                         + (" | ".join(lines) or proc.stderr[-2000:]))
                os.replace(out, lib_path)  # atomic: a concurrent build of the same key is fine
            finally:
                shutil.rmtree(work, ignore_errors=True)
        lib = ctypes.CDLL(str(lib_path))
        _LIBS[key] = lib
        return lib


class MetalProgram:
    """Metal source compiled for the CPU executor; `launch` runs one of its kernels."""

    def __init__(self, source: str) -> None:
        self.source = source
        tr = translate(source)
        self.cpp = tr.cpp
        self.kernels: dict[str, KernelSig] = {k.name: k for k in tr.kernels}
        self._lib = _compile(tr.cpp)
        self._fns: dict[str, Any] = {}
        for name in self.kernels:
            fn = getattr(self._lib, f"porter_launch_{name}")
            fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong),
                           ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                           ctypes.c_longlong, ctypes.c_char_p, ctypes.c_int]
            fn.restype = ctypes.c_int
            self._fns[name] = fn
        self.launches = 0  # counted, so a test can prove the kernel ran

    def launch(self, kernel: str, args: Sequence[Any], *, threadgroups: Sequence[int],
               threads: Sequence[int], threadgroup_memory_limit: int = 32768) -> None:
        """Dispatch `kernel` over `threadgroups` threadgroups of `threads` threads each.

        Args:
            kernel: the kernel's name in the source.
            args: one per `[[buffer(i)]]`, in index order: a CPU tensor (pointer parameters; its
                storage from the tensor's offset on is the buffer) or a number (`constant T&`).
            threadgroups: 1 to 3 sizes of the grid, in threadgroups.
            threads: 1 to 3 sizes of a threadgroup (at most 1024 threads).
            threadgroup_memory_limit: bytes of threadgroup memory a threadgroup may allocate
                (the device's maximum, 32768 on Apple GPUs); 0 for no limit.

        Raises:
            MetalExecError: a rule broken while running, or arguments that do not match.
        """
        sig = self.kernels.get(kernel)
        if sig is None:
            raise MetalExecError(f"no kernel {kernel!r} in the source; it has "
                                 f"{', '.join(self.kernels)}")
        grid = _dims(threadgroups, "threadgroups")
        tpt = _dims(threads, "threads")
        n_threads = tpt[0] * tpt[1] * tpt[2]
        if n_threads > MAX_THREADS:
            raise MetalExecError(f"{n_threads} threads per threadgroup > {MAX_THREADS}")
        if sig.max_threads is not None and n_threads > sig.max_threads:
            raise MetalExecError(f"{n_threads} threads per threadgroup > {sig.max_threads} that "
                                 f"{kernel} declares with max_total_threads_per_threadgroup")
        bufs = sig.buffers()
        if len(args) != len(bufs):
            raise MetalExecError(f"{kernel} takes {len(bufs)} buffers "
                                 f"({', '.join(p.name for p in bufs)}), got {len(args)}")
        ptrs = (ctypes.c_void_p * max(1, len(bufs)))()
        sizes = (ctypes.c_longlong * max(1, len(bufs)))()
        keep: list[Any] = []
        for p, a in zip(bufs, args, strict=True):
            index = p.index or 0
            if index >= len(bufs):
                raise MetalExecError(f"{kernel}: buffer indices must be 0..{len(bufs) - 1}, "
                                     f"{p.name} has [[buffer({index})]]")
            ptrs[index], sizes[index] = _buffer(kernel, p, a, keep)
        err = ctypes.create_string_buffer(2048)
        grid_c = (ctypes.c_uint * 3)(*grid)
        tpt_c = (ctypes.c_uint * 3)(*tpt)
        rc = self._fns[kernel](ptrs, sizes, grid_c, tpt_c, int(threadgroup_memory_limit), err,
                               len(err))
        self.launches += 1
        if rc != 0:
            raise MetalExecError(f"{kernel}: {err.value.decode(errors='replace')}")


def _dims(v: Sequence[int] | int, what: str) -> tuple[int, int, int]:
    dims = [int(v)] if isinstance(v, int) else [int(x) for x in v]
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise MetalExecError(f"{what} must be 1 to 3 positive sizes, got {v!r}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _buffer(kernel: str, p: Param, a: Any, keep: list[Any]) -> tuple[int, int]:
    elem = _VECTOR.get(p.type, p.type)
    if p.type not in _TYPES and elem not in _TYPES:
        raise MetalExecError(f"{kernel}: buffer {p.name} has type {p.type}, which the executor "
                             "cannot pass")
    dtype, code = _TYPES[elem]
    if p.pointer:
        if not isinstance(a, torch.Tensor):
            raise MetalExecError(f"{kernel}: buffer {p.index} ({p.name}) is a pointer to "
                                 f"{p.type}; got {type(a).__name__}, not a tensor")
        if a.device.type != "cpu":
            raise MetalExecError(f"{kernel}: buffer {p.name} must be a CPU tensor, got {a.device}")
        same_int = (not a.dtype.is_floating_point and not dtype.is_floating_point
                    and a.element_size() == torch.empty((), dtype=dtype).element_size())
        if a.dtype != dtype and not same_int:
            raise MetalExecError(f"{kernel}: buffer {p.name} is {p.type}* but the tensor is "
                                 f"{a.dtype}")
        nbytes = a.untyped_storage().nbytes() - a.storage_offset() * a.element_size()
        return a.data_ptr(), max(0, nbytes)
    if isinstance(a, torch.Tensor):
        if a.numel() != 1:
            raise MetalExecError(f"{kernel}: buffer {p.name} is a constant {p.type}; got a "
                                 f"tensor of {a.numel()} elements")
        a = a.item()
    value = float(a) if code in "efH" and elem != "ushort" else int(a)
    if elem == "bfloat":
        data = torch.tensor([value], dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
    else:
        data = struct.pack("<" + code, value)
    buf = ctypes.create_string_buffer(data, max(8, len(data)))
    keep.append(buf)
    return ctypes.addressof(buf), len(data)
