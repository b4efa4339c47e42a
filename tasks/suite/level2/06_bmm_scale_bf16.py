"""Batched bf16 matmul, scale and tanh."""
import torch
import torch.nn as nn

B, M, N, K = 16, 2048, 2048, 512


class Model(nn.Module):
    def forward(self, a, b):
        return torch.tanh(torch.bmm(a, b) * 0.03125)


def get_inputs():
    return [torch.randn(B, M, K, dtype=torch.bfloat16), torch.randn(B, K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
