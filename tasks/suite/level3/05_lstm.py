import torch
import torch.nn as nn


class Model(nn.Module):
    """A two-layer LSTM over a sequence, classifying from the last time step."""
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(128, 256, num_layers=2, batch_first=True)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


def get_inputs():
    return [torch.randn(16, 128, 128)]


def get_init_inputs():
    return []
