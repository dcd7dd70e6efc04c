"""Port of NVIDIA's cuDNN sample ``multiHeadAttention`` (cudnn_samples_v9) and its reference model ``attn_ref.py``.

The sample runs cuDNN's multi-head attention API (``cudnnMultiHeadAttnForward``, ``...BackwardData``,
``...BackwardWeights``) on random data, in inference (every query step on its own, or all at once with
``-attnSweep1``) or training, and prints its configuration, sequence lengths, attention windows and the
calls it makes. With ``-attnFileDump1`` (batch 1, beam 1) it writes the inputs, weights, outputs and
gradients as text files (``q.dat``, ``wq.dat``, ``out.dat``, ``dq.dat``, ``dwq.dat``, ``meta.dat``, ...)
into the current folder, which the reference model then checks::

    python examples/multi_head_attention.py -attnTrain1                       # defaults: batch 4, beam 3
    python examples/multi_head_attention.py -attnFileDump1 -attnTrain1 -attnDataType0 -attnCompPrec0 \\
        -attnNumHeads3 -attnBeamSize1 -attnBatchSize1 -attnQsize8 -attnKsize8 -attnVsize8 -attnProjQsize2 \\
        -attnProjKsize2 -attnProjVsize2 -attnProjOsize8 -attnSeqLenQ4 -attnSeqLenK10 -attnSmScaler1.0
    python examples/multi_head_attention.py attn_ref [FOLDER]                 # the reference check

Same flags (``-attnTrain<0|1> -attnDataType<n> ...``; none prints the help), same data distribution
(uniform, mean 0, variance 0.5) and the same printed lines. ``attn_ref`` is the sample's ``attn_ref.py``
(NumPy/autograd) rewritten with analytic float64 gradients: same files, checks (rtol 1e-4, atol 1e-3) and
lines; it exits with 1 when a check fails.

Beam size 1 with every projection size above zero and non-empty attention windows runs through the
Pythonic layer (``cudnn_py.MultiHeadAttention``, ``attention_forward``, ``attention_backward_data``,
``attention_backward_weights``); other configurations (the default beam size is 3) call the C layer
(``cudnn_py.capi``) as the sample does, since the Pythonic layer handles beam 1 only. Differences: the
data comes from NumPy's generator seeded with ``-attnRandSeed`` (the sample ignores that flag and seeds
from ``std::random_device``, so its numbers change from run to run); ``-attnFileDump1`` also needs
projections (the reference model reads all four weight files); a failing cuDNN call prints
``CUDNN error at multi_head_attention.py, code=... (...) in '<function>'``; ``attn_ref`` prints its
"dgrad/wgrad may be inaccurate" warning once per head (autograd's tracing repeated it per Jacobian).
"""
from __future__ import annotations

import ctypes
import importlib.util
import math
import re
import sys
import time
import warnings
from ctypes import byref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("cudnn_py") is None:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))
import cudnn_py as cdp  # noqa: E402
from cudnn_py import capi  # noqa: E402
from cudnn_py.errors import CudnnError  # noqa: E402
from cudnn_py.core.streams import missing_device  # noqa: E402

PROGRAM = "multi_head_attention.py"
INIT_MEAN, INIT_VAR = 0.0, 0.5
#: name, scanf format, description, default: the sample's option table
FLAGS = (
    ("attnTrain", "%d", "selects API mode (0-inference, 1-training)", 0),
    ("attnDataType", "%d", "selects data format (0-FP16, 1-FP32, 2-FP64)", int(capi.CUDNN_DATA_FLOAT)),
    ("attnCompPrec", "%d", "selects math format (0-FP16, 1-FP32, 2-FP64)", int(capi.CUDNN_DATA_FLOAT)),
    ("attnNumHeads", "%d", "number of attenton heads", 2),
    ("attnBatchSize", "%d", "batch size for Q, R, K, V and O arguments", 4),
    ("attnBeamSize", "%d", "number of sentence candidates in Q, R inputs", 3),
    ("attnSmScaler", "%lg", "softmax smoothing or sharpening coefficient", 1.0),
    ("attnDropoutRate", "%g", "dropout rate settings applied during training", 0.0),
    ("attnQsize", "%d", "original vector length for 'queries'", 32),
    ("attnKsize", "%d", "original vector length for 'keys'", 32),
    ("attnVsize", "%d", "original vector length for 'values'", 32),
    ("attnProjQsize", "%d", "length of 'queries' vector after projection", 8),
    ("attnProjKsize", "%d", "length of 'keys' vector after projection", 8),
    ("attnProjVsize", "%d", "length of 'values' vector after projection", 8),
    ("attnProjOsize", "%d", "length of 'output' vector after projection", 8),
    ("attnSeqLenQ", "%d", "largest sequence length for Q, R, O arguments", 24),
    ("attnSeqLenK", "%d", "largest sequence length for K, V arguments", 20),
    ("attnDataLayout", "%d", "data layout for Q, K, V, O inputs", 0),
    ("attnResLink", "%d", "enable/disable residual connections", 0),
    ("attnProjBias", "%d", "enable/disable projection biases", 0),
    ("attnSweep", "%d", "sweep all time-steps in one inference API call", 0),
    ("attnRandGeom", "%d", "randomize attention task dimensions", 0),
    ("attnRandSeed", "%d", "seed for the random number generator", 1234),
    ("attnFileDump", "%d", "dump weights/data to file for single sentence", 0),
)
T, N, B, V = (int(capi.CUDNN_SEQDATA_TIME_DIM), int(capi.CUDNN_SEQDATA_BATCH_DIM), int(capi.CUDNN_SEQDATA_BEAM_DIM),
              int(capi.CUDNN_SEQDATA_VECT_DIM))
