"""float64 NumPy references for cuDNN's spatial transformer (2-D affine grid, bilinear sampler).

Conventions (cuDNN's, the same as ``align_corners=True`` in other frameworks):
- ``theta`` is (N, 2, 3); the grid is (N, H, W, 2) holding (x, y) in [-1, 1] coordinates,
  ``grid[n, h, w] = theta[n] @ (x_w, y_h, 1)`` with ``x_w = -1 + 2 w / (W - 1)``, ``y_h = -1 + 2 h / (H - 1)``.
- the sampler reads input pixel ``((gx + 1) (W_in - 1) / 2, (gy + 1) (H_in - 1) / 2)`` bilinearly,
  with zeros outside the input.
"""
from __future__ import annotations

import numpy as np


def base_grid(h: int, w: int) -> np.ndarray:
    """(H, W, 3) array of (x, y, 1)."""
    xs = np.linspace(-1.0, 1.0, w) if w > 1 else np.zeros(1)
    ys = np.linspace(-1.0, 1.0, h) if h > 1 else np.zeros(1)
    b = np.empty((h, w, 3))
    b[..., 0] = xs[None, :]
    b[..., 1] = ys[:, None]
    b[..., 2] = 1.0
    return b


def grid_generator_forward(theta, h: int, w: int) -> np.ndarray:
    theta = np.asarray(theta, np.float64)
    return np.einsum("hwk,nik->nhwi", base_grid(h, w), theta)


def grid_generator_backward(dgrid) -> np.ndarray:
    dgrid = np.asarray(dgrid, np.float64)
    _, h, w, _ = dgrid.shape
    return np.einsum("nhwi,hwk->nik", dgrid, base_grid(h, w))


def _corners(grid, hin, win):
    ix = (grid[..., 0] + 1.0) * (win - 1) / 2.0
    iy = (grid[..., 1] + 1.0) * (hin - 1) / 2.0
    x0 = np.floor(ix).astype(np.int64)
    y0 = np.floor(iy).astype(np.int64)
    return ix, iy, x0, y0


def _gather(x, n_idx, yy, xx):
    """x[n, :, yy, xx] with zeros outside; returns (N, C, H, W) and validity mask."""
    _, _, hin, win = x.shape
    valid = (yy >= 0) & (yy < hin) & (xx >= 0) & (xx < win)
    yc = np.clip(yy, 0, hin - 1)
    xc = np.clip(xx, 0, win - 1)
    v = x[n_idx, :, yc, xc]  # (N, H, W, C)
    v = np.where(valid[..., None], v, 0.0)
    return np.moveaxis(v, -1, 1), valid


def sampler_forward(x, grid) -> np.ndarray:
    x = np.asarray(x, np.float64)
    grid = np.asarray(grid, np.float64)
    n, _, hin, win = x.shape
    ix, iy, x0, y0 = _corners(grid, hin, win)
    wx1 = ix - x0
    wy1 = iy - y0
    n_idx = np.arange(n)[:, None, None]
    out = 0.0
    for dy_, wy in ((0, 1 - wy1), (1, wy1)):
        for dx_, wx in ((0, 1 - wx1), (1, wx1)):
            v, _ = _gather(x, n_idx, y0 + dy_, x0 + dx_)
            out = out + v * (wy * wx)[:, None]
    return out


def sampler_backward(x, grid, dy):
    """Returns (dx, dgrid) of ``sum(dy * sampler_forward(x, grid))``."""
    x = np.asarray(x, np.float64)
    grid = np.asarray(grid, np.float64)
    dy = np.asarray(dy, np.float64)
    n, c, hin, win = x.shape
    ix, iy, x0, y0 = _corners(grid, hin, win)
    wx1 = ix - x0
    wy1 = iy - y0
    n_idx = np.arange(n)[:, None, None]
    dx = np.zeros_like(x)
    dix = np.zeros(grid.shape[:-1])
    diy = np.zeros(grid.shape[:-1])
    for dy_, wy, sy in ((0, 1 - wy1, -1.0), (1, wy1, 1.0)):
        for dx_, wx, sx in ((0, 1 - wx1, -1.0), (1, wx1, 1.0)):
            yy, xx = y0 + dy_, x0 + dx_
            v, valid = _gather(x, n_idx, yy, xx)
            g = (dy * v).sum(axis=1)  # (N, H, W)
            dix += g * wy * sx
            diy += g * wx * sy
            contrib = dy * (wy * wx * valid)[:, None]  # (N, C, H, W)
            nn = np.broadcast_to(n_idx, yy.shape)
            sel = valid
            np.add.at(dx, (nn[sel], slice(None), yy[sel], xx[sel]),
                      np.moveaxis(contrib, 1, -1)[sel])
    dgrid = np.stack([dix * (win - 1) / 2.0, diy * (hin - 1) / 2.0], axis=-1)
    return dx, dgrid
