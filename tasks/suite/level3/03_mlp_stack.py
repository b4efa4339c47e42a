import torch
import torch.nn as nn


class Model(nn.Module):
    """A three-layer MLP with GELU."""
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 1024))

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
