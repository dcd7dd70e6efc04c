"""Port of NVIDIA's cuDNN sample ``conv_sample`` (cudnn_samples_v9) to cudnn_py.

One convolution configuration, run in float32 and then in float16 (float32 math), forward
(``cudnnConvolutionForward``, IMPLICIT_PRECOMP_GEMM), backward data (``-dgrad``, ALGO_1, or FFT_TILING
on folded tensors with ``-fold``) or backward filter (``-wgrad``, ALGO_1), with alpha 0.8 and beta 0,
checked element by element against a host reference (an error: relative difference above 2e-2 where
the reference exceeds 1 in magnitude, absolute difference elsewhere). Same flags, same data (the
sample's linear congruential generator, one stream per element type) and the same printed lines::

    python examples/conv_sample.py                                   # 1x32x4x4 input, 32 1x1 filters
    python examples/conv_sample.py -c256 -h14 -w14 -k256 -r3 -s3 -pad_h1 -pad_w1 -u1 -v1
    python examples/conv_sample.py -dgrad -c1024 -h14 -w14 -k2048 -r1 -s1 -u2 -v2 -fold
    python examples/conv_sample.py -filterFormat1 -wgrad ...        # NHWC data and filters
    python examples/conv_sample.py -mathType1 -filterFormat2 -n1 -c32 -h16 -w16 -k32 -r5 -s5   # int8x4/x32
    python examples/conv_sample.py -n1 -c30 -h2 -w2 -transformFromNCHW    # NCHW -> NC/32HW32 on the host

Flags: ``-n -c -h -w`` input, ``-k -r -s`` filters, ``-pad_h -pad_w`` padding, ``-u -v`` strides,
``-dgrad``/``-wgrad``, ``-x`` cross-correlation, ``-mathType1`` tensor-op math, ``-filterFormat0/1/2``
(NCHW, NHWC, NCHW_VECT_C int8), ``-dataType0..3`` (checked, as in the sample, but the format decides the
types), ``-b`` benchmark (no check), ``-fold``, ``-transformFromNCHW``/``-transformToNCHW``.

The float16/float32 directions go through the Pythonic layer (``cudnn_py.Convolution``,
``convolution_forward``/``_backward_data``/``_backward_filter`` on strided views of flat device buffers);
the folded backward data and the int8x4/int8x32 (NCHW_VECT_C) convolution, which it does not cover, call
the C layer (``cudnn_py.capi``) as the sample does. Differences: the output buffer is poisoned with NaN
before a float call and a NaN counts as an error (the C check lets NaN through); an exception from
cudnn_py prints as ``CUDNN error at conv_sample.py, code=... (...) in '<function>'``; the sample's host
references are float64 NumPy here. As in the sample, the forward and backward-filter references always
flip the filter (true convolution), so ``-x`` reports errors there unless the filter is 1x1; the
transform flags only print dimensions (the sample converts on the host and keeps the result to itself).
"""
from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
import time
import warnings
from ctypes import byref
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("cudnn_py") is None:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))
import cudnn_py as cdp  # noqa: E402
from cudnn_py import capi  # noqa: E402
from cudnn_py.errors import CudnnError  # noqa: E402
from cudnn_py.core.streams import missing_device  # noqa: E402

THRESHOLD = 2.0e-2
ALPHA, BETA = 0.8, 0.0
PROGRAM = "conv_sample.py"
DIRECTIONS = ("conv", "dgrad", "wgrad")
FORMATS = {0: capi.CUDNN_TENSOR_NCHW, 1: capi.CUDNN_TENSOR_NHWC, 2: capi.CUDNN_TENSOR_NCHW_VECT_C}


# ---------------------------------------------------------------- the sample's data

class Lcg:
    """The sample's generator ``seed = 1103515245 * seed + 12345 (mod 2**32)`` from 123456789; each element
    type has its own (the C sample's function-static seeds), so the float16 run repeats the float32 numbers."""

    A, C, MASK = 1103515245, 12345, 0xFFFFFFFF

    def __init__(self, seed: int = 123456789):
        self.seed = seed

    def seeds(self, n: int) -> np.ndarray:
        """The next ``n`` seeds (uint64), advancing the generator."""
        out = np.empty(n, np.uint64)
        if n == 0:
            return out
        out[0] = (self.A * self.seed + self.C) & self.MASK
        a, c, m = self.A, self.C, 1  # the first m seeds are known; (a, c) jumps m steps ahead
        while m < n:
            k = min(m, n - m)
            out[m:m + k] = (np.uint64(a) * out[:k] + np.uint64(c)) & np.uint64(self.MASK)
            a, c, m = (a * a) & self.MASK, (a * c + c) & self.MASK, m + k
        self.seed = int(out[-1])
        return out

    def uniform(self, n: int) -> np.ndarray:
        """``float(seed) * 2^-32`` as float32, in [0, 1)."""
        return (self.seeds(n).astype(np.float32).astype(np.float64) * 2.3283064e-10).astype(np.float32)

    def small_ints(self, n: int) -> np.ndarray:
        """int8 values in [-2, 2]: ``2 - (int8)(5 * float(seed) * 2^-32)``."""
        five = (np.float32(5) * self.seeds(n).astype(np.float32)).astype(np.float64)
        return (2 - np.trunc(five * 2.3283064e-10)).astype(np.int8)


