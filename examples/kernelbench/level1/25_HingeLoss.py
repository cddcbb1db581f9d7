import torch
import torch.nn as nn


class Model(nn.Module):
    """Hinge loss for +-1 labels: mean of max(0, 1 - score * label)."""

    def __init__(self):
        super().__init__()

    def forward(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - scores * labels, min=0))


batch_size = 16384
input_shape = (8192,)


def get_inputs():
    scores = torch.randn(batch_size, *input_shape)
    # labels drawn from {-1, +1}, one per score
    labels = torch.randint(0, 2, (batch_size, *input_shape)).float() * 2 - 1
    return [scores, labels]


def get_init_inputs():
    return []