#: -attnDataLayout -> the order of the time, batch and beam axes in memory (outermost first; vectors innermost)
LAYOUTS = ((T, N, B), (T, B, N), (N, T, B), (N, B, T), (B, T, N), (B, N, T))
#: (data type, compute precision) -> (data dtype, compute dtype), the combinations the sample runs
PRECISIONS: dict[tuple[int, int], tuple[type, type]] = {
    (int(capi.CUDNN_DATA_HALF), int(capi.CUDNN_DATA_HALF)): (np.float16, np.float16),
    (int(capi.CUDNN_DATA_HALF), int(capi.CUDNN_DATA_FLOAT)): (np.float16, np.float32),
    (int(capi.CUDNN_DATA_FLOAT), int(capi.CUDNN_DATA_FLOAT)): (np.float32, np.float32),
    (int(capi.CUDNN_DATA_DOUBLE), int(capi.CUDNN_DATA_DOUBLE)): (np.float64, np.float64)}


class SampleExit(Exception):
    """The sample stops: ``message`` to stderr, exit ``status``."""

    def __init__(self, message: str, status: int = -1):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- command line

_SCANF = {"%d": r"\s*[+-]?\d+",
          "%lg": r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)",
          "%g": r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)"}


def usage() -> str:
    """The sample's help screen."""
    lines = ["This is the cuDNN multi-head attention API test.", "", f"Usage: ./{PROGRAM} [OPTIONS]", "",
             "Program options:", ""]
    lines += ["%-20s - %s" % (f"-{name}<{fmt}>", desc) for name, fmt, desc, _ in FLAGS]
    return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> dict:
    """Options by name (defaults for those not given), as the sample's parser: an argument's text after its
    first character must start with an option name, followed by a number in that option's scanf format."""
    opts = {name: default for name, _, _, default in FLAGS}
    for arg in argv:
        for name, fmt, _, _ in FLAGS:
            if arg[1:].startswith(name):
                m = re.match(_SCANF[fmt], arg[1 + len(name):], re.IGNORECASE)
                if m is None:
                    raise SampleExit(f"ERROR: missing numerical argument in option '{arg}'\n")
                text = m.group(0)
                opts[name] = int(text) if fmt == "%d" else float(np.float32(text)) if fmt == "%g" else float(text)
                break
        else:
            raise SampleExit(f"ERROR: unknown switch '{arg}'\n")
    return opts


