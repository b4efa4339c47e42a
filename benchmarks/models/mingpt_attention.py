import math
import torch
import torch.nn as nn
import torch.nn.functional as F
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(768, 3 * 768)
        self.c_proj = nn.Linear(768, 768)
        self.register_buffer("bias", torch.tril(torch.ones(512, 512)).view(1, 1, 512, 512))
        self.n_head = 12
    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(768, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)
def get_inputs():
    return [torch.randn(8, 512, 768)]
def get_init_inputs():
    return []
