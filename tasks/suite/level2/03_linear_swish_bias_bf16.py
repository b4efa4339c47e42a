"""Linear + Swish + a second bias + scale, bf16 (KernelBench level-2 style)."""
import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features).to(torch.bfloat16)
        self.bias = nn.Parameter(torch.randn(out_features, dtype=torch.bfloat16) * 0.02)

    def forward(self, x):
        y = self.linear(x)
        y = y * torch.sigmoid(y)
        return (y + self.bias) * 2.0


def get_inputs():
    return [torch.randn(8192, 4096, dtype=torch.bfloat16)]


def get_init_inputs():
    return [4096, 8192]
