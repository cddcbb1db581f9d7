"""Run a pack's Metal entry: on a Mac through PyTorch's MPS backend, on a CPU through the executor.

A Metal file in a pack carries its dispatch (`// porter-dispatch: {...}`, targets.metal_host):
kernel names, buffer order and roles, the host expressions of every scalar, and per launch the
grid in threadgroups and the threads per threadgroup. `MetalRunner(source)` binds a call's
inputs and outputs with it and launches:

- tensors on "mps": `torch.mps.compile_shader(source)` once, then per launch
  `lib.<kernel>(*buffers, threads=[grid * group per dim], group_size=[group])` (one to three
  dims, trailing 1s dropped, both lists of one length): PyTorch dispatches *threads*
  (dispatchThreads), so the threadgroup grid is multiplied out, and a Python int is bound as a
  64-bit integer, which is what every generated scalar (`constant long&`) is;
- tensors on "cpu": the CPU Metal executor (targets.metal_exec): correct, not fast;
- anywhere else, or where PyTorch has no `torch.mps.compile_shader` (MPS missing): `unavailable`
  says why and the loader runs the reference.

What has not run on real Apple hardware: all of it. The MPS path is tested against a fake of
`torch.mps.compile_shader` that checks the calls it receives and runs them on the executor.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import torch

from targets import metal_host

log = logging.getLogger(__name__)


def backend_for(device: torch.device) -> str | None:
    """"mps" | "executor" | None: what runs Metal for tensors on `device`."""
    if device.type == "mps":
        return "mps"
    if device.type == "cpu":
        return "executor"
    return None


def mps_unavailable() -> str | None:
    """Why PyTorch cannot run Metal source here through MPS, or None when it can."""
    compile_shader = getattr(getattr(torch, "mps", None), "compile_shader", None)
    if compile_shader is None:
        return (f"this PyTorch ({torch.__version__}) has no torch.mps.compile_shader (MPS "
                "backend missing or too old)")
    if not torch.backends.mps.is_available():
        return ("torch.backends.mps.is_available() is False (no Apple GPU, or PyTorch built "
                "without MPS)")
    return None


def mps_sizes(launch: metal_host.Launch) -> tuple[list[int], list[int]]:
    """`threads` and `group_size` for PyTorch's kernel call: it dispatches threads, so the grid
    of threadgroups is multiplied out; both of one length (1 to 3), trailing 1s dropped."""
    threads = [g * t for g, t in zip(launch.threadgroups, launch.threads, strict=True)]
    group = list(launch.threads)
    dims = max([1] + [d + 1 for d in range(3) if threads[d] > 1 or group[d] > 1])
    return threads[:dims], group[:dims]


class MetalRunner:
    """One Metal file of a pack, runnable through MPS (Mac) or the CPU executor."""

    def __init__(self, source: str, *, label: str = "") -> None:
        self.source = source
        self.label = label
        self.dispatch = metal_host.parse(source)
        self._lib: Any = None
        self._emu: Any = None
        self._lock = threading.Lock()
        self.calls = 0  # kernel launches made (a test proves the kernel ran with it)

    def unavailable(self, inputs: Sequence[Any]) -> str | None:
        """Why this call cannot run the kernel (the reference runs instead), or None."""
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        if first is None:
            return "no tensor input"
        backend = backend_for(first.device)
        if backend == "mps":
            return mps_unavailable()
        if backend == "executor":
            from targets.metal_exec import available

            ok, why = available()
            return None if ok else f"Metal entry on a CPU needs the Metal executor: {why}"
        return f"a Metal entry cannot run on {first.device}"

    def __call__(self, inputs: Sequence[Any], out: Any,
                 reference: Callable[..., Any]) -> Any:
        """Run the kernel(s) into `out` (allocated from the reference's meta shapes when None)."""
        first = next(t for t in inputs if isinstance(t, torch.Tensor))
        outs, ret = self._outs(inputs, out, reference, first.device)
        launches = metal_host.plan(self.dispatch, inputs, outs)
        if backend_for(first.device) == "mps":
            lib = self._mps_library()
            for ln in launches:
                threads, group = mps_sizes(ln)
                getattr(lib, ln.kernel)(*ln.args, threads=threads, group_size=group)
                self.calls += 1
        else:
            prog = self._executor()
            for ln in launches:
                prog.launch(ln.kernel, ln.args, threadgroups=ln.threadgroups, threads=ln.threads)
                self.calls += 1
        return ret

    def _mps_library(self) -> Any:
        with self._lock:
            if self._lib is None:
                self._lib = torch.mps.compile_shader(self.source)
            return self._lib

    def _executor(self) -> Any:
        with self._lock:
            if self._emu is None:
                from targets.metal_exec import MetalProgram

                self._emu = MetalProgram(self.source)
            return self._emu

    def _outs(self, inputs: Sequence[Any], out: Any, reference: Callable[..., Any],
              device: torch.device) -> tuple[list[torch.Tensor], Any]:
        if out is not None:
            return ([out] if isinstance(out, torch.Tensor) else list(out)), out
        metas = tuple(t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs)
        with torch.no_grad():
            res = reference(*metas)
        single = isinstance(res, torch.Tensor)
        specs = [res] if single else list(res)
        outs = [torch.empty(tuple(r.shape), device=device,
                            dtype=metal_host.output_dtype(self.dispatch, j) or r.dtype)
                for j, r in enumerate(specs)]
        return outs, (outs[0] if single else tuple(outs))
