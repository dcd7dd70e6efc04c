"""float64 NumPy references for the graph API tests: convolutions (N, C, *spatial; groups=1), matmul with batch
broadcasting, pointwise modes forward and backward, reductions, per-channel statistics."""
from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _pad(x, pre, post):
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(pre, post)))


def _windows(xp, kshape, stride, dilation, out):
    """xp (N, C, *S) -> (N, C, *kshape, *out) view of every dilated window start."""
    n, c = xp.shape[:2]
    cols = np.empty((n, c, *kshape, *out))
    for k in np.ndindex(*kshape):
        sl = tuple(slice(ki * d, ki * d + (o - 1) * s + 1, s) for ki, d, o, s in zip(k, dilation, out, stride))
        cols[(slice(None), slice(None)) + k] = xp[(slice(None), slice(None)) + sl]
    return cols


def conv_fprop(x, w, pad, stride, dilation, post=None):
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    post = pad if post is None else post
    ks = w.shape[2:]
    out = [(n + a + b - d * (k - 1) - 1) // s + 1 for n, a, b, d, k, s in zip(x.shape[2:], pad, post, dilation, ks, stride)]
    cols = _windows(_pad(x, pad, post), ks, stride, dilation, out)
    nsp = len(ks)
    sub_w = "c" + "".join("ijk"[:nsp])
    sub_o = "".join("pqr"[:nsp])
    return np.einsum(f"n{sub_w}{sub_o},K{sub_w}->nK{sub_o}", cols, w)


def conv_dgrad(dy, w, x_shape, pad, stride, dilation):
    """Adjoint of conv_fprop with respect to x (by scattering)."""
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    ks = w.shape[2:]
    sp = [n + 2 * p for n, p in zip(x_shape[2:], pad)]
    dxp = np.zeros((x_shape[0], x_shape[1], *sp))
    out = dy.shape[2:]
    for k in np.ndindex(*ks):
        contrib = np.einsum("nK...,Kc->nc...", dy, w[(slice(None), slice(None)) + k])
        sl = tuple(slice(ki * d, ki * d + (o - 1) * s + 1, s) for ki, d, o, s in zip(k, dilation, out, stride))
        dxp[(slice(None), slice(None)) + sl] += contrib
    inner = tuple(slice(p, p + n) for p, n in zip(pad, x_shape[2:]))
    return dxp[(slice(None), slice(None)) + inner]


def conv_wgrad(dy, x, w_shape, pad, stride, dilation):
    dy, x = np.asarray(dy, np.float64), np.asarray(x, np.float64)
    ks = w_shape[2:]
    cols = _windows(_pad(x, pad, pad), ks, stride, dilation, dy.shape[2:])
    nsp = len(ks)
    sub_k = "".join("ijk"[:nsp])
    sub_o = "".join("pqr"[:nsp])
    return np.einsum(f"nc{sub_k}{sub_o},nK{sub_o}->Kc{sub_k}", cols, dy)


def matmul(a, b):
    return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))


def gelu(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softplus(x):
    return np.log1p(np.exp(x))


#: forward unary modes -> f(x)
UNARY = {
    "relu_fwd": lambda x: np.maximum(x, 0), "tanh_fwd": np.tanh, "sigmoid_fwd": sigmoid,
    "elu_fwd": lambda x: np.where(x > 0, x, np.expm1(x)), "gelu_fwd": gelu, "gelu_approx_tanh_fwd": gelu_tanh,
    "softplus_fwd": softplus, "swish_fwd": lambda x: x * sigmoid(x), "abs": np.abs, "neg": np.negative,
    "exp": np.exp, "identity": lambda x: x, "sin": np.sin, "cos": np.cos, "erf": _erf,
    "ceil": np.ceil, "floor": np.floor, "reciprocal": lambda x: 1 / x,
    "log": lambda x: np.log(x), "sqrt": lambda x: np.sqrt(x), "rsqrt": lambda x: 1 / np.sqrt(x),
}
#: modes whose input must be positive (the test shifts its data)
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}
#: binary modes -> f(a, b)
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum, "min": np.minimum,
    "add_square": lambda a, b: a + b * b, "cmp_gt": lambda a, b: (a > b).astype(np.float64),
    "cmp_lt": lambda a, b: (a < b).astype(np.float64), "cmp_ge": lambda a, b: (a >= b).astype(np.float64),
    "cmp_le": lambda a, b: (a <= b).astype(np.float64),
}
#: backward modes -> f(dy, x) = dy * f'(x)
BACKWARD = {
    "relu_bwd": lambda dy, x: dy * (x > 0), "tanh_bwd": lambda dy, x: dy * (1 - np.tanh(x) ** 2),
    "sigmoid_bwd": lambda dy, x: dy * sigmoid(x) * (1 - sigmoid(x)),
    "gelu_bwd": lambda dy, x: dy * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)),
    "swish_bwd": lambda dy, x: dy * (sigmoid(x) * (1 + x * (1 - sigmoid(x)))),
    "softplus_bwd": lambda dy, x: dy * sigmoid(x),
    "elu_bwd": lambda dy, x: dy * np.where(x > 0, 1.0, np.exp(x)),
}


def reduce(x, mode, axes):
    x = np.asarray(x, np.float64)
    f = {"add": np.sum, "max": np.max, "min": np.min, "mul": np.prod, "amax": lambda v, **k: np.max(np.abs(v), **k),
         "avg": np.mean, "norm1": lambda v, **k: np.sum(np.abs(v), **k),
         "norm2": lambda v, **k: np.sqrt(np.sum(v * v, **k))}[mode]
    return f(x, axis=tuple(axes), keepdims=True)


def genstats(x):
    x = np.asarray(x, np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    return x.sum(axis=axes, keepdims=True), (x * x).sum(axis=axes, keepdims=True)


def norm_forward(x, scale, bias, mode, eps):
    """(y, mean, inv_variance) of layer / rms / instance / batch normalisation (statistics keep dims)."""
    x = np.asarray(x, np.float64)
    axes = {"layer": tuple(range(1, x.ndim)), "rms": tuple(range(1, x.ndim)),
            "instance": tuple(range(2, x.ndim)), "batch": (0,) + tuple(range(2, x.ndim))}[mode]
    if mode == "rms":
        mean = np.zeros_like(x.mean(axis=axes, keepdims=True))
        var = (x * x).mean(axis=axes, keepdims=True)
    else:
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    y = (x - mean) * inv * scale + (0 if bias is None else bias)
    return y, mean, inv
