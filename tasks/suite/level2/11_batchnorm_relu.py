"""BatchNorm2d in eval mode, then ReLU."""
import torch
import torch.nn as nn

SHAPE = (32, 64, 256, 256)


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.bn.eval()
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return torch.relu(self.bn(x))


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return [64]