@dataclass
class Config:
    """The test configuration (``attnConfig``) with sizes derived as the sample does."""
    train: bool
    data_type: int
    comp_prec: int
    heads: int
    batch: int
    beam: int
    scaler: float
    dropout: float
    q_size: int
    k_size: int
    v_size: int
    q_proj: int
    k_proj: int
    v_proj: int
    o_proj: int
    seq_q: int
    seq_k: int
    layout: int
    res_link: bool
    proj_bias: bool
    sweep: int
    rand_geom: bool
    rand_seed: int
    file_dump: bool
    dtype: np.dtype = field(init=False)
    compute_dtype: np.dtype = field(init=False)
    axes: tuple[int, int, int, int] = field(init=False)
    q_lengths: list[int] = field(default_factory=list)
    k_lengths: list[int] = field(default_factory=list)
    lo_win: list[int] = field(default_factory=list)
    hi_win: list[int] = field(default_factory=list)

    @classmethod
    def from_options(cls, o: dict) -> Config:
        """Validated as the sample's ``main`` and ``setup`` do (:class:`SampleExit` on the first problem)."""
        dt_cp = (o["attnDataType"], o["attnCompPrec"])
        if dt_cp not in PRECISIONS:
            raise SampleExit(f"ERROR: -attnDataType{dt_cp[0]} and -attnCompPrec{dt_cp[1]} are not supported\n")
        if o["attnProjBias"] not in (0, 1):
            raise SampleExit("ERROR: wrong -attnProjBias value\n")
        c = cls(o["attnTrain"] != 0, *dt_cp, o["attnNumHeads"], o["attnBatchSize"], o["attnBeamSize"],
                o["attnSmScaler"], o["attnDropoutRate"], o["attnQsize"], o["attnKsize"], o["attnVsize"],
                o["attnProjQsize"], o["attnProjKsize"], o["attnProjVsize"], o["attnProjOsize"], o["attnSeqLenQ"],
                o["attnSeqLenK"], o["attnDataLayout"], o["attnResLink"] != 0, o["attnProjBias"] != 0, o["attnSweep"],
                o["attnRandGeom"] != 0, o["attnRandSeed"], o["attnFileDump"] != 0)
        if c.heads <= 0 or c.batch <= 0 or c.beam <= 0:
            raise SampleExit("ERROR: wrong attention NumHeads/BatchSize/BeamSize arguments\n")
        if c.file_dump:
            flag = f"-attnFileDump{o['attnFileDump']}"
            for bad, need in ((c.batch > 1, "-attnBatchSize=1"), (c.beam > 1, "-attnBeamSize=1"),
                              (c.rand_geom, "-attnRandGeom=0"), (c.proj_bias, "-attnProjBias=0"),
                              (c.train and c.dropout > 0.0, "-attnDropoutRate=0"),
                              (min(c.q_proj, c.k_proj, c.v_proj, c.o_proj) <= 0,
                               "all projection sizes above 0 in this port")):
                if bad:
                    raise SampleExit(f"ERROR: {flag} requires {need}\n")
        if not 0 <= c.layout < len(LAYOUTS):
            raise SampleExit(f"ERROR: wrong -attnDataLayout{c.layout} option\n")
        c.axes = LAYOUTS[c.layout] + (V,)
        c.dtype, c.compute_dtype = (np.dtype(d) for d in PRECISIONS[dt_cp])
        return c

    # sizes, as attnConfig's helpers
    @property
    def o_len(self) -> int:
        v_len = self.v_proj if self.v_proj > 0 else self.v_size
        return self.o_proj if self.o_proj > 0 else v_len * self.heads

    def dims(self, which: str) -> list[int]:
        """Dimensions by axis (time, batch, beam, vector) of "q", "k", "v" or "o"."""
        d = [0] * 4
        d[N] = self.batch
        d[B] = self.beam if which in ("q", "o") else 1  # keys and values are shared by the beams (all-to-one)
        d[T] = self.seq_q if which in ("q", "o") else self.seq_k
        d[V] = {"q": self.q_size, "k": self.k_size, "v": self.v_size, "o": self.o_len}[which]
        return d

    def count(self, which: str) -> int:
        return math.prod(self.dims(which))

    @property
    def pythonic(self) -> bool:
        """Whether ``cudnn_py.MultiHeadAttention`` covers this configuration (else the C layer runs it)."""
        return (self.beam == 1 and min(self.q_proj, self.k_proj, self.v_proj, self.o_proj) > 0
                and all(lo < hi for lo, hi in zip(self.lo_win, self.hi_win)))

    @property
    def attn_mode(self) -> int:
        return int(capi.CUDNN_ATTN_QUERYMAP_ALL_TO_ONE) | int(
            capi.CUDNN_ATTN_ENABLE_PROJ_BIASES if self.proj_bias else capi.CUDNN_ATTN_DISABLE_PROJ_BIASES)


