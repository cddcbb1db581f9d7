"""What the model is shown about the op: the reference, its inputs, and a kernel to port.

Three kinds of input reach the LLM roles through one spec file:

- a spec or KernelBench file alone: the PyTorch reference is the meaning;
- a spec with `TRITON_KERNEL = "kernel.py::name"`: an existing Triton kernel to port;
- a spec with `CUDA_KERNEL = "kernel.cu::name"` and `CUDA_SIGNATURE = "void name(...)"`: an
  existing CUDA C++ kernel to port to Triton (NVIDIA, AMD) and to Metal (Apple). The .cu file is
  read, never compiled here.

`op_context(spec)` is the `op` variable of every prompt template; it is plain data (strings,
lists), so the same spec gives the same bytes.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import torch

from porter.errors import SpecError

_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                torch.float64: "fp64"}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def literal_names(path: Path) -> dict[str, Any]:
    """The top-level `NAME = <literal>` assignments of a Python file (not imported)."""
    out: dict[str, Any] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def existing_kernel(spec: Any) -> dict[str, Any] | None:
    """The kernel the spec brings to port: {"language", "source", "name", "signature", "fence"}.

    Raises:
        SpecError: CUDA_KERNEL names a missing file or has no "file::name" form, or comes
            without CUDA_SIGNATURE.
    """
    path = Path(spec.path) if spec.path is not None else None
    if path is None:
        return None
    names = literal_names(path)
    if "CUDA_KERNEL" in names:
        ref = str(names["CUDA_KERNEL"])
        if "::" not in ref:
            raise SpecError(path, f"CUDA_KERNEL = {ref!r}: expected 'file.cu::kernel_name'")
        file, name = ref.split("::", 1)
        cu = (path.parent / file).resolve()
        if not cu.is_file():
            raise SpecError(path, f"CUDA_KERNEL: {cu} does not exist")
        signature = names.get("CUDA_SIGNATURE")
        if not signature:
            raise SpecError(path, "CUDA_KERNEL given without CUDA_SIGNATURE",
                            "e.g. CUDA_SIGNATURE = \"void cumsum_rows(const float* x, float* y, "
                            "int n_rows, int n_cols)\" with the launch in a comment")
        return {"language": "CUDA C++", "source": cu.read_text().rstrip("\n"), "name": name,
                "signature": str(signature), "fence": "cuda", "file": file}
    if spec.triton_kernel is not None and "TRITON_KERNEL" in names:
        file = str(names["TRITON_KERNEL"]).split("::", 1)[0]
        src = (path.parent / file).resolve()
        return {"language": "Triton", "source": src.read_text().rstrip("\n"),
                "name": spec.triton_kernel.name, "signature": names.get("TRITON_LAUNCHER", ""),
                "fence": "python", "file": file}
    return None


def op_context(spec: Any) -> dict[str, Any]:
    """The `op` variable of the prompt templates (see porter/prompts/_context.j2)."""
    gen = torch.Generator().manual_seed(0)
    dtype = spec.dtypes[0]
    inputs = spec.make_inputs(tuple(spec.smoke_shape), dtype, torch.device("cpu"), gen)
    with torch.no_grad():
        out = spec.reference(*inputs)
    reference = (Path(spec.path).read_text(encoding="utf-8").rstrip("\n")
                 if spec.path is not None else "")
    return {
        "name": spec.name,
        "description": (spec.description or "").strip(),
        "source_kind": spec.source_kind,
        "reference_source": reference,
        "example_shape": tuple(spec.smoke_shape),
        "dtype": dtype_name(dtype),
        "dtypes": ", ".join(dtype_name(d) for d in spec.dtypes),
        "inputs": ", ".join(_describe(x) for x in inputs),
        "output": ", ".join(_describe(o) for o in (out if isinstance(out, tuple) else (out,))),
        "shapes": ", ".join(str(tuple(s)) for s in spec.shapes),
        "existing": existing_kernel(spec),
    }


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{dtype_name(x.dtype)}[{', '.join(str(d) for d in x.shape)}]"
    return f"{type(x).__name__} {x!r}"
