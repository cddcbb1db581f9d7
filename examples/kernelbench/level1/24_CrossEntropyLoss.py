import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Cross-entropy of raw logits against integer class labels, mean over the batch."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels)


batch_size = 8192
num_classes = 32000
input_shape = (num_classes,)


def get_inputs():
    logits = torch.randn(batch_size, *input_shape)
    labels = torch.randint(0, num_classes, (batch_size,))
    return [logits, labels]


def get_init_inputs():
    return []
