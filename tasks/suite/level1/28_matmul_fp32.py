"""Square fp32 matmul, 4096 (no TF32)."""
import torch
import torch.nn as nn

M = N = K = 4096


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
