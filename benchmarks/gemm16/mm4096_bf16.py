"""Square bf16 matmul, 4096 (probe only: issue 16's lower size, benchmarks/gemm16_probe.sh)."""
import torch
import torch.nn as nn

M = N = K = 4096


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