def testgen(c: Config, rng: np.random.Generator) -> None:
    """Sequence lengths and attention windows (random with ``-attnRandGeom1``), then the parameter printout."""
    nq, nk = c.batch * c.beam, c.batch
    if c.rand_geom:
        c.q_lengths = [int(rng.integers(1, c.seq_q + 1)) for _ in range(nq)]
        c.k_lengths = [int(rng.integers(1, c.seq_k + 1)) for _ in range(nk)]
        c.lo_win, c.hi_win = [], []
        for _ in range(c.seq_q):
            c.lo_win.append(int(rng.integers(0, c.seq_k)))
            c.hi_win.append(int(rng.integers(c.lo_win[-1], c.seq_k + 1)))
    else:
        c.q_lengths, c.k_lengths = [c.seq_q] * nq, [c.seq_k] * nk
        c.lo_win, c.hi_win = [0] * c.seq_q, [c.seq_k] * c.seq_q
    axes = "".join("TNBV"[a] for a in c.axes)
    proj = lambda v, what: f"{v}{'' if v else f' (no {what} weights)'}"  # noqa: E731
    print("Test parameters:\n")
    print(f"#### attnTrain       = {int(c.train)} ({'training' if c.train else 'inference'})")
    print(f"#### attnDataType    = {c.data_type} (FP{8 * c.dtype.itemsize})")
    print(f"#### attnCompPrec    = {c.comp_prec} (FP{8 * c.compute_dtype.itemsize})")
    print(f"#### attnNumHeads    = {c.heads}")
    print(f"#### attnBatchSize   = {c.batch}")
    print(f"#### attnBeamSize    = {c.beam}")
    print("#### attnSmScaler    = %.4e" % c.scaler)
    print("#### attnDropoutRate = %.4f" % c.dropout)
    print(f"#### attnQsize       = {c.q_size}")
    print(f"#### attnKsize       = {c.k_size}")
    print(f"#### attnVsize       = {c.v_size}")
    print(f"#### attnProjQsize   = {proj(c.q_proj, 'Q')}")
    print(f"#### attnProjKsize   = {proj(c.k_proj, 'K')}")
    print(f"#### attnProjVsize   = {proj(c.v_proj, 'V')}")
    print(f"#### attnProjOsize   = {proj(c.o_proj, 'O')}")
    print(f"#### attnSeqLenQ     = {c.seq_q}")
    print(f"#### attnSeqLenK     = {c.seq_k}")
    print(f"#### attnDataLayout  = {c.layout} ({','.join(axes)})")
    print(f"#### attnResLink     = {int(c.res_link)}")
    print(f"#### attnProjBias    = {int(c.proj_bias)}")
    print(f"#### attnSweep       = {c.sweep}")
    print(f"#### attnRandGeom    = {int(c.rand_geom)}")
    print(f"#### attnRandSeed    = {c.rand_seed}")
    print(f"#### attnFileDump    = {int(c.file_dump)}\n")
    for i, n in enumerate(c.q_lengths):
        print(f"sequence_length_q[idx={i}]={n}")
    print()
    for i, n in enumerate(c.k_lengths):
        print(f"sequence_length_k[idx={i}]={n}")
    print()
    for t, (lo, hi) in enumerate(zip(c.lo_win, c.hi_win)):
        print(f"attention_window[time={t}]={lo}:{hi}")
    print()


def init_buffer(rng: np.random.Generator, n: int, dtype) -> np.ndarray:
    """``n`` values uniform with mean INIT_MEAN and variance INIT_VAR (the sample's ``initBuffer``)."""
    half_range = 0.5 * math.sqrt(12.0 * INIT_VAR)
    return rng.uniform(INIT_MEAN - half_range, INIT_MEAN + half_range, n).astype(dtype)


def make_data(c: Config, rng: np.random.Generator, n_weights: int) -> dict:
    """Host inputs in the sample's order: weights (flat weight space), q, k, v, and dout in training; the
    sequence data flat in the ``-attnDataLayout`` memory order."""
    data = {"w": init_buffer(rng, n_weights, c.dtype)}
    for name in ("q", "k", "v"):
        data[name] = init_buffer(rng, c.count(name), c.dtype)
    if c.train:
        data["do"] = init_buffer(rng, c.count("o"), c.dtype)
    return data


# ---------------------------------------------------------------- sequence data layouts

def seq_strides(dims, axes) -> list[int]:
    """Element strides by axis (time, batch, beam, vector) of a packed container whose axes are ``axes``
    (outermost first)."""
    st, n = [0] * 4, 1
    for a in reversed(axes):
        st[a] = n
        n *= dims[a]
    return st


def seq_view(flat: np.ndarray, dims, axes) -> np.ndarray:
    """A flat sequence buffer as an array indexed [time, batch, beam, vector]."""
    st = seq_strides(dims, axes)
    return np.lib.stride_tricks.as_strided(flat, tuple(dims), tuple(s * flat.itemsize for s in st))


def to_batch_major(c: Config, flat: np.ndarray, which: str) -> np.ndarray:
    """Beam-1 sequence data in the sample's layout -> ``[batch, time, vector]`` (what the Pythonic layer takes)."""
    return np.ascontiguousarray(seq_view(flat, c.dims(which), c.axes)[:, :, 0, :].transpose(1, 0, 2))


def from_batch_major(c: Config, a: np.ndarray, which: str) -> np.ndarray:
    """``[batch, time, vector]`` -> flat in the sample's layout (beam 1)."""
    flat = np.empty(c.count(which), a.dtype)
    seq_view(flat, c.dims(which), c.axes)[:, :, 0, :] = a.transpose(1, 0, 2)
    return flat


# ---------------------------------------------------------------- the two ways of running it

def _calls(c: Config, forward, backward_data, backward_weights) -> None:
    """The sample's sequence of API calls, printed as it makes them."""
    if c.train:
        print("Calling cudnnMultiHeadAttnForward(currIdx = -1)")
        forward(-1)
        print("Calling cudnnMultiHeadAttnBackwardData()")
        backward_data()
        print("Calling cudnnMultiHeadAttnBackwardWeights()")
        backward_weights()
    elif c.sweep == 0:
        for t in range(c.seq_q):
            print(f"Calling cudnnMultiHeadAttnForward(currIdx = {t})")
            forward(t)
    else:
        print("Calling cudnnMultiHeadAttnForward(currIdx = -1)")
        forward(-1)


