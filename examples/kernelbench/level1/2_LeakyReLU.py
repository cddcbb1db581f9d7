import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Leaky ReLU: negative entries are scaled by a small slope instead of zeroed."""

    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    # a slope other than the PyTorch default, so a kernel that ignores the argument is caught
    return [0.05]
