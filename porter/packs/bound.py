"""A pack call bound to its compiled kernels: later calls cost a launch, not a launcher.

A generated launcher validates its inputs, allocates, derives a config and launches through
Triton's JIT (`kernel[grid](...)`), which binds and specializes its arguments on every call: on
an H200 a pack call cost 60 us of CPU where eager `F.rms_norm` cost 17 (issue 46). For one
(device, shapes, strides, dtypes, alignment, scalars) all of that gives the same answer every
time, so the loader records what a call did and replays it:

- `record(fn)` runs one call of the launcher with Triton's `JITFunction.run` watched on this
  thread (each launch's compiled kernel, grid and bound arguments) and torch's dispatcher watched
  (every aten op the call ran, and each tensor it allocated).
- `plan(recording, inputs, out)` says what the call did without holding its tensors, and
  `same(a, b)` whether two consecutive calls' plans match. The loader binds (`BoundCall`) only
  when they did the same thing: the same compiled kernels, grids and scalar arguments, every
  tensor argument a view into an input, an `out` tensor or a tensor the call allocated
  uninitialized (an output or scratch: `torch.empty` carries no values, so a fresh one per
  replay is the same), and no aten op but allocations and views. Anything else (a scalar that
  changes per call, such as the row-wise fold's stamp; a `torch.zeros`; a copy; a launch only
  one of the calls made, as an autotuner's benchmarking) leaves the call on the launcher, with
  the reason kept for `describe()`.
- `BoundCall(inputs, out)` allocates the outputs and scratch afresh and calls each compiled
  kernel's launcher (`CompiledKernel.run`, what `JITFunction.run` ends in) with the recorded
  arguments, the tensors' addresses swapped in: the same kernels, grids and arguments the
  launcher would have used, on the current stream.

What a replay skips is only Python that would have computed the same values: it is correct for
exactly the key the loader files it under (porter.packs.loader.call_key), which holds every
tensor's shape, strides, dtype, device and 16-byte alignment (Triton specializes on it) and every
other argument's value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that only allocate, uninitialized: a replay allocates afresh
_ALLOCATING = frozenset({"empty", "empty_strided", "empty_like", "new_empty",
                         "new_empty_strided"})
_recording = threading.local()
_patch_lock = threading.Lock()


@dataclass
class Launch:
    """One kernel launch as Triton's JIT made it, and as the launcher asked for it."""

    kernel: Any  # triton.compiler.CompiledKernel
    grid: tuple[int, int, int]
    args: list[Any]  # bound arguments in the kernel's signature order (constexprs included)
    jit_fn: Any  # the JITFunction launched, and what it was given: `jit_fn[call_grid](...)`
    call_grid: Any
    call_args: tuple[Any, ...]
    call_kwargs: dict[str, Any]


@dataclass
class Recording:
    """What one call did: its launches, the tensors it allocated, and any other aten op."""

    launches: list[Launch] = field(default_factory=list)
    allocations: list[torch.Tensor] = field(default_factory=list)
    foreign_ops: list[str] = field(default_factory=list)  # aten ops other than views/allocations
    result: Any = None


