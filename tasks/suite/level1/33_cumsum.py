"""Cumulative sum over rows (outside the expert's families today)."""
import torch
import torch.nn as nn

D0 = 8192
D1 = 8192


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.randn(D0, D1)]


def get_init_inputs():
    return []
