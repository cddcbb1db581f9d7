import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Huber (smooth L1) loss with the default threshold of 1, mean over all elements."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(predictions, targets)


batch_size = 16384
input_shape = (8192,)


def get_inputs():
    # differences of about +-2: both the quadratic and the linear branch are hit often
    predictions = torch.randn(batch_size, *input_shape) * 1.5
    targets = torch.randn(batch_size, *input_shape) * 1.5
    return [predictions, targets]


def get_init_inputs():
    return []
