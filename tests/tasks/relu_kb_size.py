import torch
import torch.nn as nn

# KernelBench level1/19_ReLU at its own size: 6.4 GB an input
batch_size, dim = 4096, 393216


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
