"""Errors raised by template code generation."""

from __future__ import annotations

from porter.errors import PorterError


class UnsupportedOpError(PorterError):
    """The traced reference uses an op (or a pattern) that no template covers.

    Attributes:
        op: the aten op name (e.g. "aten._fft_c2c.default") or the pattern that is not covered.
        why: what is missing and what would be needed.
    """

    def __init__(self, op: str, why: str) -> None:
        self.op = op
        self.why = why
        super().__init__(
            f"no code-generation template covers {op}: {why}. "
            "Rewrite the reference with supported ops, supply an existing Triton kernel in the "
            "op spec, or configure an LLM."
        )
