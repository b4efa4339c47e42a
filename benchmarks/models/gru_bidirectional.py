import torch
import torch.nn as nn

batch_size = 10


class Model(nn.Module):
    """KernelBench level 3's bidirectional GRU shape: h0 drawn at init as a tensor attribute."""
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers, bidirectional=True)
        self.h0 = torch.randn((num_layers * 2, batch_size, hidden_size))

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        output, h_n = self.gru(x, self.h0)
        return output


def get_inputs():
    return [torch.randn(512, batch_size, 128)]


def get_init_inputs():
    return [128, 256, 6]
