"""Float64 NumPy reference for cuDNN's RNNs (RELU, TANH, LSTM with optional projection, GRU): forward and backward.

Conventions follow cuDNN (cudnnRNNMode_t, cudnnGetRNNWeightParams):

* data is sequence-major and padded: ``x[T, B, inputSize]``; sequence ``b`` is valid for ``t < lengths[b]``;
  ``y[T, B, dirs * outSize]`` (forward direction first), zero past each sequence's length;
* states ``h[numLayers * dirs, B, outSize]``, ``c[numLayers * dirs, B, hiddenSize]``; pseudo-layer ``l * dirs + d``;
  with LSTM clipping, ``cy`` is the last cell state before clipping (as cuDNN reports it; measured on 9.19);
  ``outSize`` is ``projSize`` for LSTM with projection, else ``hiddenSize``;
* weights: ``mats[(pseudo, lin_id)]`` (``[rows, cols]``, acting as ``W @ v``) and ``biases[(pseudo, lin_id)]``;
  a missing key means the matrix or bias does not exist (skip input, bias mode).
  lin_id: RELU/TANH 0=W, 1=R; LSTM 0..3 = W_i, W_f, W_c, W_o, 4..7 = R_i, R_f, R_c, R_o, 8 = projection;
  GRU 0..2 = W_r, W_u (update, cuDNN's "i"), W_h, 3..5 = R_r, R_u, R_h.

Equations (cuDNN): RELU/TANH ``h = act(W x + R h' + bW + bR)``.
LSTM ``i,f,o = sigma(W x + R h' + bW + bR)``, ``g = tanh(...)``, ``c = f c' + i g``, ``h = P (o tanh(c))``.
GRU ``r,u = sigma(...)``, ``n = tanh(W_h x + bW_h + r * (R_h h' + bR_h))``, ``h = (1 - u) n + u h'``.
Skip input: the first layer's input matrices are the identity (inputSize must equal hiddenSize).
The backward pass is hand-written back-propagation through time; ``tests/test_rnn_reference.py`` checks it
against finite differences.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GATES = {"relu": 1, "tanh": 1, "lstm": 4, "gru": 3}


@dataclass
class RNNConfig:
    mode: str                      # "relu" | "tanh" | "lstm" | "gru"
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    proj_size: int | None = None   # LSTM only; None = no projection
    bias_mode: str = "double"      # "none" | "input" | "recurrent" | "double"
    skip_input: bool = False
    clip: tuple[float, float] | None = None  # LSTM cell clipping (forward only)

    @property
    def dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def out_size(self) -> int:
        return self.proj_size if (self.mode == "lstm" and self.proj_size) else self.hidden_size

    @property
    def gates(self) -> int:
        return GATES[self.mode]

    def layer_input(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.dirs * self.out_size


def param_shapes(cfg: RNNConfig) -> tuple[dict, dict]:
    """Shapes of every matrix and bias that exists: ``({(pseudo, lin_id): (rows, cols)}, {(pseudo, lin_id): (n,)})``."""
    mats, biases = {}, {}
    g, H = cfg.gates, cfg.hidden_size
    for layer in range(cfg.num_layers):
        for d in range(cfg.dirs):
            p = layer * cfg.dirs + d
            for k in range(g):
                if not (cfg.skip_input and layer == 0):
                    mats[(p, k)] = (H, cfg.layer_input(layer))
                mats[(p, g + k)] = (H, cfg.out_size)
                if cfg.bias_mode in ("input", "double"):
                    biases[(p, k)] = (H,)
                if cfg.bias_mode in ("recurrent", "double"):
                    biases[(p, g + k)] = (H,)
            if cfg.mode == "lstm" and cfg.proj_size:
                mats[(p, 8)] = (cfg.proj_size, H)
    return mats, biases


def random_params(cfg: RNNConfig, rng: np.random.Generator, scale: float = 0.5) -> tuple[dict, dict]:
    ms, bs = param_shapes(cfg)
    mats = {k: rng.uniform(-scale, scale, s) / np.sqrt(s[1]) * 2 for k, s in ms.items()}
    biases = {k: rng.uniform(-scale, scale, s) for k, s in bs.items()}
    return mats, biases


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def _reverse(a: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Reverse each sequence's valid part in time; padding stays where it is (zeroed)."""
    out = np.zeros_like(a)
    for b, n in enumerate(lengths):
        out[:n, b] = a[:n, b][::-1]
    return out


