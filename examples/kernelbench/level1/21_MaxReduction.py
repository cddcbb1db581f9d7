import torch
import torch.nn as nn


class Model(nn.Module):
    """Largest value along one axis (chosen at construction); values only, no indices."""

    def __init__(self, axis: int):
        super().__init__()
        self.axis = axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=self.axis)


batch_size = 64
dim1 = 4095
dim2 = 4096
reduce_axis = 1


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_axis]
