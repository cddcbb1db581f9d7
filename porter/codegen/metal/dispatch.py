"""A Metal kernel's buffers in order (`Signature`) and its dispatch description: what a host
needs to run it, embedded in the source as one `// porter-dispatch: {json}` line and read by
`targets.metal_host`."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

import torch

from porter.codegen.kernel_args import KernelArgs
from porter.codegen.metal.config import MetalConfig
from porter.codegen.spellings import METAL_DTYPE

if TYPE_CHECKING:
    from porter.codegen.op import GeneratedOp

DISPATCH_FORMAT = "porter-metal-dispatch/1"


def _elem_type(kind: str, io: torch.dtype, op: GeneratedOp) -> str | None:
    if kind.startswith("ptr:in"):
        dt = op.example_inputs[int(kind[6:])].dtype
        return METAL_DTYPE[io if dt.is_floating_point else dt]
    if kind.startswith("ptr:out"):
        dt = op.graph.outputs[int(kind[7:])].dtype
        return METAL_DTYPE[io if dt.is_floating_point else dt]
    if kind.startswith("ptr:tmp"):
        return "float"
    return None


class Signature:
    """The kernel's buffers in order: declarations, scalar locals, and the dispatch entries."""

    def __init__(self, op: GeneratedOp, io: torch.dtype) -> None:
        self.op, self.io = op, io
        self.params: list[str] = []
        self.scalar_lines: list[str] = []
        self.buffers: list[dict[str, Any]] = []

    def from_args(self, args: KernelArgs) -> None:
        for name, kind, expr in zip(args.params, args.kinds, args.launch_exprs, strict=True):
            t = _elem_type(kind, self.io, self.op)
            if t is None:
                self.scalar(name, expr)
                continue
            label = kind.split(":")[1]
            const = "const " if label.startswith("in") else ""
            self.params.append(f"device {const}{t}* {label}")
            entry: dict[str, Any] = {"name": label, "type": t}
            if label.startswith("in"):
                entry.update(role="input", arg=int(label[2:]))
            elif label.startswith("out"):
                entry.update(role="output", out=int(label[3:]))
            else:
                entry.update(role="tmp", tmp=int(label[3:]), count="n_rows")
            self.buffers.append(entry)

    def scalar(self, name: str, expr: str) -> None:
        """A `constant long&` buffer, copied into an idx_t local of the same name."""
        self.params.append(f"constant long& {name}_")
        self.scalar_lines.append(f"const idx_t {name} = (idx_t){name}_;")
        self.buffers.append({"name": name, "role": "scalar", "type": "long", "expr": expr})


def make_dispatch(kname: str, sig: Signature, cfg: MetalConfig, io: torch.dtype, *,
                  sizes: dict[str, str], grid: str, threads: int,
                  post: bool = False) -> dict[str, Any]:
    """What a host needs to run the kernel: see targets.metal_host for how it is read."""
    launches = [{"kernel": kname, "threadgroups": [grid, "1", "1"], "threads": [threads, 1, 1]}]
    if post:
        launches.append({"kernel": kname + "_post", "threadgroups": ["1", "1", "1"],
                         "threads": [threads, 1, 1]})
    return {
        "format": DISPATCH_FORMAT,
        "kernel": kname,
        "io_dtype": {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[io],
        "buffers": [dict(b, index=i) for i, b in enumerate(sig.buffers)],
        "sizes": sizes,
        "launches": launches,
        "index_bits": cfg.index_bits,
        "config": {"threads": cfg.threads, "rows": cfg.rows, "vec": cfg.vec,
                   "index": f"i{cfg.index_bits}"},
    }

