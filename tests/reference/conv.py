"""Float64 NumPy references for convolution (forward, backward data, backward filter, bias grad).

Layout is logical NC<spatial> (x: N, C, *S; w: K, C // groups, *R; y: N, K, *P); callers transpose
NHWC data themselves. ``pad`` is one ``(lo, hi)`` pair per spatial dimension (asymmetric padding is
explicit pre-padding of x); ``mode`` is ``"cross_correlation"`` (no kernel flip) or ``"convolution"``.
Every function loops over kernel offsets and contracts channels with einsum, in float64.
"""
from __future__ import annotations

import itertools

import numpy as np


def _norm(v, nd, name):
    t = (v,) * nd if np.isscalar(v) else tuple(v)
    if len(t) != nd:
        raise ValueError(f"{name} needs {nd} values, got {t}")
    return t


def _pads(pad, nd):
    if np.isscalar(pad):
        return ((int(pad), int(pad)),) * nd
    out = tuple((p, p) if np.isscalar(p) else tuple(p) for p in pad)
    if len(out) != nd:
        raise ValueError(f"pad needs {nd} entries, got {pad}")
    return out


def output_shape(x_shape, w_shape, pad=0, stride=1, dilation=1):
    """(N, K, *P) of a forward convolution."""
    nd = len(x_shape) - 2
    pads, s, d = _pads(pad, nd), _norm(stride, nd, "stride"), _norm(dilation, nd, "dilation")
    spatial = tuple((x_shape[2 + i] + pads[i][0] + pads[i][1] - (w_shape[2 + i] - 1) * d[i] - 1) // s[i] + 1
                    for i in range(nd))
    return (x_shape[0], w_shape[0]) + spatial


def _setup(x_shape, w_shape, pad, stride, dilation, groups):
    nd = len(x_shape) - 2
    pads, s, d = _pads(pad, nd), _norm(stride, nd, "stride"), _norm(dilation, nd, "dilation")
    n, c = x_shape[:2]
    k, cg = w_shape[:2]
    if c != cg * groups or k % groups:
        raise ValueError(f"channels {c} / filters {w_shape} do not fit groups={groups}")
    out = output_shape(x_shape, w_shape, pads, s, d)
    return nd, pads, s, d, out


def _window(off, s, d, out_sp):
    return tuple(slice(o * dd, o * dd + (p - 1) * ss + 1, ss) for o, ss, dd, p in zip(off, s, d, out_sp))


def _flip(w):
    nd = w.ndim - 2
    return w[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]


def conv_forward(x, w, pad=0, stride=1, dilation=1, groups=1, mode="cross_correlation"):
    """y[n, k, p] = sum_{c, r} x_padded[n, g*Cg + c, p*s + r*d] * w[k, c, r] (float64)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    nd, pads, s, d, out = _setup(x.shape, w.shape, pad, stride, dilation, groups)
    if mode == "convolution":
        w = _flip(w)
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    n, k, g = x.shape[0], w.shape[0], groups
    xg = xp.reshape((n, g, x.shape[1] // g) + xp.shape[2:])
    wg = w.reshape((g, k // g) + w.shape[1:])
    y = np.zeros((n, g, k // g) + out[2:])
    for off in itertools.product(*(range(r) for r in w.shape[2:])):
        xs = xg[(Ellipsis,) + _window(off, s, d, out[2:])]
        y += np.einsum("ngc...,gkc->ngk...", xs, wg[(Ellipsis,) + off])
    return y.reshape(out)


def conv_backward_data(dy, w, x_shape, pad=0, stride=1, dilation=1, groups=1, mode="cross_correlation"):
    """dx = adjoint of conv_forward with respect to x (float64)."""
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    nd, pads, s, d, out = _setup(x_shape, w.shape, pad, stride, dilation, groups)
    if tuple(dy.shape) != out:
        raise ValueError(f"dy shape {dy.shape} != forward output {out}")
    if mode == "convolution":
        w = _flip(w)
    n, c, k, g = x_shape[0], x_shape[1], w.shape[0], groups
    padded = tuple(x_shape[2 + i] + pads[i][0] + pads[i][1] for i in range(nd))
    dxg = np.zeros((n, g, c // g) + padded)
    dyg = dy.reshape((n, g, k // g) + out[2:])
    wg = w.reshape((g, k // g) + w.shape[1:])
    for off in itertools.product(*(range(r) for r in w.shape[2:])):
        dxg[(Ellipsis,) + _window(off, s, d, out[2:])] += np.einsum("ngk...,gkc->ngc...", dyg, wg[(Ellipsis,) + off])
    dx = dxg.reshape((n, c) + padded)
    crop = tuple(slice(lo, lo + x_shape[2 + i]) for i, (lo, _) in enumerate(pads))
    return dx[(slice(None), slice(None)) + crop]


def conv_backward_filter(x, dy, w_shape, pad=0, stride=1, dilation=1, groups=1, mode="cross_correlation"):
    """dw = gradient of sum(conv_forward(x, w) * dy) with respect to w (float64)."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    nd, pads, s, d, out = _setup(x.shape, w_shape, pad, stride, dilation, groups)
    if tuple(dy.shape) != out:
        raise ValueError(f"dy shape {dy.shape} != forward output {out}")
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    n, k, g = x.shape[0], w_shape[0], groups
    xg = xp.reshape((n, g, x.shape[1] // g) + xp.shape[2:])
    dyg = dy.reshape((n, g, k // g) + out[2:])
    dw = np.zeros((g, k // g) + tuple(w_shape[1:]))
    for off in itertools.product(*(range(r) for r in w_shape[2:])):
        xs = xg[(Ellipsis,) + _window(off, s, d, out[2:])]
        sp = "pqrstu"[:nd]
        dw[(Ellipsis,) + off] = np.einsum(f"ngc{sp},ngk{sp}->gkc", xs, dyg)
    dw = dw.reshape(tuple(w_shape))
    return _flip(dw) if mode == "convolution" else dw


def conv_backward_bias(dy):
    """db[k] = sum of dy over every axis but the channel axis, shaped (1, K, 1, ...)."""
    dy = np.asarray(dy, np.float64)
    return dy.sum(axis=(0,) + tuple(range(2, dy.ndim)), keepdims=True)


def conv_bias_activation(x, w, bias, z=None, alpha1=1.0, alpha2=0.0, activation="relu", **conv):
    """act(alpha1 * conv(x, w) + alpha2 * z + bias), act in {"relu", "identity"}."""
    y = alpha1 * conv_forward(x, w, **conv) + np.asarray(bias, np.float64)
    if z is not None:
        y = y + alpha2 * np.asarray(z, np.float64)
    if activation == "relu":
        return np.maximum(y, 0.0)
    if activation == "identity":
        return y
    raise ValueError(f"activation {activation!r}: expected 'relu' or 'identity'")
