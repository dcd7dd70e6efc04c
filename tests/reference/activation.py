"""Float64 NumPy references for cuDNN's legacy activations, forward and backward.

``coef`` is the ceiling of clipped ReLU and the alpha of ELU; ``swish_beta`` scales swish's
sigmoid: ``swish(x) = x * sigmoid(swish_beta * x)``. Backward returns dL/dx given dL/dy.
"""
from __future__ import annotations

import numpy as np

MODES = ("sigmoid", "relu", "tanh", "clipped_relu", "elu", "identity", "swish")


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def forward(x, mode, coef=0.0, swish_beta=1.0):
    x = np.asarray(x, dtype=np.float64)
    if mode == "sigmoid":
        return _sigmoid(x)
    if mode == "relu":
        return np.maximum(x, 0.0)
    if mode == "tanh":
        return np.tanh(x)
    if mode == "clipped_relu":
        return np.clip(x, 0.0, coef)
    if mode == "elu":
        return np.where(x > 0, x, coef * np.expm1(np.minimum(x, 0.0)))
    if mode == "identity":
        return x.copy()
    if mode == "swish":
        return x * _sigmoid(swish_beta * x)
    raise ValueError(f"unknown activation mode {mode!r}")


def backward(x, dy, mode, coef=0.0, swish_beta=1.0):
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    if mode == "sigmoid":
        s = _sigmoid(x)
        return dy * s * (1.0 - s)
    if mode == "relu":
        return dy * (x > 0)
    if mode == "tanh":
        return dy * (1.0 - np.tanh(x) ** 2)
    if mode == "clipped_relu":
        return dy * ((x > 0) & (x < coef))
    if mode == "elu":
        return dy * np.where(x > 0, 1.0, coef * np.exp(np.minimum(x, 0.0)))
    if mode == "identity":
        return dy.copy()
    if mode == "swish":
        s = _sigmoid(swish_beta * x)
        return dy * (s + swish_beta * x * s * (1.0 - s))
    raise ValueError(f"unknown activation mode {mode!r}")