def new_generators() -> dict[str, Lcg]:
    """One generator per element type, as a fresh C process has them."""
    return {"float32": Lcg(), "float16": Lcg(), "int8": Lcg(), "int8_padded": Lcg()}


def init_image(gens: dict[str, Lcg], n: int, dtype) -> np.ndarray:
    """``n`` values of the sample's ``initImage`` for float32 / float16 / int8 (each from its own stream)."""
    dt = np.dtype(dtype)
    if dt == np.int8:
        return gens["int8"].small_ints(n)
    return gens[dt.name].uniform(n).astype(dt)


def init_image_padded(gens: dict[str, Lcg], dims, dims_padded, vec: int) -> np.ndarray:
    """The sample's ``initImagePadded``: an NCHW_VECT_C int8 buffer of ``dims_padded`` (N, C, H, W; C a
    multiple of ``vec``), values in [-2, 2] where ``n < dims[0]`` and ``c < dims[1]``, zeros elsewhere."""
    n, c, h, w = dims_padded
    i = np.arange(n * c * h * w, dtype=np.int64)
    ni = i // (c * h * w)
    ci = ((i // (h * w * vec)) % (c // vec)) * vec + i % vec
    real = (ni < dims[0]) & (ci < dims[1])
    out = np.zeros(i.size, np.int8)
    out[real] = gens["int8_padded"].small_ints(int(real.sum()))
    return out


# ---------------------------------------------------------------- geometry

def generate_strides(dims, fmt) -> tuple[int, ...]:
    """Element strides of N, C, spatial... ``dims``: packed NCHW (also for NCHW_VECT_C, counted in scalars,
    as the sample does) or channels-last for NHWC."""
    nd = len(dims)
    st = [0] * nd
    if fmt == capi.CUDNN_TENSOR_NHWC:
        st[1] = 1
        st[nd - 1] = dims[1]
        for d in range(nd - 2, 1, -1):
            st[d] = st[d + 1] * dims[d + 1]
        st[0] = st[2] * dims[2]
    else:
        st[nd - 1] = 1
        for d in range(nd - 2, -1, -1):
            st[d] = st[d + 1] * dims[d + 1]
    return tuple(st)


def output_dim(size: int, pad: int, filt: int, stride: int, dilation: int = 1) -> int:
    """Forward output size along one spatial dimension (C integer division, as the sample)."""
    span = size + 2 * pad - ((filt - 1) * dilation + 1)
    return int(span / stride) + 1


def strided(flat: np.ndarray, dims, strides) -> np.ndarray:
    """A NumPy view of a flat buffer with element ``strides``."""
    return np.lib.stride_tricks.as_strided(flat, tuple(dims), tuple(s * flat.itemsize for s in strides))


def to_vect_c(a: np.ndarray, vec: int) -> np.ndarray:
    """Logical N, C, H, W (C a multiple of ``vec``) -> flat NCHW_VECT_C memory ``[N][C/vec][H][W][vec]``."""
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // vec, vec, h, w).transpose(0, 1, 3, 4, 2)).reshape(-1)


def from_vect_c(flat: np.ndarray, dims, vec: int) -> np.ndarray:
    """Flat NCHW_VECT_C memory -> logical N, C, H, W."""
    n, c, h, w = dims
    return flat.reshape(n, c // vec, h, w, vec).transpose(0, 1, 4, 2, 3).reshape(n, c, h, w)


def nchw_to_nc32hw32(a: np.ndarray) -> np.ndarray:
    """The sample's ``fromNCHW``: N, C, H, W -> NC/32HW32 memory (C padded to a multiple of 32 with zeros)."""
    n, c, h, w = a.shape
    cp = -(-c // 32) * 32
    padded = np.zeros((n, cp, h, w), a.dtype)
    padded[:, :c] = a
    return to_vect_c(padded, 32)


def nc32hw32_to_nchw(flat: np.ndarray, dims) -> np.ndarray:
    """The sample's ``toNCHW``: NC/32HW32 memory of ``dims`` (C a multiple of 32) -> N, C, H, W."""
    return from_vect_c(flat, dims, 32)


# ---------------------------------------------------------------- references (float64 / exact int)

def _windows(a, r, s, out_hw, stride, dilation):
    """``a[:, :, p*u + r*dh, q*v + s*dw]`` over all output positions (p, q)."""
    (p, q), (u, v), (dh, dw) = out_hw, stride, dilation
    return a[:, :, r * dh:r * dh + (p - 1) * u + 1:u, s * dw:s * dw + (q - 1) * v + 1:v]


def _pad(a, pad):
    return np.pad(a, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))


def conv_reference(x, w, pad, stride, dilation=(1, 1), flip=True) -> np.ndarray:
    """``sum_{c,r,s} w[k,c,r,s] * x[n, c, p*u - pad + r'*dh, ...]`` with ``r' = R-1-r`` when ``flip`` (true
    convolution, what the sample's reference always computes) else ``r``; float64 for float data, int64 for
    integer data."""
    acc = np.int64 if np.issubdtype(x.dtype, np.integer) else np.float64
    x, w = x.astype(acc), w.astype(acc)
    if flip:
        w = w[:, :, ::-1, ::-1]
    R, S = w.shape[2:]
    out_hw = tuple(output_dim(x.shape[2 + i], pad[i], w.shape[2 + i], stride[i], dilation[i]) for i in range(2))
    xp = _pad(x, pad)
    y = np.zeros((x.shape[0], w.shape[0]) + out_hw, acc)
    for r in range(R):
        for s in range(S):
            y += np.einsum("ncpq,kc->nkpq", _windows(xp, r, s, out_hw, stride, dilation), w[:, :, r, s])
    return y


def dgrad_reference(w, dy, x_shape, pad, stride, dilation=(1, 1), flip=True) -> np.ndarray:
    """The gradient of :func:`conv_reference` with respect to x, for output gradient ``dy`` (float64)."""
    w, dy = w.astype(np.float64), dy.astype(np.float64)
    if flip:
        w = w[:, :, ::-1, ::-1]
    n, c, h, wd = x_shape
    dxp = np.zeros((n, c, h + 2 * pad[0], wd + 2 * pad[1]))
    for r in range(w.shape[2]):
        for s in range(w.shape[3]):
            _windows(dxp, r, s, dy.shape[2:], stride, dilation)[...] += np.einsum("nkpq,kc->ncpq", dy, w[:, :, r, s])
    return dxp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd]


def wgrad_reference(x, dy, w_shape, pad, stride, dilation=(1, 1), flip=True) -> np.ndarray:
    """The gradient of :func:`conv_reference` with respect to w, for output gradient ``dy`` (float64)."""
    xp, dy = _pad(x.astype(np.float64), pad), dy.astype(np.float64)
    dw = np.zeros(w_shape)
    for r in range(w_shape[2]):
        for s in range(w_shape[3]):
            dw[:, :, r, s] = np.einsum("nkpq,ncpq->kc", dy, _windows(xp, r, s, dy.shape[2:], stride, dilation))
    return dw[:, :, ::-1, ::-1] if flip else dw


def epilog(acc: np.ndarray, dtype) -> np.ndarray:
    """The sample's ``doEpilog`` with beta 0: ``alpha * acc`` stored as ``dtype``; for int8 the product is
    taken in float32, rounded (an exact .5 goes to ``floor + fmod(floor, 2)``, as the C code) and saturated."""
    dt = np.dtype(dtype)
    alpha = np.float32(ALPHA)
    if dt != np.int8:
        return (float(alpha) * acc).astype(dt)
    val = alpha * acc.astype(np.float32)
    fl = np.floor(val)
    val = np.where(val - fl == 0.5, fl + np.fmod(fl, 2), np.rint(val))  # rint: no .5 is left for it
    return np.clip(val, -128, 127).astype(np.int8)


def count_errors(dev: np.ndarray, ref: np.ndarray) -> int:
    """The sample's check: int8 must match exactly; float values differ by more than THRESHOLD (relative
    where ``|ref| > 1``) count as errors; NaN counts too."""
    if dev.dtype == np.int8:
        return int(np.count_nonzero(dev != ref))
    d, r = dev.astype(np.float64), ref.astype(np.float64)
    err = np.where(np.abs(r) > 1.0, (d - r) / np.where(r == 0, 1, r), d - r)
    return int(np.count_nonzero(~(np.abs(err) <= THRESHOLD)))


# ---------------------------------------------------------------- output

def print_perf(seconds: float) -> None:
    print("^^^^ CUDA : elapsed = %g sec,  " % seconds)


def report_error(e: Exception) -> None:
    """A failed call, printed like the sample's ``checkCudnnErr`` line."""
    if isinstance(e, CudnnError):
        name = getattr(e.status, "name", e.status)
        print(f"CUDNN error at {PROGRAM}, code={int(e.status)} ({name}) in '{e.function}'")
    else:
        print(f"ERROR at {PROGRAM}: {type(e).__name__}: {e}")


def _atol(text: str) -> int:
    """C ``atol``: the leading integer of ``text`` (0 when there is none)."""
    m = re.match(r"\s*([+-]?\d+)", text)
    return int(m.group(1)) if m else 0


# ---------------------------------------------------------------- options

class Options:
    """The sample's command line, parsed as its ``main`` does (first letter after '-', then a prefix)."""

    def __init__(self):
        self.algo = 0  # 0 conv, 1 dgrad, 2 wgrad
        self.math_type = 0
        self.benchmark = False
        self.data_type = 0
        self.dims = [1, 32, 4, 4]
        self.pad = [0, 0]
        self.stride = [1, 1]
        self.filter_dims = [32, 32, 1, 1]
        self.filter_format = 0
        self.fold = False
        self.mode = capi.CUDNN_CONVOLUTION
        self.transform = None  # "from" / "to"


def parse(argv: list[str]) -> tuple[Options, str | None]:
    """(options, error message for stderr or None), as the sample's switch loop."""
    o = Options()
    for arg in argv:
        if not arg.startswith("-"):
            return o, f"Invalid separator '{arg[:1]}' for option '{arg}'"
        key, rest = arg[1:2], arg[1:]
        ok = True
        if key == "b":
            o.benchmark = True
        elif key == "c":
            o.dims[1] = o.filter_dims[1] = _atol(arg[2:])
        elif key == "d":
            if rest.startswith("dgrad"):
                o.algo = 1
            elif rest.startswith("dataType"):
                o.data_type = _atol(rest[len("dataType"):])
                ok = 0 <= o.data_type <= 3
        elif key == "f":
            if rest.startswith("filterFormat"):
                o.filter_format = _atol(rest[len("filterFormat"):])
            if rest.startswith("fold"):
                o.fold = True
        elif key == "h":
            o.dims[2] = _atol(arg[2:])
        elif key == "k":
            o.filter_dims[0] = _atol(arg[2:])
        elif key == "m":
            if rest.startswith("mathType1"):
                o.math_type = 1
        elif key == "n":
            o.dims[0] = _atol(arg[2:])
        elif key == "p":
            if rest.startswith("pad_h"):
                o.pad[0] = _atol(rest[len("pad_h"):])
            elif rest.startswith("pad_w"):
                o.pad[1] = _atol(rest[len("pad_w"):])
        elif key == "r":
            o.filter_dims[2] = _atol(arg[2:])
        elif key == "s":
            o.filter_dims[3] = _atol(arg[2:])
        elif key == "t":
            if rest.startswith("transformToNCHW"):
                o.transform = "to"
            elif rest.startswith("transformFromNCHW"):
                o.transform = "from"
        elif key == "u":
            o.stride[0] = _atol(arg[2:])
        elif key == "v":
            o.stride[1] = _atol(arg[2:])
        elif key == "w":
            if rest.startswith("wgrad"):
                o.algo = 2
            else:
                o.dims[3] = _atol(arg[2:])
        elif key == "x":
            o.mode = capi.CUDNN_CROSS_CORRELATION
        else:
            ok = False
        if not ok:
            return o, f"Unknown switch '{arg}'"
    return o, None


# ---------------------------------------------------------------- one test (the sample's doTest)

class Test:
    """One configuration in one data type: dimensions (padded for NCHW_VECT_C), strides, host data."""

    def __init__(self, o: Options, fmt, data_type, gens):
        self.o, self.fmt, self.data_type = o, fmt, data_type
        self.vect = fmt == capi.CUDNN_TENSOR_NCHW_VECT_C
        self.vec = 32 if data_type == capi.CUDNN_DATA_INT8x32 else 4
        self.dtype = np.dtype({capi.CUDNN_DATA_FLOAT: np.float32, capi.CUDNN_DATA_HALF: np.float16}.get(
            data_type, np.int8))
        self.dims, self.fdims = list(o.dims), list(o.filter_dims)
        self.odims = [self.dims[0], self.fdims[0]] + [
            output_dim(self.dims[2 + i], o.pad[i], self.fdims[2 + i], o.stride[i]) for i in range(2)]
        self.dims_p, self.fdims_p, self.odims_p = list(self.dims), list(self.fdims), list(self.odims)
        if self.vect:
            up = lambda n: n + (-n) % self.vec  # noqa: E731 - round up to the vector size
            self.dims_p[1], self.fdims_p[1] = up(self.dims_p[1]), up(self.fdims_p[1])
            if self.fdims_p[0] % self.vec:
                self.fdims_p[0] = self.odims_p[1] = up(self.fdims_p[0])
        self.strides = generate_strides(self.dims_p, fmt)
        self.fstrides = generate_strides(self.fdims_p, fmt)
        self.ostrides = generate_strides(self.odims_p, fmt)
        self.sizes = [int(np.prod(d)) for d in (self.dims_p, self.fdims_p, self.odims_p)]
        self.gens = gens

    def print_dims(self) -> None:
        j = lambda d: ", ".join(str(v) for v in d)  # noqa: E731
        print("====USER DIMENSIONS====")
        print(f"input dims are {j(self.dims)}")
        print(f"filter dims are {j(self.fdims)}")
        print(f"output dims are {j(self.odims)}")
        print("====PADDING DIMENSIONS====")
        print(f"padded input dims are {j(self.dims_p)}")
        print(f"padded filter dims are {j(self.fdims_p)}")
        print(f"padded output dims are {j(self.odims_p)}")

    def host_data(self) -> tuple[np.ndarray, ...]:
        """Flat host input, filter and output buffers in memory order, drawn in the sample's order."""
        if self.vect:
            return tuple(init_image_padded(self.gens, d, dp, self.vec) for d, dp in
                         ((self.dims, self.dims_p), (self.fdims, self.fdims_p), (self.odims, self.odims_p)))
        return tuple(init_image(self.gens, n, self.dtype) for n in self.sizes)

    def run(self) -> int:
        """Print, run, check; returns the error count (0 in benchmark mode), as ``doTest``."""
        o = self.o
        self.print_dims()
        try:
            handle = cdp.Handle()
        except CudnnError as e:
            report_error(e)
            return 0 if o.benchmark else 1
        with handle:
            host = self.host_data()
            print(f"Testing {DIRECTIONS[o.algo]}")
            try:
                if self.vect:
                    errors = self.int8_forward(handle, *host)
                elif o.algo == 1 and o.fold:
                    errors = self.folded_dgrad(handle, *host)
                else:
                    errors = self.float_direction(handle, *host)
            except (CudnnError, ValueError, TypeError) as e:
                report_error(e)
                errors = 1
        if not o.benchmark:
            print("Test PASSED" if errors == 0 else f"Test FAILED, num errors = {errors}")
        return 0 if o.benchmark else errors

    # -- float32 / float16 through the Pythonic layer --
    def _views(self, bufs):
        x, w, y = (cdp.DeviceArray(b.ptr, d, self.dtype, st, owner=b) for b, d, st in
                   zip(bufs, (self.dims, self.fdims, self.odims), (self.strides, self.fstrides, self.ostrides)))
        return x, w, y

    def _conv(self) -> cdp.Convolution:
        o = self.o
        return cdp.Convolution(padding=tuple(o.pad), stride=tuple(o.stride),
                                 mode="convolution" if o.mode == capi.CUDNN_CONVOLUTION else "cross_correlation",
                                 math_type="tensor_op" if o.math_type == 1 else "default")

    def float_direction(self, h, hx, hw, hy) -> int:
        """Forward, backward data or backward filter on strided device views; then the host check."""
        o = self.o
        bufs = [cdp.to_device(a) for a in (hx, hw, hy)]
        x, w, y = self._views(bufs)
        out_index = (2, 0, 1)[o.algo]  # the buffer each direction writes: y, x (dx), w (dw)
        bufs[out_index].fill_(np.nan)
        conv = self._conv()
        h.synchronize()
        start = time.perf_counter()
        if o.algo == 0:
            cdp.convolution_forward(h, conv, x, w, y=y, algo="IMPLICIT_PRECOMP_GEMM", alpha=ALPHA, beta=BETA)
        elif o.algo == 1:
            cdp.convolution_backward_data(h, conv, w, y, dx=x, algo="ALGO_1", alpha=ALPHA, beta=BETA)
        else:
            cdp.convolution_backward_filter(h, conv, x, y, dw=w, algo="ALGO_1", alpha=ALPHA, beta=BETA)
        h.synchronize()
        print_perf(time.perf_counter() - start)
        got = bufs[out_index].to_numpy()
        if o.benchmark:
            return 0
        return count_errors(got, self.reference(hx, hw, hy))

    def reference(self, hx, hw, hy) -> np.ndarray:
        """The checked buffer as the sample's host reference computes it, in memory order."""
        o = self.o
        x, w, y = (strided(a, d, st) for a, d, st in
                   zip((hx, hw, hy), (self.dims, self.fdims, self.odims), (self.strides, self.fstrides, self.ostrides)))
        if o.algo == 0:
            acc, dims, st, n = conv_reference(x, w, o.pad, o.stride), self.odims, self.ostrides, self.sizes[2]
        elif o.algo == 1:
            acc = dgrad_reference(w, y, self.dims, o.pad, o.stride, flip=o.mode == capi.CUDNN_CONVOLUTION)
            dims, st, n = self.dims, self.strides, self.sizes[0]
        else:
            acc, dims, st, n = wgrad_reference(x, y, self.fdims, o.pad, o.stride), self.fdims, self.fstrides, \
                self.sizes[1]
        ref = np.zeros(n, self.dtype)
        strided(ref, dims, st)[...] = epilog(acc, self.dtype)
        return ref

    # -- backward data on folded tensors (C layer: the Pythonic layer has no folding) --
    def folded_dgrad(self, h, hx, hw, hy) -> int:
        o = self.o
        bufs = [cdp.to_device(a) for a in (hx, hw, hy)]
        bufs[0].fill_(np.nan)
        dt = self.dtype
        x_desc = cdp.TensorDescriptor(self.dims, dt, self.strides)
        y_desc = cdp.TensorDescriptor(self.odims, dt, self.ostrides)
        w_desc = cdp.FilterDescriptor(self.fdims, dt, layout="NHWC" if self.fmt == capi.CUDNN_TENSOR_NHWC else "NCHW")
        conv_desc = cdp.Convolution(tuple(o.pad), tuple(o.stride), 1, mode=capi.cudnnConvolutionMode_t(o.mode)
                                      ).descriptor(2, dtype=np.float32,
                                                   math_type="tensor_op" if o.math_type == 1 else "default")
        algo = capi.CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        alpha, beta = ctypes.c_float(ALPHA), ctypes.c_float(BETA)
        made = []  # (destroy function, descriptor)

        def create(kind: str, c_type):
            d = c_type()
            getattr(capi, f"cudnnCreate{kind}Descriptor")(byref(d))
            made.append((getattr(capi, f"cudnnDestroy{kind}Descriptor"), d))
            return d

        h.synchronize()
        start = time.perf_counter()
        try:
            f_filter = create("Filter", capi.cudnnFilterDescriptor_t)
            padded_diff = create("Tensor", capi.cudnnTensorDescriptor_t)
            f_conv = create("Convolution", capi.cudnnConvolutionDescriptor_t)
            f_grad = create("Tensor", capi.cudnnTensorDescriptor_t)
            filter_fold, diff_pad, grad_fold, grad_unfold = (
                create("TensorTransform", capi.cudnnTensorTransformDescriptor_t) for _ in range(4))
            capi.cudnnGetFoldedConvBackwardDataDescriptors(
                h.ptr, w_desc.ptr, y_desc.ptr, conv_desc, x_desc.ptr, self.fmt, f_filter, padded_diff, f_conv,
                f_grad, filter_fold, diff_pad, grad_fold, grad_unfold)
            n = ctypes.c_size_t()
            capi.cudnnGetFilterSizeInBytes(f_filter, byref(n))
            folded_w = cdp.empty((n.value,), np.uint8)
            capi.cudnnTransformFilter(h.ptr, filter_fold, byref(one), w_desc.ptr, bufs[1].ptr, byref(zero), f_filter,
                                      folded_w.ptr)
            padded_n, unpadded_n = ctypes.c_size_t(), ctypes.c_size_t()
            capi.cudnnGetTensorSizeInBytes(padded_diff, byref(padded_n))
            capi.cudnnGetTensorSizeInBytes(y_desc.ptr, byref(unpadded_n))
            diff = bufs[2]
            if padded_n.value != unpadded_n.value:
                diff = cdp.empty((padded_n.value,), np.uint8)
                capi.cudnnTransformTensorEx(h.ptr, diff_pad, byref(one), y_desc.ptr, bufs[2].ptr, byref(zero),
                                            padded_diff, diff.ptr)
            capi.cudnnGetTensorSizeInBytes(f_grad, byref(n))
            folded_dx = cdp.zeros((n.value,), np.uint8)
            ws = ctypes.c_size_t()
            capi.cudnnGetConvolutionBackwardDataWorkspaceSize(h.ptr, f_filter, padded_diff, f_conv, f_grad, algo,
                                                             byref(ws))
            print(f"\n WORKSPACE = {ws.value} ")
            work = h.workspace.get(ws.value, h.stream) if ws.value else None
            capi.cudnnConvolutionBackwardData(h.ptr, byref(one), f_filter, folded_w.ptr, padded_diff, diff.ptr, f_conv,
                                              algo, work, ws.value, byref(zero), f_grad, folded_dx.ptr)
            capi.cudnnTransformTensorEx(h.ptr, grad_unfold, byref(alpha), f_grad, folded_dx.ptr, byref(beta),
                                        x_desc.ptr, bufs[0].ptr)
            h.synchronize()
        finally:
            for destroy, d in made:
                destroy(d)
        print_perf(time.perf_counter() - start)
        if o.benchmark:
            return 0
        return count_errors(bufs[0].to_numpy(), self.reference(hx, hw, hy))

    # -- int8x4 / int8x32 forward (C layer: vectorised int8 types are outside the Pythonic descriptors) --
    def int8_forward(self, h, hx, hw, hy) -> int:
        o = self.o
        x_buf, w_buf, y_buf = (cdp.to_device(a) for a in (hx, hw, hy))
        w_used = cdp.empty(w_buf.shape, np.int8)
        dims = lambda d: (ctypes.c_int * 4)(*d)  # noqa: E731
        x_desc, y_desc = capi.cudnnTensorDescriptor_t(), capi.cudnnTensorDescriptor_t()
        w_desc, conv_desc = capi.cudnnFilterDescriptor_t(), capi.cudnnConvolutionDescriptor_t()
        capi.cudnnCreateTensorDescriptor(byref(x_desc))
        capi.cudnnCreateTensorDescriptor(byref(y_desc))
        capi.cudnnCreateFilterDescriptor(byref(w_desc))
        capi.cudnnCreateConvolutionDescriptor(byref(conv_desc))
        try:
            capi.cudnnSetTensorNdDescriptorEx(x_desc, self.fmt, self.data_type, 4, dims(self.dims_p))
            capi.cudnnSetTensorNdDescriptorEx(y_desc, self.fmt, self.data_type, 4, dims(self.odims_p))
            pair = lambda v: (ctypes.c_int * 2)(*v)  # noqa: E731
            capi.cudnnSetConvolutionNdDescriptor(conv_desc, 2, pair(o.pad), pair(o.stride), pair((1, 1)), o.mode,
                                                 capi.CUDNN_DATA_INT32)
            capi.cudnnSetFilterNdDescriptor(w_desc, self.data_type, self.fmt, 4, dims(self.fdims_p))
            if self.data_type == capi.CUDNN_DATA_INT8x32:
                capi.cudnnReorderFilterAndBias(h.ptr, w_desc, capi.CUDNN_DEFAULT_REORDER, w_buf.ptr, w_used.ptr, 0,
                                               None, None)
                capi.cudnnSetConvolutionReorderType(conv_desc, capi.CUDNN_NO_REORDER)
            else:
                w_used.copy_(w_buf)
            if o.math_type == 1:
                capi.cudnnSetConvolutionMathType(conv_desc, capi.CUDNN_TENSOR_OP_MATH)
            algo = capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
            ws = ctypes.c_size_t()
            capi.cudnnGetConvolutionForwardWorkspaceSize(h.ptr, x_desc, w_desc, conv_desc, y_desc, algo, byref(ws))
            work = h.workspace.get(ws.value, h.stream) if ws.value else None
            alpha, beta = ctypes.c_float(ALPHA), ctypes.c_float(BETA)
            h.synchronize()
            start = time.perf_counter()
            capi.cudnnConvolutionForward(h.ptr, byref(alpha), x_desc, x_buf.ptr, w_desc, w_used.ptr, conv_desc, algo,
                                         work, ws.value, byref(beta), y_desc, y_buf.ptr)
            h.synchronize()
            print_perf(time.perf_counter() - start)
        finally:
            capi.cudnnDestroyTensorDescriptor(x_desc)
            capi.cudnnDestroyTensorDescriptor(y_desc)
            capi.cudnnDestroyFilterDescriptor(w_desc)
            capi.cudnnDestroyConvolutionDescriptor(conv_desc)
        if o.benchmark:
            return 0
        x, w = from_vect_c(hx, self.dims_p, self.vec), from_vect_c(hw, self.fdims_p, self.vec)
        ref = to_vect_c(epilog(conv_reference(x, w, o.pad, o.stride), np.int8), self.vec)
        return count_errors(y_buf.to_numpy(), ref)


# ---------------------------------------------------------------- main

def transform_layout(dims, direction: str) -> np.ndarray:
    """The ``-transformFromNCHW``/``-transformToNCHW`` modes: print the NCHW and NC/32HW32 dimensions and
    convert sample data on the host (``direction`` "from": NCHW -> NC/32HW32, "to": back); returns the result."""
    padded = list(dims)
    if padded[1] % 32:
        padded[1] += 32 - padded[1] % 32
    else:
        print("Data layout of NCHW and NC/32H32W will be the same since c is multiple of 32")
    j = lambda d: ", ".join(str(v) for v in d)  # noqa: E731
    print("==== NCHW DIMENSIONS ====")
    print(f"NCHW dims are {j(dims)}")
    print("==== NC/32H32W DIMENSIONS ====")
    print(f"NC/32H32W dims are {j(padded)}")
    gens = new_generators()
    if direction == "from":
        return nchw_to_nc32hw32(init_image(gens, int(np.prod(dims)), np.int8).reshape(dims))
    return nc32hw32_to_nchw(init_image(gens, int(np.prod(padded)), np.int8), padded)


def device_version() -> int:
    """``major * 10 + minor`` of device 0."""
    with cdp.Handle() as h:
        major, minor = h.cuda_device.compute_capability
    return major * 10 + minor


def no_gpu() -> bool:
    """Whether no GPU can be used, said in one line on stderr: checked before any GPU work."""
    err = missing_device()
    if err is not None:
        print(f"{PROGRAM}: {err}", file=sys.stderr)
    return err is not None


def main(argv: list[str]) -> int:
    """Run the sample; returns its exit status (0, or -1 when a test failed)."""
    print("Executing: " + PROGRAM + "".join(" " + a for a in argv))
    o, err = parse(argv)
    if err:
        print(err, file=sys.stderr)
        return 1
    fmt = FORMATS.get(o.filter_format)
    gens = new_generators()
    ret = 0
    try:
        if o.transform and fmt == capi.CUDNN_TENSOR_NCHW:
            transform_layout(o.dims, o.transform)  # the sample keeps the converted data to itself
            return 0
        if fmt != capi.CUDNN_TENSOR_NCHW_VECT_C:
            if fmt is None:
                print("This sample only supports CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC, and CUDNN_TENSOR_NCHW_VECT_C!")
                return 0
            if no_gpu():
                return 1
            print(f"Using format {fmt.name} (for INT8x4 and INT8x32 tests use CUDNN_TENSOR_NCHW_VECT_C)")
            print("Testing single precision")
            ret += Test(o, fmt, capi.CUDNN_DATA_FLOAT, gens).run()
            print("Testing half precision (math in single precision)")
            ret += Test(o, fmt, capi.CUDNN_DATA_HALF, gens).run()
            return -1 if ret else 0
        print("Using format CUDNN_TENSOR_NCHW_VECT_C (for single and double precision tests use a different format)")
        k, c = o.filter_dims[0], o.filter_dims[1]
        if o.algo == 0 and k % 32 == 0 and c % 32 == 0:
            if no_gpu():
                return 1
            sm = device_version()
            if sm < 61:
                print(f"Device version {sm} does not support int8x4!")
            elif k > 64:
                print("Currently int8x4 does not support reorder for filter output feature map ('k') greater than 64")
            else:
                print("Testing int8x4 (math in int32)")
                ret += Test(o, fmt, capi.CUDNN_DATA_INT8x4, gens).run()
            if sm < 75:
                print(f"Skipping test, SM{sm} does not support int8x32")
            else:
                print("Testing int8x32 (math in int32)")
                ret += Test(o, fmt, capi.CUDNN_DATA_INT8x32, gens).run()
        elif o.algo != 0:
            print("This sample does not support dgrad or wgrad for INT8x4 and INT8x32!")
        elif k % 32:
            print(f"Filter output feature map count ('k = {k}') is not a multiple of 32")
        else:
            print(f"Filter input feature map count ('c = {c}') is not a multiple of 32")
    except RuntimeError as e:  # no usable GPU or driver (a failed cuDNN call is reported where it happens)
        if isinstance(e, CudnnError):
            raise
        print(f"{PROGRAM}: {e}", file=sys.stderr)
        return 1
    return -1 if ret else 0


if __name__ == "__main__":
    # a line-for-line port calls the C functions cuDNN 9 deprecates on purpose, as the C program does: no warning each
    warnings.filterwarnings("ignore", r"cudnn\w+ is deprecated in cuDNN 9", DeprecationWarning)
    sys.exit(main(sys.argv[1:]))