class _Dir:
    """One direction of one layer: forward with a cache, then backward."""

    def __init__(self, cfg: RNNConfig, layer: int, p: int, mats: dict, biases: dict):
        self.cfg, self.layer, self.p = cfg, layer, p
        g, H = cfg.gates, cfg.hidden_size
        self.W = [mats.get((p, k)) for k in range(g)]
        self.R = [mats[(p, g + k)] for k in range(g)]
        z = np.zeros(H)
        self.bW = [biases.get((p, k), z) for k in range(g)]
        self.bR = [biases.get((p, g + k), z) for k in range(g)]
        self.P = mats.get((p, 8))

    def _wx(self, k, x):
        return (x if self.W[k] is None else x @ self.W[k].T) + self.bW[k]

    def forward(self, x, lengths, h0, c0):
        cfg, T = self.cfg, x.shape[0]
        self.x, self.lengths, self.steps = x, lengths, []
        h, c = h0.copy(), c0.copy()
        c_final = c.copy()  # cuDNN reports cy BEFORE clipping (the recurrence uses the clipped value)
        y = np.zeros((T, x.shape[1], cfg.out_size))
        for t in range(T):
            m = (t < lengths)[:, None]
            s = {"h_prev": h, "c_prev": c, "m": m}
            xt = x[t]
            if cfg.mode in ("relu", "tanh"):
                z = self._wx(0, xt) + h @ self.R[0].T + self.bR[0]
                hn = np.maximum(z, 0) if cfg.mode == "relu" else np.tanh(z)
                s.update(z=z, hn=hn)
                cn = c
            elif cfg.mode == "lstm":
                a = [self._wx(k, xt) + h @ self.R[k].T + self.bR[k] for k in range(4)]
                i, f, gg, o = _sig(a[0]), _sig(a[1]), np.tanh(a[2]), _sig(a[3])
                cn = c_raw = f * c + i * gg
                if cfg.clip is not None:
                    cn = np.clip(c_raw, *cfg.clip)
                c_final = np.where(m, c_raw, c_final)
                tc = np.tanh(cn)
                k_ = o * tc
                hn = k_ @ self.P.T if self.P is not None else k_
                s.update(i=i, f=f, g=gg, o=o, c=cn, tc=tc, k=k_)
            else:  # gru
                r = _sig(self._wx(0, xt) + h @ self.R[0].T + self.bR[0])
                u = _sig(self._wx(1, xt) + h @ self.R[1].T + self.bR[1])
                q = h @ self.R[2].T + self.bR[2]
                n = np.tanh(self._wx(2, xt) + r * q)
                hn = (1 - u) * n + u * h
                s.update(r=r, u=u, q=q, n=n)
                cn = c
            self.steps.append(s)
            h = np.where(m, hn, h)
            c = np.where(m, cn, c)
            y[t] = np.where(m, hn, 0.0)
        return y, h, (c_final if cfg.mode == "lstm" else c)

    def backward(self, dy, dhy, dcy):
        """dy[T,B,out] (zero past lengths), dhy/dcy final-state grads -> dx, dh0, dc0, grads dicts."""
        cfg, g = self.cfg, self.cfg.gates
        dW = [None if w is None else np.zeros_like(w) for w in self.W]
        dR = [np.zeros_like(r) for r in self.R]
        dbW = [np.zeros(cfg.hidden_size) for _ in range(g)]
        dbR = [np.zeros(cfg.hidden_size) for _ in range(g)]
        dP = None if self.P is None else np.zeros_like(self.P)
        dx = np.zeros_like(self.x)
        dh, dc = dhy.copy(), dcy.copy()
        for t in reversed(range(len(self.steps))):
            s, xt = self.steps[t], self.x[t]
            m = s["m"]
            hp = s["h_prev"]
            dhn = np.where(m, dh + dy[t], 0.0)
            dz = [None] * g          # gradients of the gate pre-activations
            dhp = np.zeros_like(hp)
            dcp = dc
            if cfg.mode in ("relu", "tanh"):
                dz[0] = dhn * ((s["z"] > 0) if cfg.mode == "relu" else (1 - s["hn"] ** 2))
            elif cfg.mode == "lstm":
                dk = dhn @ self.P if self.P is not None else dhn
                if dP is not None:
                    dP += dhn.T @ s["k"]
                dct = np.where(m, dc, 0.0) + dk * s["o"] * (1 - s["tc"] ** 2)
                i, f, gg, o = s["i"], s["f"], s["g"], s["o"]
                dz = [dct * gg * i * (1 - i), dct * s["c_prev"] * f * (1 - f),
                      dct * i * (1 - gg ** 2), dk * s["tc"] * o * (1 - o)]
                dcp = np.where(m, dct * f, dc)
            else:
                r, u, q, n = s["r"], s["u"], s["q"], s["n"]
                dn = dhn * (1 - u)
                dzn = dn * (1 - n ** 2)
                dq = dzn * r
                dz = [dzn * q * r * (1 - r), dhn * (hp - n) * u * (1 - u), dzn]
                dhp += dhn * u
            for k in range(g):
                dzk = dz[k]
                dzr = dq if (cfg.mode == "gru" and k == 2) else dzk   # recurrent-side gradient
                dx[t] += dzk if self.W[k] is None else dzk @ self.W[k]
                if dW[k] is not None:
                    dW[k] += dzk.T @ xt
                dbW[k] += dzk.sum(0)
                dhp += dzr @ self.R[k]
                dR[k] += dzr.T @ hp
                dbR[k] += dzr.sum(0)
            dh = np.where(m, dhp, dh)
            dc = dcp
        mats, biases = {}, {}
        p = self.p
        for k in range(g):
            if dW[k] is not None:
                mats[(p, k)] = dW[k]
            mats[(p, g + k)] = dR[k]
            if cfg.bias_mode in ("input", "double"):
                biases[(p, k)] = dbW[k]
            if cfg.bias_mode in ("recurrent", "double"):
                biases[(p, g + k)] = dbR[k]
        if dP is not None:
            mats[(p, 8)] = dP
        return dx, dh, dc, mats, biases


