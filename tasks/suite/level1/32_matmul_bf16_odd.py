"""bf16 matmul with sizes that are not tile multiples."""
import torch
import torch.nn as nn

M, N, K = 3000, 5000, 2056


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
