"""Mean over the middle dim of a 3-d tensor (strided reduction)."""
import torch
import torch.nn as nn

D0 = 64
D1 = 1024
D2 = 2048


class Model(nn.Module):
    def forward(self, x):
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(D0, D1, D2)]


def get_init_inputs():
    return []
