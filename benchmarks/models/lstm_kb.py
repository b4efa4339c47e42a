import torch
import torch.nn as nn
batch_size = 10
class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size, dropout=0.0):
        super(Model, self).__init__()
        self.h0 = torch.randn((num_layers, batch_size, hidden_size))
        self.c0 = torch.randn((num_layers, batch_size, hidden_size))
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, dropout=dropout, bidirectional=False)
        self.fc = nn.Linear(hidden_size, output_size)
    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        self.c0 = self.h0.to(x.device)
        out, state = self.lstm(x, (self.h0, self.c0))
        out = self.fc(out[:, -1, :])
        return out
def get_inputs():
    return [torch.randn(batch_size, 512, 128)]
def get_init_inputs():
    return [128, 256, 6, 10]
