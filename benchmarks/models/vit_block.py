import torch
import torch.nn as nn


class Model(nn.Module):
    """ViT-Tiny's patch embedding, class token and positions, one encoder layer and the head."""
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 192, 16, stride=16)
        self.cls = nn.Parameter(torch.randn(1, 1, 192))
        self.pos = nn.Parameter(torch.randn(1, 197, 192))
        self.block = nn.TransformerEncoderLayer(192, 3, 768, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(192, 1000)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.block(x)[:, 0])


def get_inputs():
    return [torch.randn(32, 3, 224, 224)]


def get_init_inputs():
    return []
