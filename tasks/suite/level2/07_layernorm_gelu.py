"""LayerNorm then GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPE = (16384, 4096)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return F.gelu(self.ln(x))


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return [4096]