class _Watch(TorchDispatchMode):
    """Notes every aten op a call runs, and keeps the tensors it allocates."""

    def __init__(self, rec: Recording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in _ALLOCATING and isinstance(out, torch.Tensor):
            self.rec.allocations.append(out)
        elif not func.is_view:
            self.rec.foreign_ops.append(str(func))
        return out


def record(fn: Callable[[], Any]) -> Recording:
    """Run `fn()` (one launcher call) and note what it did; its result is `.result`.

    Raises whatever `fn` raises. The watch on Triton's JIT is this thread's alone: another
    thread's launches meanwhile go through untouched and unrecorded.
    """
    from triton.runtime.jit import JITFunction

    rec = Recording()
    with _patch_lock:
        # Patched for the duration of one call (the first calls of a key only), never left in
        # place: every other Triton launch in the process keeps Triton's own cost.
        original = JITFunction.run

        def watched(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            kernel = original(self, *args, grid=grid, warmup=warmup, **kwargs)
            target = getattr(_recording, "rec", None)
            if target is not None and not warmup:
                target.launches.append(_launch_of(self, kernel, args, kwargs, grid))
            return kernel

        JITFunction.run = watched
        _recording.rec = rec
        try:
            with _Watch(rec):
                rec.result = fn()
        finally:
            _recording.rec = None
            JITFunction.run = original
    return rec


def _launch_of(jit_fn: Any, kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               grid: Any) -> Launch:
    """The launch as `JITFunction.run` made it: every parameter bound, defaults applied, in the
    signature's order (what it passes `CompiledKernel.run`), and the grid as three ints."""
    params = jit_fn.signature.parameters
    bound = jit_fn.signature.bind(*args, **{k: v for k, v in kwargs.items() if k in params})
    bound.apply_defaults()
    g = grid(dict(bound.arguments)) if callable(grid) else grid
    g = tuple(int(x) for x in g) + (1, 1)
    return Launch(kernel, (g[0], g[1], g[2]), list(bound.arguments.values()), jit_fn, grid,
                  args, kwargs)


# A pointer argument's source: ("in", index, byte offset), ("out", ...) or ("alloc", ...).
_Slot = tuple[int, str, int, int]  # (argument position, source kind, source index, byte offset)


@dataclass(frozen=True)
class Plan:
    """What a call launched, with its tensors replaced by where they come from."""

    kernels: tuple[Any, ...]
    grids: tuple[tuple[int, int, int], ...]
    args: tuple[tuple[Any, ...], ...]  # per launch, tensors replaced by None
    slots: tuple[tuple[_Slot, ...], ...]  # per launch
    allocs: tuple[tuple[tuple[int, ...], torch.dtype], ...]  # (shape, dtype) per allocation
    results: tuple[int, ...]  # the allocation each returned tensor is (out=None)
    tuple_result: bool
    # per allocation, a contiguous input of its shape and dtype (the call key holds its strides),
    # else None: `torch.empty_like` of it costs 3.3 us of CPU where `torch.empty(shape, ...)`
    # costs 5.1 (H200 host, torch 2.11)
    like: tuple[int | None, ...] = ()


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] of a tensor's elements."""
    lo = t.data_ptr()
    if t.numel() == 0:
        return lo, lo
    extent = sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride(), strict=True))
    return lo, lo + (extent + 1) * t.element_size()


def _source(t: torch.Tensor, pools: list[tuple[str, list[Any]]]) -> tuple[str, int, int] | None:
    """Which pool tensor `t` lies inside (a view of an input, an out tensor or an allocation):
    (pool, index, byte offset), else None."""
    lo, hi = _span(t)
    for kind, tensors in pools:
        for i, u in enumerate(tensors):
            if not isinstance(u, torch.Tensor) or u.device != t.device:
                continue
            ulo, uhi = _span(u)
            if ulo <= lo and hi <= uhi and (lo < uhi or lo == ulo):
                return kind, i, lo - ulo
    return None


def _holds_tensor(a: Any) -> bool:
    """An argument that is not a tensor but carries one (Triton's host `TensorDescriptor` keeps
    its `base` tensor), or a tuple/list of such."""
    if isinstance(a, (tuple, list)):
        return any(isinstance(x, torch.Tensor) or _holds_tensor(x) for x in a)
    return any(isinstance(v, torch.Tensor) for v in getattr(a, "__dict__", {}).values())


