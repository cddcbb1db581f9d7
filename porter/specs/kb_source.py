"""What the KernelBench ingestion reads off a problem file and its model, without running it:
the size globals and their arithmetic, the model's structure and shape attributes, the globals a
function reads, and the source with its sizes rewritten (`porter.specs.kernelbench` uses them).
"""

from __future__ import annotations

import ast
import dis
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from porter.errors import SpecError


def structure(model: torch.nn.Module,
               reads: set[tuple[str, str]] | None = None) -> tuple[Any, ...]:
    """Plain (non-tensor) attributes of every submodule, plus parameter/buffer shapes.

    With `reads`, only the attributes in it ((submodule name, attribute) pairs) count.
    """
    skip = {"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"}
    follows = {(m, a): p for m, a, p in shape_attrs(model)}
    follows.update({(m, "num_features"): "the input" for m in input_size_attrs(model)})
    out: list[Any] = []
    for name, mod in model.named_modules():
        attrs = sorted((k, f"<shape of {follows[name, k]}>" if (name, k) in follows else repr(v))
                       for k, v in vars(mod).items()
                       if k not in skip and not k.startswith("_")
                       and not isinstance(v, torch.Tensor)
                       and (reads is None or (name, k) in reads))
        out.append((name, type(mod).__name__, tuple(attrs)))
    # Parameters are inputs of the reference (their sizes are traced symbolically): only their
    # names, ranks and dtypes describe the computation, not their sizes.
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    out.extend((n, t.dim(), t.dtype) for n, t in tensors)
    return tuple(out)


def shape_attrs(model: torch.nn.Module) -> list[tuple[str, str, str]]:
    """(submodule, attribute, parameter) for tuple attributes equal to an own parameter's shape.

    LayerNorm keeps ``normalized_shape == weight.shape``: such an attribute follows the sizes
    only through that parameter, which the reference receives as an input, so it is rebound
    from the passed tensor rather than baked in (see `KernelBenchProblem.reference`).
    """
    out = []
    for name, mod in model.named_modules():
        own = list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False))
        for k, v in vars(mod).items():
            if k.startswith("_") or not isinstance(v, tuple) or not v or \
                    not all(isinstance(d, int) for d in v):
                continue
            for pname, t in own:
                if tuple(t.shape) == v:
                    out.append((name, k, f"{name}.{pname}" if name else pname))
                    break
    return out


def input_size_attrs(model: torch.nn.Module) -> list[str]:
    """Submodules whose num_features the forward only compares with the input's channels: an
    InstanceNorm without affine weights or running stats (it warns on a mismatch; nothing
    else reads it). `KernelBenchProblem.reference` binds it to the input's size."""
    from torch.nn.modules.instancenorm import _InstanceNorm

    return [name for name, mod in model.named_modules() if isinstance(mod, _InstanceNorm)
            and not mod.affine and not mod.track_running_stats]


def bind_num_features(mod: Any, args: tuple[Any, ...]) -> None:
    # the input's feature dim, as the module's forward finds it (N, C, *S or C, *S)
    x = args[0]
    mod.num_features = x.shape[x.dim() - mod._get_no_batch_dim()]


def globals_read(code: types.CodeType) -> set[str]:
    """Global names a function (and the lambdas/comprehensions inside it) loads.

    Not ``co_names``: that also lists attribute names, so ``self.dim`` would look like a read
    of a size global ``dim`` (KernelBench's 24_LogSoftmax has both) and wrongly mark the model
    as size-dependent, which specializes the traced kernel to one size.
    """
    names = {ins.argval for ins in dis.get_instructions(code)
             if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= globals_read(const)
    return names


def keep_parity(target: int, original: int) -> int:
    is_pow2 = original > 0 and (original & (original - 1)) == 0
    return target if is_pow2 else (target | 1)


def shape_key(inputs: list[Any]) -> tuple[Any, ...]:
    # int(): under a symbolic tracer (codegen's make_fx) sizes are SymInts, which do not hash;
    # int() specializes them to the example's sizes, which is what picks the model anyway.
    return tuple(tuple(int(d) for d in x.shape) if isinstance(x, torch.Tensor) else repr(x)
                 for x in inputs)


def cast(x: Any, dtype: torch.dtype, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.to(device)
        return x.to(dtype) if x.is_floating_point() else x
    return x


def size_globals(path: Path, source: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Top-level ``name = <int>`` assignments, in file order (the last one wins for repeats)."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise SpecError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    found: dict[str, int] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                value = eval_int_expr(node.value, found)
            if value is None and isinstance(node.value, ast.Tuple):
                # `input_shape = (8192 * 2,)`: entries written as arithmetic are sizes too.
                entries = [eval_int_expr(e, found) for e in node.value.elts]
                value = tuple(entries) if entries and all(is_int(v) for v in entries) else None
            if isinstance(value, int) and not isinstance(value, bool):
                found[node.targets[0].id] = value
            elif isinstance(value, tuple) and value and all(is_int(v) for v in value):
                # A literal shape such as `input_shape = (32768,)`: each entry is a size.
                for i, v in enumerate(value):
                    found[f"{node.targets[0].id}[{i}]"] = v
    return tuple(found), tuple(found.values())


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def eval_int_expr(node: ast.expr, env: dict[str, int]) -> int | None:
    """Integer arithmetic over earlier size globals (``dim = 16384 * 2``); None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    arithmetic = (ast.Mult, ast.Add, ast.Sub, ast.FloorDiv, ast.Pow)
    if isinstance(node, ast.BinOp) and isinstance(node.op, arithmetic):
        a, b = eval_int_expr(node.left, env), eval_int_expr(node.right, env)
        if a is None or b is None:
            return None
        ops: dict[type, Callable[[int, int], int]] = {
            ast.Mult: lambda x, y: x * y, ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y,
            ast.FloorDiv: lambda x, y: x // y, ast.Pow: lambda x, y: x**y,
        }
        return ops[type(node.op)](a, b)
    return None


def rewrite_sizes(source: str, sizes: dict[str, int]) -> str:
    """The source with each size global's assigned value replaced; everything else as written."""
    tree = ast.parse(source)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            name = node.targets[0].id
            if name in sizes:
                node.value = ast.copy_location(ast.Constant(sizes[name]), node.value)
            elif isinstance(node.value, ast.Tuple) and f"{name}[0]" in sizes:
                node.value.elts = [
                    ast.copy_location(ast.Constant(sizes[f"{name}[{i}]"]), e)
                    if f"{name}[{i}]" in sizes else e
                    for i, e in enumerate(node.value.elts)
                ]
    return ast.unparse(tree)
