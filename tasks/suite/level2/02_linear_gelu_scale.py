"""Linear + GELU + scale, fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F



class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x)) * 0.5


def get_inputs():
    return [torch.randn(4096, 2048)]


def get_init_inputs():
    return [2048, 2048]
