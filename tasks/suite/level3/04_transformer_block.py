import torch
import torch.nn as nn


class Model(nn.Module):
    """A pre-norm transformer encoder block: LayerNorm, multi-head self-attention, residual; LayerNorm, MLP, residual."""
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1) / (D // self.heads) ** 0.5, dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def get_inputs():
    return [torch.randn(16, 128, 256)]


def get_init_inputs():
    return []