@dataclass
class RNNResult:
    y: np.ndarray
    hy: np.ndarray
    cy: np.ndarray
    _dirs: list = field(default_factory=list, repr=False)
    _cfg: RNNConfig | None = field(default=None, repr=False)
    _lengths: np.ndarray | None = field(default=None, repr=False)


def forward(cfg: RNNConfig, x, lengths, mats, biases, hx=None, cx=None) -> RNNResult:
    """y, hy, cy for padded sequence-major ``x[T, B, inputSize]`` (float64)."""
    x = np.asarray(x, np.float64)
    T, B, _ = x.shape
    lengths = np.asarray(lengths, np.int64)
    L = cfg.num_layers * cfg.dirs
    hx = np.zeros((L, B, cfg.out_size)) if hx is None else np.asarray(hx, np.float64)
    cx = np.zeros((L, B, cfg.hidden_size)) if cx is None else np.asarray(cx, np.float64)
    hy, cy = np.zeros_like(hx), np.zeros_like(cx)
    valid = (np.arange(T)[:, None] < lengths[None, :])[..., None]
    inp = x * valid
    dirs = []
    for layer in range(cfg.num_layers):
        outs = []
        for d in range(cfg.dirs):
            p = layer * cfg.dirs + d
            run = _Dir(cfg, layer, p, mats, biases)
            xin = inp if d == 0 else _reverse(inp, lengths)
            y, hy[p], cy[p] = run.forward(xin, lengths, hx[p], cx[p])
            outs.append(y if d == 0 else _reverse(y, lengths))
            dirs.append(run)
        inp = np.concatenate(outs, axis=2)
    return RNNResult(inp, hy, cy, dirs, cfg, lengths)


