"""LayerNorm over the last dim with affine weights."""
import torch
import torch.nn as nn

BATCH, DIM = 16384, 4096


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM]
