"""Min over dim 1 of a 3-d tensor."""
import torch
import torch.nn as nn

D0 = 128
D1 = 256
D2 = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.min(x, dim=1)[0]


def get_inputs():
    return [torch.randn(D0, D1, D2)]


def get_init_inputs():
    return []
