import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.LayerNorm over the three trailing dims, with its learned weight and bias."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


batch_size = 32
features = 48
dim1 = 224
dim2 = 224


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]