def run_pythonic(h: cdp.Handle, c: Config, get_data) -> dict:
    """Run beam-1 configurations with ``cudnn_py.MultiHeadAttention`` and the ``attention_*`` calls.

    ``get_data(n_weights)`` returns the host inputs (:func:`make_data`); ``"w"`` may also be a dict of named
    weights (``{"wq": [heads, proj, q_size], ...}``). Returns host results in the sample's layouts:
    ``out`` (and ``dq``, ``dk``, ``dv``, ``dw`` flat weight space in training), plus ``weights``/``dweights``
    as named arrays.
    """
    dropout = cdp.Dropout(h, c.dropout, seed=0) if c.train and c.dropout > 0.0 else None
    attn = cdp.MultiHeadAttention(
        c.heads, c.q_size, c.k_size, c.v_size, q_proj_size=c.q_proj, k_proj_size=c.k_proj, v_proj_size=c.v_proj,
        o_proj_size=c.o_proj, max_seq_q=c.seq_q, max_seq_kv=c.seq_k, max_batch=c.batch, scale=c.scaler,
        biases=c.proj_bias, dtype=c.dtype, compute_dtype=c.compute_dtype, math_type="default", attn_dropout=dropout)
    data = get_data(attn.weight_space_size(h) // c.dtype.itemsize)
    w = attn.new_weights(h)
    if isinstance(data["w"], dict):
        cdp.load_attention_weights(h, attn, w, data["w"])
    else:
        w.copy_(data["w"])
    q, k, v = (cdp.to_device(to_batch_major(c, data[n], n)) for n in ("q", "k", "v"))
    out = cdp.empty((c.batch, c.seq_q, c.o_len), c.dtype).fill_(np.nan)
    kw = dict(seq_len_q=c.q_lengths, seq_len_kv=c.k_lengths, lo_win=np.array(c.lo_win),
              hi_win=np.array(c.hi_win), residuals=q if c.res_link else None, o=out)
    state: dict = {}
    if c.train:
        dout = cdp.to_device(to_batch_major(c, data["do"], "o"))
        grads = [cdp.empty(a.shape, c.dtype).fill_(np.nan) for a in (q, k, v)]
        dw = attn.new_weights(h)  # zeros: the weight gradients are added to it

    def forward(t):
        state["fwd"] = cdp.attention_forward(h, attn, q, k, v, w, training=c.train, curr_idx=t, **kw)

    def backward_data():
        cdp.attention_backward_data(h, attn, state["fwd"], dout, w, dq=grads[0], dk=grads[1], dv=grads[2])

    def backward_weights():
        cdp.attention_backward_weights(h, attn, state["fwd"], dout, w, dweights=dw)

    h.synchronize()
    start = time.perf_counter()
    _calls(c, forward, backward_data, backward_weights)
    h.synchronize()
    print("Elapsed time = %f sec" % (time.perf_counter() - start))
    res = {"out": from_batch_major(c, out.to_numpy(), "o"), "weights": cdp.read_attention_weights(h, attn, w)}
    if c.train:
        for name, g, which in zip(("dq", "dk", "dv"), grads, ("q", "k", "v")):
            res[name] = from_batch_major(c, g.to_numpy(), which)
        res["dw"] = dw.to_numpy()
        res["dweights"] = cdp.read_attention_weights(h, attn, dw)
    res["inputs"] = {n: data[n] for n in ("w", "q", "k", "v", "do") if n in data}
    return res


def run_capi(h: cdp.Handle, c: Config, get_data) -> dict:
    """Run any configuration through the C layer, call for call as the sample (beams, layouts, zero
    projection sizes, empty attention windows). Returns ``out`` (and ``dq``, ``dk``, ``dv``, ``dw``) flat."""
    dropout = cdp.Dropout(h, c.dropout, seed=0) if c.train and c.dropout > 0.0 else None
    attn = capi.cudnnAttnDescriptor_t()
    descs = {n: capi.cudnnSeqDataDescriptor_t() for n in "qkvo"}
    capi.cudnnCreateAttnDescriptor(byref(attn))
    for d in descs.values():
        capi.cudnnCreateSeqDataDescriptor(byref(d))
    try:
        capi.cudnnSetAttnDescriptor(
            attn, c.attn_mode, c.heads, c.scaler, c.data_type, c.comp_prec, capi.CUDNN_DEFAULT_MATH,
            None if dropout is None else dropout.ptr, None, c.q_size, c.k_size, c.v_size, c.q_proj, c.k_proj,
            c.v_proj, c.o_proj, c.seq_q, c.seq_k, c.batch, c.beam)
        n_w, n_work, n_reserve = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
        capi.cudnnGetMultiHeadAttnBuffers(h.ptr, attn, byref(n_w), byref(n_work),
                                          byref(n_reserve) if c.train else None)
        if c.train and n_reserve.value == 0:
            raise SampleExit("ERROR: zero reserve buffer size in training mode\n")
        data = get_data(n_w.value // c.dtype.itemsize)
        q_len, k_len = (ctypes.c_int * len(c.q_lengths))(*c.q_lengths), (ctypes.c_int * len(c.k_lengths))(*c.k_lengths)
        dev_q_len = cdp.to_device(np.array(c.q_lengths, np.int32))
        dev_k_len = cdp.to_device(np.array(c.k_lengths, np.int32))
        axes = (ctypes.c_int * 4)(*c.axes)
        for name, d in descs.items():
            lengths, count = (q_len, len(c.q_lengths)) if name in "qo" else (k_len, len(c.k_lengths))
            capi.cudnnSetSeqDataDescriptor(d, c.data_type, 4, (ctypes.c_int * 4)(*c.dims(name)), axes, count,
                                           lengths, None)
        w = cdp.to_device(data["w"]) if n_w.value else None
        q, k, v = (cdp.to_device(data[n]) for n in ("q", "k", "v"))
        out = cdp.empty((c.count("o"),), c.dtype).fill_(np.nan)
        work = h.workspace.get(n_work.value, h.stream) if n_work.value else None
        reserve = cdp.empty((n_reserve.value,), np.uint8).fill_(0xFF) if c.train else None
        lo, hi = (ctypes.c_int * c.seq_q)(*c.lo_win), (ctypes.c_int * c.seq_q)(*c.hi_win)
        w_ptr = None if w is None else w.ptr
        if c.train:
            dout = cdp.to_device(data["do"])
            dq, dk, dv = (cdp.empty(a.shape, c.dtype).fill_(np.nan) for a in (q, k, v))
            dw = cdp.zeros((n_w.value // c.dtype.itemsize,), c.dtype) if n_w.value else None
        common = (dev_q_len.ptr, dev_k_len.ptr)

        def forward(t):
            capi.cudnnMultiHeadAttnForward(
                h.ptr, attn, t, lo, hi, *common, descs["q"], q.ptr, q.ptr if c.res_link else None, descs["k"], k.ptr,
                descs["v"], v.ptr, descs["o"], out.ptr, n_w.value, w_ptr, n_work.value, work,
                n_reserve.value if c.train else 0, reserve.ptr if c.train else None)

        def backward_data():
            capi.cudnnMultiHeadAttnBackwardData(
                h.ptr, attn, lo, hi, *common, descs["o"], dout.ptr, descs["q"], dq.ptr, q.ptr, descs["k"], dk.ptr,
                k.ptr, descs["v"], dv.ptr, v.ptr, n_w.value, w_ptr, n_work.value, work, n_reserve.value, reserve.ptr)

        def backward_weights():
            capi.cudnnMultiHeadAttnBackwardWeights(
                h.ptr, attn, capi.CUDNN_WGRAD_MODE_ADD, descs["q"], q.ptr, descs["k"], k.ptr, descs["v"], v.ptr,
                descs["o"], dout.ptr, n_w.value, w_ptr, None if dw is None else dw.ptr, n_work.value, work,
                n_reserve.value, reserve.ptr)

        h.synchronize()
        start = time.perf_counter()
        _calls(c, forward, backward_data, backward_weights)
        h.synchronize()
        print("Elapsed time = %f sec" % (time.perf_counter() - start))
        res: dict = {"out": out.to_numpy()}
        if c.train:
            res.update(dq=dq.to_numpy(), dk=dk.to_numpy(), dv=dv.to_numpy(),
                       dw=np.zeros(0, c.dtype) if dw is None else dw.to_numpy())
        res["inputs"] = {n: data[n] for n in ("w", "q", "k", "v", "do") if n in data}
        return res
    finally:
        for d in descs.values():
            capi.cudnnDestroySeqDataDescriptor(d)
        capi.cudnnDestroyAttnDescriptor(attn)


# ---------------------------------------------------------------- -attnFileDump1

def _number(v: float, dtype: np.dtype) -> str:
    return " % .*e" % (16 if dtype == np.float64 else 8, float(v))


def save_data(path: Path, c: Config, flat: np.ndarray, which: str) -> None:
    """One sentence (batch 0, beam 0) as text: a row per vector element, a column per time step."""
    a = seq_view(flat, c.dims(which), c.axes)[:, 0, 0, :]
    path.write_text("".join("".join(_number(x, c.dtype) for x in row) + "\n" for row in a.T))


def save_weights(path: Path, c: Config, w: np.ndarray) -> None:
    """A ``[heads, rows, cols]`` weight tensor as text: ``heads * rows`` lines of ``cols`` numbers."""
    path.write_text("".join("".join(_number(x, c.dtype) for x in row) + "\n" for row in w.reshape(-1, w.shape[-1])))


def dump(folder: Path, c: Config, res: dict) -> None:
    """The files ``-attnFileDump1`` writes (what :func:`attn_ref` reads)."""
    (folder / "meta.dat").write_text("# train_mode, attn_heads, softmax_scaler, residuals\n"
                                     "%d %d %.16e %d\n" % (c.train, c.heads, c.scaler, c.res_link))
    ins = res["inputs"]
    for name, which in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o")):
        save_data(folder / f"{name}.dat", c, res["out"] if name == "out" else ins[name], which)
    for name in ("wq", "wk", "wv", "wo"):
        save_weights(folder / f"{name}.dat", c, res["weights"][name])
    if c.train:
        save_data(folder / "dout.dat", c, ins["do"], "o")
        for name in ("dq", "dk", "dv"):
            save_data(folder / f"{name}.dat", c, res[name], name[1])
        for name in ("wq", "wk", "wv", "wo"):
            save_weights(folder / f"d{name}.dat", c, res["dweights"][name])


# ---------------------------------------------------------------- the reference model (attn_ref.py)

def _softmax_columns(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=0))
    return e / e.sum(axis=0)


def attn_reference(q, k, v, wq, wk, wv, wo, scaler, residual, dout=None):
    """The reference model for one sentence, vectors in columns: ``q [q_size, Tq]``, ``k [k_size, Tk]``,
    ``v [v_size, Tk]``, weights ``[heads, rows, cols]``. Returns ``(out, grads, spiky_heads)``; ``grads``
    (with ``dout``) holds dq (residual path included), dk, dv, dwq, dwk, dwv, dwo; ``spiky_heads``: the heads
    whose softmax has exactly one value above ``1 / Tk`` in every column (their gradients are noise)."""
    out = q.copy() if residual else np.zeros((wo.shape[1], q.shape[1]))
    threshold = 1.0 / k.shape[1]
    grads = {n: np.zeros_like(a) for n, a in (("dq", q), ("dk", k), ("dv", v), ("dwq", wq), ("dwk", wk),
                                              ("dwv", wv), ("dwo", wo))}
    if dout is not None and residual:
        grads["dq"] += dout
    spiky = []
    for i in range(wq.shape[0]):
        qb, kb, vb = wq[i] @ q, wk[i] @ k, wv[i] @ v
        alpha = _softmax_columns(scaler * kb.T @ qb)
        if np.all(np.sum(alpha > threshold, axis=0) == 1):
            spiky.append(i)
        hb = vb @ alpha
        out = out + wo[i] @ hb
        if dout is None:
            continue
        dhb = wo[i].T @ dout
        grads["dwo"][i] = dout @ hb.T
        dvb = dhb @ alpha.T
        dalpha = vb.T @ dhb
        dbeta = scaler * alpha * (dalpha - np.sum(alpha * dalpha, axis=0))
        dqb, dkb = kb @ dbeta, qb @ dbeta.T
        for name, d_bar, x, wx in (("q", dqb, q, wq), ("k", dkb, k, wk), ("v", dvb, v, wv)):
            grads["dw" + name][i] = d_bar @ x.T
            grads["d" + name] += wx[i].T @ d_bar
    return out, (grads if dout is not None else None), spiky


def _shape(a) -> str:
    return "x".join(str(n) for n in np.shape(a))


def _load_weights(folder: Path, tag: str, name: str, heads: int) -> np.ndarray:
    w = np.loadtxt(folder / name, ndmin=2)
    if w.shape[0] % heads:
        raise SampleExit(f"Number of rows={w.shape[0]} is not divisible by nheads={heads} in file '{name}'", 0)
    w = w.reshape(heads, w.shape[0] // heads, w.shape[1])
    print(f"Loaded [{_shape(w)}] of {tag} weights from '{name}'")
    return w


def _load_data(folder: Path, tag: str, name: str, w: np.ndarray, dim: int = 2) -> np.ndarray:
    d = np.loadtxt(folder / name, ndmin=2)
    if d.shape[0] != w.shape[dim]:
        raise SampleExit(f"Number of rows={d.shape[0]} in file '{name}' does not match weight cols={w.shape[dim]}", 0)
    print(f"Loaded [{_shape(d)}] of {tag} data from '{name}'")
    return d


def _compare(tag: str, a: np.ndarray, b: np.ndarray, rtol: float = 1e-4, atol: float = 1e-3) -> bool:
    """attn_ref.py's check: ``|a - b| <= atol + rtol * |b|`` everywhere; prints the verdict and the misses.
    As there, ``rel_err`` is ``max(|a - b| / b)`` (signed b)."""
    a, b = a.ravel(), b.ravel()
    bad = np.flatnonzero(np.abs(a - b) > atol + rtol * np.abs(b))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_err = np.max(np.abs(a - b) / b)
    print("%s: %s [rel_err=%.6e abs_err=%.6e, rtol=%.6e, atol=%.6e]"
          % ("PASS" if bad.size == 0 else "FAIL", tag, rel_err, np.max(np.abs(a - b)), rtol, atol))
    for i in bad:
        print("%s_res[%d]=%+.6e, %s_ref[%d]=%+.6e" % (tag, i, a[i], tag, i, b[i]))
    print()
    return bad.size == 0


def attn_ref(folder: str | Path = ".") -> int:
    """Check the files of ``-attnFileDump1`` in ``folder`` against the reference model; returns the number
    of failed checks."""
    folder = Path(folder)
    bar = "=" * 70
    train, heads, scaler, rlink = np.loadtxt(folder / "meta.dat", unpack=True)
    train, heads, rlink = int(train), int(heads), int(rlink)
    print(bar)
    print("Multi-head attention model: train=%d, nheads=%d, scaler=%.4e" % (train, heads, scaler))
    print(bar + "\n")
    w = {n.lower(): _load_weights(folder, n, n.lower() + ".dat", heads) for n in ("WQ", "WK", "WV", "WO")}
    q = _load_data(folder, "Q", "q.dat", w["wq"])
    k = _load_data(folder, "K", "k.dat", w["wk"])
    v = _load_data(folder, "V", "v.dat", w["wv"])
    dout = _load_data(folder, "DOUT", "dout.dat", w["wo"], 1) if train else None
    out, grads, spiky = attn_reference(q, k, v, w["wq"], w["wk"], w["wv"], w["wo"], scaler, rlink != 0, dout)
    for _ in spiky:
        print("WARNING: dgrad/wgrad may be inaccurate")
    print("\n" + bar)
    print("Checking results from cuDNN library")
    print(bar + "\n")
    failed = int(not _compare("out", _load_data(folder, "OUT", "out.dat", w["wo"], 1), out))
    if train:
        dq = _load_data(folder, "DQ", "dq.dat", w["wq"])
        failed += not _compare("dq", dq + dout if rlink else dq, grads["dq"])  # cuDNN's dq leaves out the residual
        failed += not _compare("dk", _load_data(folder, "DK", "dk.dat", w["wk"]), grads["dk"])
        failed += not _compare("dv", _load_data(folder, "DV", "dv.dat", w["wv"]), grads["dv"])
        for n in ("WQ", "WK", "WV", "WO"):
            failed += not _compare("d" + n.lower(), _load_weights(folder, "D" + n, f"d{n.lower()}.dat", heads),
                                   grads["d" + n.lower()])
    return failed


# ---------------------------------------------------------------- main

def run(argv: list[str], path: str = "auto") -> dict:
    """The sample: parse, print, run (``path``: "auto", "pythonic" or "capi"), dump; returns the results.

    Raises :class:`SampleExit` where the sample stops.
    """
    print("Executing: " + PROGRAM + "".join(" " + a for a in argv) + "\n")
    if not argv:
        print(usage())
        raise SampleExit("", -1)
    c = Config.from_options(parse(argv))
    if (err := missing_device()) is not None:
        raise SampleExit(f"{PROGRAM}: {err}", 1)
    rng = np.random.default_rng(c.rand_seed)
    with cdp.Handle() as h:
        testgen(c, rng)
        use_pythonic = c.pythonic if path == "auto" else path == "pythonic"
        res = (run_pythonic if use_pythonic else run_capi)(h, c, lambda n: make_data(c, rng, n))
        if c.file_dump:
            dump(Path("."), c, res)
    print("\nTest DONE\n")
    return res


def main(argv: list[str]) -> int:
    """Command line entry: the sample, or ``attn_ref [FOLDER]`` for the reference check; returns the exit status."""
    try:
        if argv[:1] == ["attn_ref"]:
            return 1 if attn_ref(argv[1] if len(argv) > 1 else ".") else 0
        run(argv)
        return 0
    except SampleExit as e:
        if str(e):
            print(str(e), file=sys.stdout if e.status == 0 else sys.stderr)
        return e.status
    except CudnnError as e:
        name = getattr(e.status, "name", e.status)
        print(f"CUDNN error at {PROGRAM}, code={int(e.status)} ({name}) in '{e.function}'\n", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as e:  # refused by cudnn_py before C was called
        print(f"ERROR: {e}\n", file=sys.stderr)
        return 1
    except RuntimeError as e:  # no usable GPU or driver
        print(f"{PROGRAM}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    # a line-for-line port calls the C functions cuDNN 9 deprecates on purpose, as the C program does: no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    sys.exit(main(sys.argv[1:]))
