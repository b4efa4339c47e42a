"""Linear + HardTanh + scale, bf16."""
import torch
import torch.nn as nn
import torch.nn.functional as F



class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features).to(torch.bfloat16)

    def forward(self, x):
        return F.hardtanh(self.linear(x) * 0.1, -0.5, 0.5)


def get_inputs():
    return [torch.randn(16384, 2048, dtype=torch.bfloat16)]


def get_init_inputs():
    return [2048, 1024]
