"""A 3x3 convolution (outside the expert's families: needs implicit GEMM)."""
import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 64, 128, 128)]


def get_init_inputs():
    return [64, 128]
