"""The federated dataset container every loader returns (:mod:`cosearch.fl.data`,
:mod:`cosearch.fl.flower_datasets`), and LEAF Shakespeare's alphabet."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["FLData", "SHAKESPEARE_CHARS"]

#: LEAF Shakespeare's 80-character alphabet.
SHAKESPEARE_CHARS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}")


@dataclass
class FLData:
    """Per-client training arrays, per-client test splits, a central test set, and the input
    shape / class count."""

    clients: list[tuple[np.ndarray, np.ndarray]]
    test: tuple[np.ndarray, np.ndarray]
    in_shape: tuple
    classes: int
    name: str
    client_tests: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def __post_init__(self):
        if not self.clients:
            raise ValueError(f"dataset {self.name!r} has no clients")
        if len(self.test[1]) == 0:
            raise ValueError(f"dataset {self.name!r} has an empty test split")
        for i, (x, y) in enumerate(self.clients):
            if len(x) != len(y):
                raise ValueError(f"client {i}: {len(x)} samples but {len(y)} labels")
            if len(y) == 0:
                raise ValueError(f"client {i} has no training samples")
