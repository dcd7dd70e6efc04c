"""Float64 NumPy references for cuDNN's tensor operations.

Broadcasting follows cuDNN: a dimension of the broadcast operand is either equal to the
output's or 1. ``reduce`` reduces every axis where the output has 1 and the input does not, and
gives the flattened index over those axes (row-major) for min/max/amax.
"""
from __future__ import annotations

import numpy as np

OP_TENSOR = ("add", "mul", "min", "max", "sqrt", "not")
REDUCE = ("add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros")


def _f64(a):
    return np.asarray(a, dtype=np.float64)


def add_tensor(a, c, alpha, beta):
    return alpha * _f64(a) + beta * _f64(c)


def op_tensor(op, a, b, c, alpha1, alpha2, beta):
    """``C = op(alpha1 * A, alpha2 * B) + beta * C``; B ignored for sqrt and not."""
    a = alpha1 * _f64(a)
    b = None if b is None else alpha2 * _f64(b)
    r = {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "min": lambda: np.minimum(a, b),
        "max": lambda: np.maximum(a, b),
        "sqrt": lambda: np.sqrt(a),
        "not": lambda: (a == 0).astype(np.float64),
    }[op]()
    return r + beta * _f64(c)


def reduce_axes(a_shape, c_shape):
    if len(a_shape) != len(c_shape) or any(cd not in (1, ad) for ad, cd in zip(a_shape, c_shape)):
        raise ValueError(f"cannot reduce {a_shape} to {c_shape}")
    return tuple(i for i, (ad, cd) in enumerate(zip(a_shape, c_shape)) if cd == 1 and ad != 1)


def reduce(op, a, c_shape):
    """(reduced values with shape c_shape, flattened indices or None)."""
    a = _f64(a)
    axes = reduce_axes(a.shape, c_shape)
    keep = tuple(i for i in range(a.ndim) if i not in axes)
    flat = np.transpose(a, keep + axes).reshape(tuple(a.shape[i] for i in keep) + (-1,))
    idx = None
    if op == "add":
        r = flat.sum(-1)
    elif op == "mul":
        r = flat.prod(-1)
    elif op == "min":
        r, idx = flat.min(-1), flat.argmin(-1)
    elif op == "max":
        r, idx = flat.max(-1), flat.argmax(-1)
    elif op == "amax":
        r, idx = np.abs(flat).max(-1), np.abs(flat).argmax(-1)
    elif op == "avg":
        r = flat.mean(-1)
    elif op == "norm1":
        r = np.abs(flat).sum(-1)
    elif op == "norm2":
        r = np.sqrt((flat * flat).sum(-1))
    elif op == "mul_no_zeros":
        r = np.where(flat == 0, 1.0, flat).prod(-1)
    else:
        raise ValueError(f"unknown reduction {op!r}")
    r = r.reshape(c_shape)
    return r, (None if idx is None else idx.reshape(c_shape))


def transform(x, y, alpha, beta):
    """``y = alpha * x + beta * y`` (layouts and dtypes are the caller's business)."""
    return alpha * _f64(x) + beta * _f64(y)


# ---------------------------------------------------------------- the tolerance check shared by the legacy tests

TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 1e-2, np.dtype(np.float64): 1e-9}


def assert_close(got, ref, dtype, tol_scale=1.0):
    """``got`` (any array) matches the float64 ``ref`` to the dtype's tolerance, relative to ref's magnitude."""
    got = np.asarray(got, dtype=np.float64)
    tol = TOL[np.dtype(dtype)] * tol_scale
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.isfinite(got).all(), "output has NaN/inf (an element was not written?)"
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))

