import torch
import torch.nn as nn


class Model(nn.Module):
    """A MobileNet depthwise-separable block: depthwise 3x3-bn-relu6, pointwise 1x1-bn-relu6."""
    def __init__(self, cin=64, cout=128):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

        self.eval()  # inference: BatchNorm normalizes with its running statistics
    def forward(self, x):
        x = nn.functional.relu6(self.bn1(self.dw(x)))
        return nn.functional.relu6(self.bn2(self.pw(x)))


def get_inputs():
    return [torch.randn(16, 64, 56, 56)]


def get_init_inputs():
    return []
