import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """EfficientNet-B0's MBConv (expand 6, 3x3 depthwise, squeeze-and-excitation, project, residual)."""
    def __init__(self):
        super().__init__()
        self.e = nn.Conv2d(40, 240, 1, bias=False)
        self.b0 = nn.BatchNorm2d(240)
        self.dw = nn.Conv2d(240, 240, 3, padding=1, groups=240, bias=False)
        self.b1 = nn.BatchNorm2d(240)
        self.s1 = nn.Conv2d(240, 10, 1)
        self.s2 = nn.Conv2d(10, 240, 1)
        self.p = nn.Conv2d(240, 40, 1, bias=False)
        self.b2 = nn.BatchNorm2d(40)

        self.eval()  # inference: BatchNorm normalizes with its running statistics
    def forward(self, x):
        y = F.silu(self.b1(self.dw(F.silu(self.b0(self.e(x))))))
        s = torch.sigmoid(self.s2(F.silu(self.s1(F.adaptive_avg_pool2d(y, 1)))))
        return self.b2(self.p(y * s)) + x


def get_inputs():
    return [torch.randn(32, 40, 28, 28)]


def get_init_inputs():
    return []
