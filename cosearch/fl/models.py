"""FLuID's models (NeurIPS 2023, iwang05/FLuID), per-dataset training defaults, and small models.

* :func:`femnist_cnn`: conv5x5-16 'same' -> ReLU -> pool -> conv5x5-64 'same' -> ReLU -> pool
  -> FC 3136 -> 120 -> 62 (28x28x1 input): 410,022 parameters.
* :func:`cifar_vgg`: conv3x3 32, 32, pool, 64, 64, pool, 128, 128, pool, FC 2048 -> 512 -> 256
  -> 10, ReLU, no BatchNorm (32x32x3 input): 1,469,994 parameters.
* :class:`ShakespeareLSTM`: one-hot 80 -> LSTM-128 -> LSTM-128 -> dense 80 on the last step:
  248,912 parameters as Keras counts them; PyTorch's second LSTM bias adds 4 x 128 per layer
  (249,936).  The output layer is never dropped.
* :func:`mlp`, :class:`ResMLP`: small models for the bundled digits.

:func:`build_model(name) <build_model>` builds one with its dataset's input shape and classes;
:data:`DATASET_DEFAULTS` holds FLuID's optimiser, learning rate and batch size per dataset
(FEMNIST: SGD 0.004, batch 10; CIFAR-10: Adam 1e-4; Shakespeare: Adam 1e-3, batch 128).
"""

from __future__ import annotations

import math

import torch.nn as nn

from .submodel import Group, ParamSlice

__all__ = ["mlp", "femnist_cnn", "cifar_vgg", "ShakespeareLSTM", "ResidualBlock", "ResMLP", "build_model",
           "MODELS", "DATASET_DEFAULTS", "count_parameters"]

#: FLuID's training settings per dataset; the CIFAR-10 batch size (not stated by FLuID) is 32.
DATASET_DEFAULTS = {
    "femnist": {"model": "femnist_cnn", "optimizer": "sgd", "lr": 0.004, "batch_size": 10},
    "cifar10": {"model": "cifar_vgg", "optimizer": "adam", "lr": 1e-4, "batch_size": 32},
    "shakespeare": {"model": "shakespeare_lstm", "optimizer": "adam", "lr": 1e-3, "batch_size": 128},
    "digits": {"model": "mlp", "optimizer": "sgd", "lr": 0.1, "batch_size": 32},
}


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def mlp(in_features: int, classes: int, hidden: int = 64) -> nn.Sequential:
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, classes))


def femnist_cnn(classes: int = 62, in_channels: int = 1, size: int = 28) -> nn.Sequential:
    s = size // 4
    return nn.Sequential(nn.Conv2d(in_channels, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * s * s, 120), nn.ReLU(), nn.Linear(120, classes))


def cifar_vgg(classes: int = 10, in_channels: int = 3, size: int = 32) -> nn.Sequential:
    """FLuID's CIFAR-10 VGG (three 2-conv blocks, 512-256 dense head), initialised as FLuID's Keras
    model is: Glorot-uniform weights, zero biases (Keras's Conv2D/Dense defaults).  PyTorch's
    default initialisation shrinks the signal about 6x in variance per ReLU layer, so this
    nine-layer stack starts with outputs that barely depend on the input and does not leave
    chance accuracy in a short federated run."""
    layers: list[nn.Module] = []
    c = in_channels
    for width in (32, 64, 128):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, width, 3, padding=1),
                   nn.ReLU(), nn.MaxPool2d(2)]
        c = width
    s = size // 8
    net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * s * s, 512), nn.ReLU(), nn.Linear(512, 256),
                        nn.ReLU(), nn.Linear(256, classes))
    for mod in net:
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(mod.weight)
            nn.init.zeros_(mod.bias)
    return net


class ShakespeareLSTM(nn.Module):
    """One-hot characters -> LSTM -> LSTM -> Linear on the last step.  Two single-layer LSTMs
    so each layer's hidden units are their own droppable group; the output is never dropped."""

    def __init__(self, vocab: int = 80, hidden: int = 128):
        super().__init__()
        self.vocab = vocab
        self.lstm1 = nn.LSTM(vocab, hidden, batch_first=True)
        self.lstm2 = nn.LSTM(hidden, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, x):
        h = nn.functional.one_hot(x.long(), self.vocab).to(self.fc.weight.dtype)
        h, _ = self.lstm1(h)
        h, _ = self.lstm2(h)
        return self.fc(h[:, -1])

    def fl_groups(self):
        # each layer's current hidden size: a sub-model cut from this one has its own
        def own(name):
            H = getattr(self, name).hidden_size
            return (ParamSlice(f"{name}.weight_ih_l0", 0, "gates", H), ParamSlice(f"{name}.weight_hh_l0", 0, "gates", H),
                    ParamSlice(f"{name}.weight_hh_l0", 1), ParamSlice(f"{name}.bias_ih_l0", 0, "gates", H),
                    ParamSlice(f"{name}.bias_hh_l0", 0, "gates", H))

        return [Group("lstm1", self.lstm1.hidden_size, own("lstm1") + (ParamSlice("lstm2.weight_ih_l0", 1),),
                      (("lstm1", "hidden_size", "units", 1), ("lstm2", "input_size", "units", 1))),
                Group("lstm2", self.lstm2.hidden_size, own("lstm2") + (ParamSlice("fc.weight", 1),),
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


#: Model name -> (builder(in_shape, classes), default dataset).
MODELS = {
    "mlp": (lambda shape, k: mlp(int(math.prod(shape)), k), "digits"),
    "resmlp": (lambda shape, k: ResMLP(int(math.prod(shape)), k), "digits"),
    "femnist_cnn": (lambda shape, k: femnist_cnn(k, shape[0], shape[-1]), "femnist"),
    "cifar_vgg": (lambda shape, k: cifar_vgg(k, shape[0], shape[-1]), "cifar10"),
    "shakespeare_lstm": (lambda shape, k: ShakespeareLSTM(vocab=k), "shakespeare"),
}

#: Input shape and classes of each dataset.
DATASET_SHAPES = {"femnist": ((1, 28, 28), 62), "cifar10": ((3, 32, 32), 10), "shakespeare": ((80,), 80),
                  "digits": ((1, 8, 8), 10)}


def build_model(name: str, in_shape: tuple | None = None, classes: int | None = None) -> nn.Module:
    """Model ``name`` (:data:`MODELS`); ``in_shape``/``classes`` default to its dataset's."""
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    builder, ds = MODELS[name]
    shape0, k0 = DATASET_SHAPES[ds]
    return builder(tuple(in_shape) if in_shape is not None else shape0, classes if classes is not None else k0)
