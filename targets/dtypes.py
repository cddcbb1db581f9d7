"""Dtype names: the one owner of the short names ("fp32", "fp16", "bf16", ...) used in plans,
ledgers, manifests, hardware-model peaks, CLI flags and Triton signatures.

torch is imported only when a function needs it, so importing this module stays cheap.
"""

from __future__ import annotations

from typing import Any

# short name -> torch attribute; the first spelling of each dtype is its name
NAMES: dict[str, str] = {
    "fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64",
    "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "u8": "uint8", "i1": "bool",
}
# other spellings a user or a file may use
ALIASES: dict[str, str] = {
    "float32": "fp32", "float": "fp32", "f32": "fp32", "float16": "fp16", "half": "fp16",
    "f16": "fp16", "bfloat16": "bf16", "float64": "fp64", "double": "fp64",
    "int64": "i64", "long": "i64", "int32": "i32", "int": "i32", "int16": "i16", "int8": "i8",
    "uint8": "u8", "bool": "i1", "fp8": "fp8e4nv",
}
FLOAT_NAMES = ("fp32", "fp16", "bf16")  # what kernels are tuned for


def canonical(name: str) -> str:
    """"bfloat16", "torch.bfloat16", "BF16" -> "bf16".

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    key = name.strip().lower().removeprefix("torch.")
    key = ALIASES.get(key, key)
    if key not in NAMES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(NAMES)}")
    return key


def dtype_name(dtype: Any) -> str:
    """torch.bfloat16 -> "bf16"; a name is returned canonical; anything else its str()."""
    if isinstance(dtype, str):
        return canonical(dtype)
    text = str(dtype).removeprefix("torch.")
    for name, attr in NAMES.items():
        if attr == text:
            return name
    return str(dtype)


def torch_dtype(name: Any) -> Any:
    """"bf16" (or any alias, or a torch dtype) -> torch.bfloat16.

    Raises:
        ValueError: an unknown name.
    """
    import torch

    if isinstance(name, torch.dtype):
        return name
    return getattr(torch, NAMES[canonical(str(name))])
