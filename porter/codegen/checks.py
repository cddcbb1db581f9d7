"""Static checks on generated sources (the code-side twin of the templates' output contract)."""

from __future__ import annotations

import ast

# torch attributes a launcher may touch: allocation, dtypes, type checks, the current stream
# (`cuda`: a fold's words are kept per stream). Nothing that computes.
ALLOWED_TORCH = {"empty", "empty_like", "empty_strided", "zeros", "cuda", "float32", "float16",
                 "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool", "Tensor",
                 "dtype", "device", "Size",
                 "version"}  # torch.version.hip: which GPU vendor the launcher runs on
# Tensor methods that only read metadata or make views.
ALLOWED_METHODS = {"stride", "numel", "element_size", "is_contiguous", "dim", "size", "view",
                   "data_ptr", "get", "items", "append", "__getitem__"}
MATH_METHODS = {"sum", "mean", "exp", "log", "softmax", "log_softmax", "max", "min", "amax",
                "amin", "matmul", "mm", "addmm", "bmm", "add", "sub", "mul", "div", "sqrt",
                "rsqrt", "pow", "tanh", "sigmoid", "relu", "gelu", "norm", "var", "std", "to",
                "float", "half", "bfloat16", "clone", "copy_", "contiguous", "gather", "cat",
                "where", "clamp", "neg", "abs", "erf", "cumsum", "prod", "argmax", "topk",
                "index_select", "scatter", "fill_", "zero_", "copy"}


def torch_math_calls(source: str) -> list[str]:
    """Torch compute a generated module's host code would run (empty list = clean).

    Flags any `torch.X` outside ALLOWED_TORCH, `torch.nn`/`F` use, and method calls that compute
    (`.sum()`, `.to()`, `.float()`, ...) outside `@triton.jit` kernels.
    """
    tree = ast.parse(source)
    found: list[str] = []
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and any(
                "jit" in ast.unparse(d) for d in fn.decorator_list):
            continue  # kernel bodies are Triton, not torch
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "torch" and node.attr not in ALLOWED_TORCH:
                    found.append(f"line {node.lineno}: torch.{node.attr}")
                if node.value.id in ("F", "nn"):
                    found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                base = node.func.value
                is_module = isinstance(base, ast.Name) and base.id in ("triton", "tl", "math")
                if node.func.attr in MATH_METHODS and not is_module:
                    found.append(f"line {node.lineno}: .{node.func.attr}()")
    return found