def plan(rec: Recording, inputs: tuple[Any, ...], out: Any) -> Plan | str:
    """The replayable form of a recorded call (`inputs`/`out` are that call's), holding no
    tensor; or why it has none."""
    if rec.foreign_ops:
        return f"the launcher ran {rec.foreign_ops[0]}, which a replay would skip"
    if not rec.launches:
        return "the call launched no Triton kernel"
    ins = [t for t in inputs if isinstance(t, torch.Tensor)]
    outs = [] if out is None else ([out] if isinstance(out, torch.Tensor) else list(out))
    # "in" indexes the inputs as passed (the replay takes them as they come)
    pools: list[tuple[str, list[Any]]] = [("in", list(inputs)), ("out", outs),
                                          ("alloc", rec.allocations)]
    for i, a in enumerate(ins):
        for b in ins[i + 1:] + outs:
            (alo, ahi), (blo, bhi) = _span(a), _span(b)
            if a.numel() and b.numel() and alo < bhi and blo < ahi:
                return "two of the call's tensors overlap in memory"
    args, slots = [], []
    for launch in rec.launches:
        fixed, where = [], []
        for pos, a in enumerate(launch.args):
            if isinstance(a, torch.Tensor):
                src = _source(a, pools)
                if src is None:
                    return (f"argument {pos} of {launch.kernel.name} is a tensor the call neither "
                            "received nor allocated")
                where.append((pos, *src))
                fixed.append(None)
            elif _holds_tensor(a):
                # A host TMA descriptor names its tensor's address inside; kept as a fixed
                # argument, a replay would read the recorded call's tensors (and `same` would
                # call two calls alike wherever they passed the same tensor objects).
                return (f"argument {pos} of {launch.kernel.name} is a {type(a).__name__} that "
                        "holds a tensor (a TMA descriptor), which a replay cannot swap")
            else:
                fixed.append(a)
        args.append(tuple(fixed))
        slots.append(tuple(where))
    got = rec.result
    tuple_result = isinstance(got, (tuple, list))
    returned = list(got) if tuple_result else [got]
    results: list[int] = []
    if out is None:
        for r in returned:
            k = next((i for i, u in enumerate(rec.allocations)
                      if isinstance(r, torch.Tensor) and r.data_ptr() == u.data_ptr()
                      and r.is_contiguous() and r.numel() == u.numel() and r.dtype == u.dtype),
                     None)
            if k is None:
                return "the call returned a tensor that is not one it allocated whole"
            results.append(k)
    written = {(kind, i) for s in slots for _, kind, i, _ in s}
    if any(("alloc", k) not in written for k in results):
        return "the call returned a tensor no kernel wrote"
    # a returned allocation is made in the shape it is returned in (a contiguous view of all of
    # it: the kernels see only its address); scratch flat
    allocs = tuple((tuple(returned[results.index(k)].shape) if k in results else (u.numel(),),
                    u.dtype) for k, u in enumerate(rec.allocations))
    like = tuple(next((i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)
                       and tuple(t.shape) == shape and t.dtype == dtype and t.is_contiguous()),
                      None) for shape, dtype in allocs)
    return Plan(tuple(x.kernel for x in rec.launches), tuple(x.grid for x in rec.launches),
                 tuple(args), tuple(slots), allocs, tuple(results), tuple_result, like)


def same(a: Plan, b: Plan) -> bool:
    """Whether two calls' plans launched the same kernels, grids and scalars, with the same
    tensors in the same places: then replaying either is what the launcher does."""
    if (len(a.kernels) != len(b.kernels)
            or any(x is not y for x, y in zip(a.kernels, b.kernels, strict=True))
            or a.grids != b.grids or a.slots != b.slots
            or a.allocs != b.allocs or a.results != b.results):
        return False
    for xs, ys in zip(a.args, b.args, strict=True):
        for x, y in zip(xs, ys, strict=True):
            if type(x) is not type(y):
                return False
            try:
                if not bool(x == y):
                    return False
            except Exception:  # noqa: BLE001 - an argument that cannot be compared is not bound
                return False
    return True


