"""Tall-skinny fp32 matmul (M large, N small)."""
import torch
import torch.nn as nn

M, N, K = 65536, 64, 1024


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
