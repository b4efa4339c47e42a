"""Subtract the row mean, then divide by the row std (population)."""
import torch
import torch.nn as nn

SHAPE = (16384, 4096)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        m = x.mean(dim=-1, keepdim=True)
        v = ((x - m) ** 2).mean(dim=-1, keepdim=True)
        return (x - m) / torch.sqrt(v + 1e-5)


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return []
