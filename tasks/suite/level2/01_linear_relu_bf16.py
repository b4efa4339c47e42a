"""Linear + ReLU in bf16."""
import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(8192, 4096, dtype=torch.bfloat16)]


def get_init_inputs():
    return [4096, 4096]