class BoundCall:
    """Replays a bound call: fresh outputs and scratch, then each compiled kernel's launcher.

    The replay is one straight-line function written for the plan when it is bound (as Triton
    writes its own argument binder): the allocations, the current stream, and one launcher call
    per kernel with the constants in place and each tensor argument's address read from the
    call's own tensors. A Triton launch hook (a profiler such as proton) turns the replay to the
    general path, which gives the hook what Triton's JIT would.
    """

    def __init__(self, plan: Plan, device: torch.device, *, config: Any = None,
                 stream: Callable[[int | None], Any] | None = None) -> None:
        """`config`: what the launcher was given (for describe() and benchmarks); `stream`:
        the current stream of a device index (default Triton's driver's)."""
        from triton import knobs

        self.plan = plan
        self.device = device
        self.config = config
        self._knobs = knobs.runtime
        if stream is None:
            from triton.runtime import driver

            stream = driver.active.get_current_stream
        self._stream = stream
        self._launches = [
            (k.run, g, k.function, k.packed_metadata, args, s, k)
            for k, g, args, s in zip(plan.kernels, plan.grids, plan.args, plan.slots, strict=True)
        ]
        self.n_kernels = len(plan.kernels)
        self.replay = self._straight_line()

    def __call__(self, inputs: tuple[Any, ...], out: Any = None) -> Any:
        return self.replay(inputs, out)

    def _straight_line(self) -> Callable[[tuple[Any, ...], Any], Any]:
        plan = self.plan
        ns: dict[str, Any] = {"empty": torch.empty, "stream_of": self._stream,
                              "DEV": self.device, "IDX": self.device.index,
                              "general": self._general, "KNOBS": self._knobs}
        enter = self._knobs.launch_enter_hook
        if hasattr(enter, "calls"):  # a HookChain (Triton 3.5+): its list is added to in place
            ns["HOOKS"] = enter.calls
            lines = ["def replay(inputs, out):", "    if HOOKS:",
                     "        return general(inputs, out)"]
        else:
            lines = ["def replay(inputs, out):", "    if KNOBS.launch_enter_hook is not None:",
                     "        return general(inputs, out)"]
        ns["empty_like"] = torch.empty_like
        for k, (shape, dtype) in enumerate(plan.allocs):
            ns[f"S{k}"], ns[f"D{k}"] = shape, dtype
            like = plan.like[k] if k < len(plan.like) else None
            lines.append(f"    a{k} = empty_like(inputs[{like}])" if like is not None else
                         f"    a{k} = empty(S{k}, dtype=D{k}, device=DEV)")
        if any(kind == "out" for launch in plan.slots for _, kind, _, _ in launch):
            lines.append("    outs = (out,) if isinstance(out, Tensor) else out")
            ns["Tensor"] = torch.Tensor
        lines.append("    s = stream_of(IDX)")
        for j, (run, grid, function, meta, recorded, slots, _) in enumerate(self._launches):
            ns[f"run{j}"], ns[f"F{j}"], ns[f"M{j}"] = run, function, meta
            where = {pos: (kind, i, offset) for pos, kind, i, offset in slots}
            exprs = []
            for pos, a in enumerate(recorded):
                if pos in where:
                    kind, i, offset = where[pos]
                    src = {"in": f"inputs[{i}]", "out": f"outs[{i}]", "alloc": f"a{i}"}[kind]
                    exprs.append(f"{src}.data_ptr()" + (f" + {offset}" if offset else ""))
                else:
                    ns[f"c{j}_{pos}"] = a
                    exprs.append(f"c{j}_{pos}")
            lines.append(f"    run{j}({grid[0]}, {grid[1]}, {grid[2]}, s, F{j}, M{j}, None, None, "
                         f"None, {', '.join(exprs)})")
        if any(kind == "out" for launch in plan.slots for _, kind, _, _ in launch) or \
                not plan.results:
            lines.append("    return out")
        elif plan.tuple_result:
            lines.append(f"    return ({', '.join(f'a{k}' for k in plan.results)},)")
        else:
            lines.append(f"    return a{plan.results[0]}")
        exec(compile("\n".join(lines), "<porter bound call>", "exec"), ns)  # noqa: S102
        return ns["replay"]

    def _general(self, inputs: tuple[Any, ...], out: Any = None) -> Any:
        """The replay where a launch hook listens: each launch as Triton's JIT makes it."""
        plan = self.plan
        dev = self.device
        allocs = [torch.empty(shape, dtype=dtype, device=dev) for shape, dtype in plan.allocs]
        pools = {"alloc": allocs, "in": inputs}
        if out is not None:
            pools["out"] = [out] if isinstance(out, torch.Tensor) else list(out)
        stream = self._stream(dev.index)
        enter, leave = self._knobs.launch_enter_hook, self._knobs.launch_exit_hook
        for run, grid, function, meta, recorded, slots, kernel in self._launches:
            args = list(recorded)
            for pos, kind, i, offset in slots:
                args[pos] = pools[kind][i].data_ptr() + offset
            run(grid[0], grid[1], grid[2], stream, function, meta,
                kernel.launch_metadata(grid, stream, *args), enter, leave, *args)
        if out is not None:
            return out
        results = [allocs[k] for k in plan.results]
        return tuple(results) if plan.tuple_result else results[0]


def call_times(kernel: Callable[..., Any], reference: Callable[..., Any],
               args: tuple[Any, ...]) -> dict[str, Any]:
    """The call times (harness.timing.call_time, microseconds) of `kernel(*args)` as the pack's
    loader calls it once bound (two calls recorded, then the compiled kernels launched
    directly) and of eager `reference(*args)`: "call_us", "cpu_us", "eager_call_us",
    "eager_cpu_us", and "call_path" (how the kernel was called). Needs a GPU."""
    from harness.timing import call_time

    plans = [plan(record(lambda: kernel(*args)), args, None) for _ in range(2)]
    first, second = plans
    if isinstance(first, str) or isinstance(second, str) or not same(first, second):
        why = next((x for x in plans if isinstance(x, str)), "two calls launched differently")
        fn, path = (lambda: kernel(*args)), f"through the launcher ({why})"
    else:
        device = next(t for t in args if isinstance(t, torch.Tensor)).device
        runner = BoundCall(second, device)
        fn, path = (lambda: runner(args, None)), "bound launch"
    ours, eager = call_time(fn, ()), call_time(lambda: reference(*args), ())
    return {"call_us": round(ours.call_us, 2), "cpu_us": round(ours.cpu_us, 2),
            "eager_call_us": round(eager.call_us, 2), "eager_cpu_us": round(eager.cpu_us, 2),
            "call_path": path}
