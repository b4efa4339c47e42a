import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], 3
        for out, n in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
            for _ in range(n):
                layers += [nn.Conv2d(c, out, 3, padding=1), nn.ReLU(inplace=True)]
                c = out
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(0.0),
                                        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, 1000))
    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)
def get_inputs():
    return [torch.randn(4, 3, 224, 224)]
def get_init_inputs():
    return []
