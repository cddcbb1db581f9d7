import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over one axis (chosen at construction), keeping it as a size-1 axis."""

    def __init__(self, axis: int):
        super().__init__()
        self.axis = axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.axis, keepdim=True)


batch_size = 64
dim1 = 4096
dim2 = 4095
reduce_axis = 1  # the middle axis: strided, not contiguous


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_axis]
