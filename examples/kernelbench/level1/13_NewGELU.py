import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """GELU in the tanh approximation used by GPT-2 style models (minGPT calls it NewGELU).

    Written out term by term rather than through F.gelu(approximate="tanh"), the way such
    models spell it in their own source.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = math.sqrt(2.0 / math.pi)
        inner = k * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


batch_size = 8192
dim = 131072


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
