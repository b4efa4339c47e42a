"""Matmul, sigmoid, scale and add a residual."""
import torch
import torch.nn as nn

M, N, K = 4096, 4096, 1024


class Model(nn.Module):
    def forward(self, a, b):
        return torch.sigmoid(torch.matmul(a, b)) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
