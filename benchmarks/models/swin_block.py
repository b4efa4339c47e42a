import torch
import torch.nn as nn
import torch.nn.functional as F

def window_partition(x, ws):
    B, H, W, C = x.shape
    x = x.view(B, H // ws, ws, W // ws, ws, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, C)

def window_reverse(w, ws, H, W):
    B = int(w.shape[0] / (H * W / ws / ws))
    x = w.view(B, H // ws, W // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)

class Model(nn.Module):
    def __init__(self, dim=96, heads=3, H=56, W=56, ws=7, shift=3):
        super().__init__()
        self.dim, self.heads, self.H, self.W, self.ws, self.shift = dim, heads, H, W, ws, shift
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid([torch.arange(ws), torch.arange(ws)], indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("rel_index", rel.sum(-1))
        img = torch.zeros(1, H, W, 1)
        cnt = 0
        for h in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            for w in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                img[:, h, w, :] = cnt
                cnt += 1
        mw = window_partition(img, ws).view(-1, ws * ws)
        am = mw.unsqueeze(1) - mw.unsqueeze(2)
        self.register_buffer("attn_mask", am.masked_fill(am != 0, -100.0).masked_fill(am == 0, 0.0))
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        H, W, C, ws = self.H, self.W, self.dim, self.ws
        B, L, _ = x.shape
        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        xw = window_partition(x, ws).view(-1, ws * ws, C)
        B_, N, _ = xw.shape
        qkv = self.qkv(xw).reshape(B_, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * (C // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.rel_index.view(-1)].view(N, N, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        nW = self.attn_mask.shape[0]
        attn = attn.view(B_ // nW, nW, self.heads, N, N) + self.attn_mask.unsqueeze(1).unsqueeze(0)
        attn = F.softmax(attn.view(-1, self.heads, N, N), dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        y = self.proj(y).view(-1, ws, ws, C)
        x = window_reverse(y, ws, H, W)
        x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2)).view(B, H * W, C)
        x = shortcut + x
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

def get_inputs():
    return [torch.randn(8, 56 * 56, 96)]
def get_init_inputs():
    return []
