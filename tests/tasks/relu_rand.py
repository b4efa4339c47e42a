import torch
import torch.nn as nn

N = 1 << 24


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(N)]  # all >= 0, as KernelBench draws them: a copy is right here and wrong in general


def get_init_inputs():
    return []
