"""The models of the FLuID paper, sized for their datasets, plus a small MLP.

* :func:`mlp`: in -> hidden -> hidden -> classes (ReLU).
* :func:`femnist_cnn`: conv5x5 16 -> pool -> conv5x5 64 -> pool -> FC 120 -> 62 (28x28x1 input).
* :func:`cifar_vgg`: a VGG-style CNN (conv 32-32-pool-64-64-pool, FC 256 -> 10; 32x32x3 input).
* :class:`CharLSTM`: Shakespeare next-character model, embedding 8 -> 2 x LSTM-128 -> vocab.
"""

from __future__ import annotations

import torch.nn as nn

from .submodel import Group, ParamSlice

__all__ = ["mlp", "femnist_cnn", "cifar_vgg", "CharLSTM", "ResidualBlock", "ResMLP", "build_model"]


def mlp(in_features: int, classes: int, hidden: int = 64) -> nn.Sequential:
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, classes))


def femnist_cnn(classes: int = 62, in_channels: int = 1, size: int = 28) -> nn.Sequential:
    s = ((size - 4) // 2 - 4) // 2
    return nn.Sequential(nn.Conv2d(in_channels, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * s * s, 120), nn.ReLU(), nn.Linear(120, classes))


def cifar_vgg(classes: int = 10) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, classes))


class CharLSTM(nn.Module):
    """Embedding -> LSTM -> LSTM -> Linear on the last step (two single-layer LSTMs so each
    layer's hidden units can be dropped independently)."""

    def __init__(self, vocab: int = 80, embed: int = 8, hidden: int = 128):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm1 = nn.LSTM(embed, hidden, batch_first=True)
        self.lstm2 = nn.LSTM(hidden, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, vocab)
        self._hidden = hidden

    def forward(self, x):
        h, _ = self.lstm1(self.embed(x))
        h, _ = self.lstm2(h)
        return self.fc(h[:, -1])

    def fl_groups(self):
        H = self._hidden

        def own(name):
            return (ParamSlice(f"{name}.weight_ih_l0", 0, "gates", H), ParamSlice(f"{name}.weight_hh_l0", 0, "gates", H),
                    ParamSlice(f"{name}.weight_hh_l0", 1), ParamSlice(f"{name}.bias_ih_l0", 0, "gates", H),
                    ParamSlice(f"{name}.bias_hh_l0", 0, "gates", H))

        E = self.embed.embedding_dim
        return [Group("embed", E, (ParamSlice("embed.weight", 1), ParamSlice("lstm1.weight_ih_l0", 1)),
                      (("embed", "embedding_dim", "units", 1), ("lstm1", "input_size", "units", 1))),
                Group("lstm1", H, own("lstm1") + (ParamSlice("lstm2.weight_ih_l0", 1),),
                      (("lstm1", "hidden_size", "units", 1), ("lstm2", "input_size", "units", 1))),
                Group("lstm2", H, own("lstm2") + (ParamSlice("fc.weight", 1),),
                      (("lstm2", "hidden_size", "units", 1), ("fc", "in_features", "units", 1)))]


class ResidualBlock(nn.Module):
    """``x + fc2(relu(fc1(x)))``."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class ResMLP(nn.Module):
    """stem Linear -> ReLU -> residual blocks -> head.  The residual stream's units form one
    drop set for the whole stage (a unit dropped from the stream is dropped from every
    block's input and output); each block's hidden units are their own group."""

    def __init__(self, in_features: int, classes: int, width: int = 64, hidden: int = 128, blocks: int = 2):
        super().__init__()
        self.flatten = nn.Flatten()
        self.stem = nn.Linear(in_features, width)
        self.act = nn.ReLU()
        self.blocks = nn.ModuleList(ResidualBlock(width, hidden) for _ in range(blocks))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.act(self.stem(self.flatten(x)))
        for b in self.blocks:
            x = b(x)
        return self.head(x)

    def fl_groups(self):
        W = self.stem.out_features
        stage = [ParamSlice("stem.weight", 0), ParamSlice("stem.bias", 0), ParamSlice("head.weight", 1)]
        attrs = [("stem", "out_features", "units", 1), ("head", "in_features", "units", 1)]
        out = []
        for i, b in enumerate(self.blocks):
            p = f"blocks.{i}"
            stage += [ParamSlice(f"{p}.fc1.weight", 1), ParamSlice(f"{p}.fc2.weight", 0),
                      ParamSlice(f"{p}.fc2.bias", 0)]
            attrs += [(f"{p}.fc1", "in_features", "units", 1), (f"{p}.fc2", "out_features", "units", 1)]
            out.append(Group(f"{p}.hidden", b.fc1.out_features,
                             (ParamSlice(f"{p}.fc1.weight", 0), ParamSlice(f"{p}.fc1.bias", 0),
                              ParamSlice(f"{p}.fc2.weight", 1)),
                             ((f"{p}.fc1", "out_features", "units", 1), (f"{p}.fc2", "in_features", "units", 1))))
        return [Group("stage", W, tuple(stage), tuple(attrs))] + out


def build_model(name: str, in_shape: tuple, classes: int) -> nn.Module:
    """Model by name: mlp, femnist_cnn, cifar_vgg, char_lstm."""
    import math
    if name == "mlp":
        return mlp(int(math.prod(in_shape)), classes)
    if name == "femnist_cnn":
        return femnist_cnn(classes, in_shape[0], in_shape[-1])
    if name == "cifar_vgg":
        return cifar_vgg(classes)
    if name == "char_lstm":
        return CharLSTM(vocab=classes)
    if name == "resmlp":
        return ResMLP(int(math.prod(in_shape)), classes)
    raise ValueError(f"unknown model {name!r}; choose mlp, resmlp, femnist_cnn, cifar_vgg or char_lstm")