def backward(res: RNNResult, dy, dhy=None, dcy=None):
    """dx, dhx, dcx, (dmats, dbiases) for the loss ``sum(y*dy) + sum(hy*dhy) + sum(cy*dcy)``."""
    cfg, lengths = res._cfg, res._lengths
    T, B = res.y.shape[:2]
    valid = (np.arange(T)[:, None] < lengths[None, :])[..., None]
    dhy = np.zeros_like(res.hy) if dhy is None else np.asarray(dhy, np.float64)
    dcy = np.zeros_like(res.cy) if dcy is None else np.asarray(dcy, np.float64)
    dhx, dcx = np.zeros_like(res.hy), np.zeros_like(res.cy)
    dmats, dbiases = {}, {}
    dout = np.asarray(dy, np.float64) * valid
    O = cfg.out_size
    for layer in reversed(range(cfg.num_layers)):
        din = None
        for d in range(cfg.dirs):
            p = layer * cfg.dirs + d
            run = res._dirs[p]
            dyd = dout[:, :, d * O:(d + 1) * O]
            if d == 1:
                dyd = _reverse(dyd, lengths)
            dx, dhx[p], dcx[p], m, b = run.backward(dyd, dhy[p], dcy[p])
            if d == 1:
                dx = _reverse(dx, lengths)
            din = dx if din is None else din + dx
            dmats.update(m)
            dbiases.update(b)
        dout = din * valid
    return dout, dhx, dcx, (dmats, dbiases)


def to_layout(a: np.ndarray, lengths, layout: str) -> np.ndarray:
    """Padded sequence-major ``[T, B, V]`` -> ``"seq_major"`` (same), ``"batch_major"`` ``[B, T, V]``,
    or ``"packed"`` ``[sum(lengths), V]`` (time step by time step; lengths must be non-increasing)."""
    if layout == "seq_major":
        return a.copy()
    if layout == "batch_major":
        return np.ascontiguousarray(a.transpose(1, 0, 2))
    rows = [a[t, b] for t in range(a.shape[0]) for b in range(a.shape[1]) if t < lengths[b]]
    return np.stack(rows)


def from_layout(a: np.ndarray, lengths, layout: str, T: int) -> np.ndarray:
    """Inverse of :func:`to_layout`; padding positions come back as zeros for ``"packed"``."""
    if layout == "seq_major":
        return a.copy()
    if layout == "batch_major":
        return np.ascontiguousarray(a.transpose(1, 0, 2))
    B = len(lengths)
    out = np.zeros((T, B, a.shape[-1]), a.dtype)
    i = 0
    for t in range(T):
        for b in range(B):
            if t < lengths[b]:
                out[t, b] = a[i]
                i += 1
    return out


def sample_checksums(cfg: RNNConfig, seq_length: int, mini_batch: int) -> dict:
    """The checksums NVIDIA's RNN_v8.0 sample prints, for its deterministic data (x, hx, cx, dy, dhy, dcy
    and biases 1; every matrix filled with 1/size), in float64."""
    ms, bs = param_shapes(cfg)
    mats = {k: np.full(s, 1.0 / (s[0] * s[1])) for k, s in ms.items()}
    biases = {k: np.ones(s) for k, s in bs.items()}
    L = cfg.num_layers * cfg.dirs
    T, B = seq_length, mini_batch
    x = np.ones((T, B, cfg.input_size))
    res = forward(cfg, x, [T] * B, mats, biases, np.ones((L, B, cfg.out_size)), np.ones((L, B, cfg.hidden_size)))
    dx, dhx, dcx, (dm, db) = backward(res, np.ones_like(res.y), np.ones_like(res.hy), np.ones_like(res.cy))
    return {"y": res.y.sum(), "hy": res.hy.sum(), "cy": res.cy.sum() if cfg.mode == "lstm" else 0.0,
            "dx": dx.sum(), "dhx": dhx.sum(), "dcx": dcx.sum() if cfg.mode == "lstm" else 0.0,
            "dw": sum(v.sum() for v in dm.values()) + sum(v.sum() for v in db.values())}
