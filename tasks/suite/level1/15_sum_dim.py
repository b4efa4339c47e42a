"""Sum over the last dim, keepdim."""
import torch
import torch.nn as nn

D0 = 16384
D1 = 8192


class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(D0, D1)]


def get_init_inputs():
    return []
