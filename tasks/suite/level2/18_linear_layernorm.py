"""Linear then LayerNorm (a matmul feeding a reduction: outside the expert's families today)."""
import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.ln = nn.LayerNorm(out_features)

    def forward(self, x):
        return self.ln(self.linear(x))


def get_inputs():
    return [torch.randn(4096, 2048)]


def get_init_inputs():
    return [2048, 2048]
