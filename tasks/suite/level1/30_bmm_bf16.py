"""Batched bf16 matmul."""
import torch
import torch.nn as nn

B, M, N, K = 32, 1024, 1024, 1024


class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(B, M, K, dtype=torch.bfloat16), torch.randn(B, K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
