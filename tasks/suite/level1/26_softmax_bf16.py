"""Softmax in bf16 over rows of 32768."""
import torch
import torch.nn as nn

D0 = 4096
D1 = 32768


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(D0, D1, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
