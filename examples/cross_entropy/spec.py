"""Cross-entropy loss over the classes of each row, mean over rows (fp32 result)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "cross_entropy"
# rows x vocabulary: issue 5's sweep, then Llama-2 (32000) and Llama-3 (128256) vocabularies.
SHAPES = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768),
          (4096, 32000), (2048, 128256)]
INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target)


def make_inputs(shape, dtype, device, generator):
    rows, classes = shape
    logits = (4.0 * torch.randn(rows, classes, generator=generator, device=device)).to(dtype)
    target = torch.randint(0, classes, (rows,), generator=generator, device=device)
    return (logits, target)


def BYTES(inputs, outputs) -> int:
    logits, target = inputs
    return logits.numel() * logits.element_size() + target.numel() * target.element_size() + 4


def FLOPS(inputs, outputs) -> int:
    return 4 * inputs[0].numel()
