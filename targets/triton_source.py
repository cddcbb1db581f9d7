"""The Triton compiler's view of one kernel: its `ASTSource`, signature and hints.

Shared by the in-process compile path (`targets.triton_common`) and the clean compile child
(`targets.isolated`), which is why it lives in neither of them.
"""

from __future__ import annotations

from typing import Any

from targets.base import CompileError
from targets.base import KernelRef


def split_hint(type_str: str) -> tuple[str, int | None]:
    """"i32:16" -> ("i32", 16); "*fp32" -> ("*fp32", None)."""
    if ":" in type_str:
        base, hint = type_str.split(":", 1)
        try:
            return base, int(hint)
        except ValueError as exc:
            raise CompileError(f"bad divisibility hint in signature type {type_str!r}") from exc
    return type_str, None


def build_source(kernel: KernelRef) -> Any:
    """The `triton.compiler.ASTSource` for `kernel`: full signature, constexprs, hints.

    Triton 3.6 and 3.9 both want every argument in the signature, constexprs spelled
    "constexpr", constexpr values keyed by name, and hints as {(arg_index,): [["tt.divisibility",
    16]]}.

    Raises:
        CompileError: when the kernel is not a JITFunction or an argument has no type/value.
    """
    from triton.compiler import ASTSource

    signature, attrs = source_signature(kernel)
    return ASTSource(
        fn=kernel.fn, signature=signature, constexprs=dict(kernel.constexprs), attrs=attrs
    )


def source_signature(
    kernel: KernelRef,
) -> tuple[dict[str, str], dict[tuple[int, ...], list[list[Any]]]]:
    """The ASTSource signature and hint attrs for `kernel`, checked against its arguments.

    Needs only the function's `arg_names`, so it also checks a kernel that was decorated under
    the interpreter (before it is compiled in a clean process).

    Raises:
        CompileError: when the kernel is not a @triton.jit function or an argument has no
            type/value, or a type/value names an argument the kernel does not have.
    """
    fn = kernel.fn
    arg_names = getattr(fn, "arg_names", None)
    if arg_names is None:
        raise CompileError(f"kernel {kernel.name!r}: fn is not a @triton.jit function ({fn!r})")
    signature: dict[str, str] = {}
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    missing: list[str] = []
    for index, name in enumerate(arg_names):
        if name in kernel.constexprs:
            signature[name] = "constexpr"
            continue
        if name not in kernel.signature:
            missing.append(name)
            continue
        base, hint = split_hint(kernel.signature[name])
        if hint is None and base.startswith("*"):
            hint = 16
        signature[name] = base
        if hint == 16:
            attrs[(index,)] = [["tt.divisibility", 16]]
    if missing:
        raise CompileError(
            f"kernel {kernel.name!r}: no type or constexpr value for argument(s) "
            f"{', '.join(missing)} (signature has {sorted(kernel.signature)}, constexprs "
            f"{sorted(kernel.constexprs)})"
        )
    extra = sorted(set(kernel.signature) | set(kernel.constexprs))
    unknown = [n for n in extra if n not in arg_names]
    if unknown:
        raise CompileError(
            f"kernel {kernel.name!r} has no argument(s) {', '.join(unknown)}; its arguments are "
            f"{', '.join(arg_names)}"
        )
    return signature, attrs
