"""Local response normalisation across channels, and divisive normalisation; forward and backward.

::

    lrn = LRN(n=5, alpha=1e-4, beta=0.75, k=2.0)                 # cuDNN's defaults
    y = lrn_forward(h, lrn, x)                                  # y = x * (k + alpha/n * sum_window x^2)^-beta
    dx = lrn_backward(h, lrn, x, y, dy)
    y = divisive_normalization_forward(h, lrn, x, means=m)      # spatial window, per channel
    dx, dmeans = divisive_normalization_backward(h, lrn, x, dy, means=m)   # means treated as independent

The window of size n around index i spans ``[i - (n-1)//2, i + n - 1 - (n-1)//2]``; LRN runs over C. Divisive
normalisation works on each channel over an n-wide window in each of the S spatial dimensions: ``y_i = x_i * (k +
alpha / n**S * sum_{j in window(i)} (x_j - means_i)**2) ** -beta`` (means zero when not given; measured, cuDNN's
manual gives no formula). x is 4-D or 5-D. The calls' ``alpha``/``beta`` are the usual blending factors.
"""
from __future__ import annotations

from ctypes import byref, c_double, c_uint
from typing import NamedTuple

from cudnn_py import capi
from cudnn_py._deprecation import alias
from cudnn_py.core.args import float_arg, int_arg
from cudnn_py.core.descriptors import Descriptor, Settings, read_back, setting
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops._common import Out, blend, check_array, desc, instance_of, launch, new_output, output, scalars
from cudnn_py.clib.recording import WorkspaceArg
from cudnn_py.calls.prepared import prepared
from cudnn_py.errors import InvalidValueError

__all__ = ["LRN", "lrn_forward", "lrn_backward", "divisive_normalization_forward", "divisive_normalization_backward",
           "DivisiveNormalizationGrads"]


class _LRNDescriptor(Descriptor):
    """A ``cudnnLRNDescriptor_t`` of the settings :class:`cudnn_py.LRN` validated, read back from cuDNN."""

    _handle_type = capi.cudnnLRNDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateLRNDescriptor", "cudnnDestroyLRNDescriptor"
    _shown = ("n", "alpha", "beta", "k")
    _cache_name = "descriptors.lrn"

    def __init__(self, n: int, alpha: float, beta: float, k: float):
        super().__init__()
        capi.cudnnSetLRNDescriptor(self._ptr, n, alpha, beta, k)

    def _get(self):
        n, a, b, k = c_uint(), c_double(), c_double(), c_double()
        capi.cudnnGetLRNDescriptor(self.ptr, byref(n), byref(a), byref(b), byref(k))
        return n.value, a.value, b.value, k.value

    n = read_back(0, "The window (channels).")
    alpha = read_back(1, "The variance scale.")
    beta = read_back(2, "The power.")
    k = read_back(3, "The bias.")


class LRN(Settings):
    """LRN settings, checked against cuDNN's limits once: hashable, with one shared ``cudnnLRNDescriptor_t``.

    ``n`` (the window) an int in [CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N] (1..16), ``alpha``, ``beta >= CUDNN_LRN_MIN_BETA``
    (0.01), ``k >= CUDNN_LRN_MIN_K`` (1e-5); the defaults are cuDNN's. The settings read back as properties.
    """

    __slots__ = ("_n", "_alpha", "_beta", "_k", "_desc")
    _c_class = _LRNDescriptor

    def __init__(self, n: int = 5, alpha: float = 1e-4, beta: float = 0.75, k: float = 2.0) -> None:
        self._n = int_arg(n, "LRN window n", capi.CUDNN_LRN_MIN_N, capi.CUDNN_LRN_MAX_N)
        self._alpha = float_arg(alpha, "LRN alpha")
        self._beta = float_arg(beta, "LRN beta", capi.CUDNN_LRN_MIN_BETA)
        self._k = float_arg(k, "LRN k", capi.CUDNN_LRN_MIN_K)
        self._desc: _LRNDescriptor | None = None

    n: int = setting("_n")
    alpha: float = setting("_alpha")
    beta: float = setting("_beta")
    k: float = setting("_k")

    def _key(self):
        return (self._n, self._alpha, self._beta, self._k)

    def __repr__(self):
        return f"LRN(n={self._n}, alpha={self._alpha}, beta={self._beta}, k={self._k})"


class DivisiveNormalizationGrads(NamedTuple):
    """What :func:`divisive_normalization_backward` returns."""
    dx: DeviceArray
    dmeans: DeviceArray | None


def _input(lrn, x, handle: Handle) -> DeviceArray:
    """x checked (4-D or 5-D), after ``lrn``."""
    instance_of(lrn, LRN, "lrn")
    xa = check_array(x, "x", handle, floating=True)
    if xa.ndim not in (4, 5):
        raise InvalidValueError(f"LRN and divisive normalisation take 4-D or 5-D tensors (N, C, *spatial); x has "
                                f"shape {xa.shape}")
    return xa


@prepared(inputs=("x",), outputs=("y",), inplace=False, scalars=("alpha", "beta"), moved=("y",))
def lrn_forward(handle: Handle, lrn: LRN, x: DeviceArrayLike, *, y: Out | None = None,
                alpha: float = 1.0, beta: float = 0.0) -> DeviceArray | Out:
    """``y = alpha * lrn(x) + beta * y`` (``cudnnLRNCrossChannelForward``); returns y (allocated if not given)."""
    xa = _input(lrn, x, handle)
    ya = output(y, "y", handle, xa.shape, xa.dtype, like=xa)
    blend(handle, capi.cudnnLRNCrossChannelForward, (lrn, capi.CUDNN_LRN_CROSS_CHANNEL_DIM1), xa.dtype, alpha, beta,
          [xa], ya)
    return ya if y is None else y


@prepared(inputs=("x", "y", "dy"), outputs=("dx",), inplace=False, scalars=("alpha", "beta"), moved=("dx",))
def lrn_backward(handle: Handle, lrn: LRN, x: DeviceArrayLike, y: DeviceArrayLike, dy: DeviceArrayLike,
                 *, dx: Out | None = None, alpha: float = 1.0,
                 beta: float = 0.0) -> DeviceArray | Out:
    """``dx = alpha * dL/dx + beta * dx`` from the forward's x, y and dy (``cudnnLRNCrossChannelBackward``)."""
    xa = _input(lrn, x, handle)
    ya = check_array(y, "y", handle, dtype=xa.dtype, shape=xa.shape)
    dya = check_array(dy, "dy", handle, dtype=xa.dtype, shape=xa.shape)
    dxa = output(dx, "dx", handle, xa.shape, xa.dtype, like=dya)
    blend(handle, capi.cudnnLRNCrossChannelBackward, (lrn, capi.CUDNN_LRN_CROSS_CHANNEL_DIM1), xa.dtype, alpha, beta,
          [ya, dya, xa], dxa)
    return dxa if dx is None else dx


def _like_x(a, name: str, xa, handle: Handle):
    """``a`` (None: None) checked to have x's shape, dtype and strides: cuDNN describes it with x's descriptor."""
    if a is None:
        return None
    a = check_array(a, name, handle, dtype=xa.dtype, shape=xa.shape)
    if a.strides != xa.strides:
        raise InvalidValueError(f"{name} must have x's strides {xa.strides} (cuDNN describes them with x's "
                                f"descriptor); it has {a.strides}")
    return a


def _temps(xa: DeviceArray) -> tuple[WorkspaceArg, WorkspaceArg]:
    """The two scratch tensors in the handle's workspace, each covering x's span (cuDNN describes them as x)."""
    each = -(-xa.span()[1] * xa.dtype.itemsize // 256) * 256
    return WorkspaceArg(2 * each), WorkspaceArg(2 * each, each)


@prepared(inputs=("x", "means"), outputs=("y",), inplace=False, scalars=("alpha", "beta"), moved=("y",))
def divisive_normalization_forward(handle: Handle, lrn: LRN, x: DeviceArrayLike, means: DeviceArrayLike | None = None,
                                   *, y: Out | None = None, alpha: float = 1.0,
                                   beta: float = 0.0) -> DeviceArray | Out:
    """``y = alpha * divnorm(x, means) + beta * y`` (``cudnnDivisiveNormalizationForward``); returns y. ``means``
    (x's shape) defaults to zeros; cuDNN's two temporaries come from the handle's workspace."""
    xa = _input(lrn, x, handle)
    ma = _like_x(means, "means", xa, handle)
    ya = output(y, "y", handle, xa.shape, xa.dtype, like=xa)
    t1, t2 = _temps(xa)
    al, be = scalars(xa.dtype, alpha, beta)
    launch(handle, capi.cudnnDivisiveNormalizationForward, handle.ptr, lrn, capi.CUDNN_DIVNORM_PRECOMPUTED_MEANS, al,
           desc(xa), xa, ma, t1, t2, be, desc(ya), ya)
    return ya if y is None else y


@prepared(inputs=("x", "dy", "means"), outputs=("dx", "dmeans"), inplace=False,
          scalars=("alpha", "beta"), moved=("dx", "dmeans"))
def divisive_normalization_backward(handle: Handle, lrn: LRN, x: DeviceArrayLike, dy: DeviceArrayLike,
                                    means: DeviceArrayLike | None = None, *,
                                    dx: DeviceArrayLike | None = None, dmeans: DeviceArrayLike | None = None,
                                    alpha: float = 1.0, beta: float = 0.0) -> DivisiveNormalizationGrads:
    """:class:`DivisiveNormalizationGrads` ``(dx, dmeans)`` (``cudnnDivisiveNormalizationBackward``).

    dmeans is computed (and allocated if not given) when ``means`` or ``dmeans`` is given, else None; the means are
    treated as an independent input. For an even window size cuDNN's dx is not the exact gradient of its forward
    (it sums over the forward window, not its mirror image).
    """
    xa = _input(lrn, x, handle)
    ma = _like_x(means, "means", xa, handle)
    dya = _like_x(dy, "dy", xa, handle)
    # one descriptor describes dx and dmeans: a missing one takes the other's layout
    dxa = None if dx is None else output(dx, "dx", handle, xa.shape, xa.dtype)
    dma = None if dmeans is None else output(dmeans, "dmeans", handle, xa.shape, xa.dtype)
    if dxa is not None and dma is not None and dma.strides != dxa.strides:
        raise InvalidValueError(f"dmeans must have dx's strides {dxa.strides} (one descriptor describes both); "
                                f"it has {dma.strides}")
    if dxa is None:
        dxa = output(None, "dx", handle, xa.shape, xa.dtype, like=xa) if dma is None else \
            new_output(handle, xa.shape, xa.dtype, dma.strides)
    if dma is None and means is not None:
        dma = new_output(handle, xa.shape, xa.dtype, dxa.strides)
    t1, t2 = _temps(xa)
    al, be = scalars(xa.dtype, alpha, beta)
    launch(handle, capi.cudnnDivisiveNormalizationBackward, handle.ptr, lrn, capi.CUDNN_DIVNORM_PRECOMPUTED_MEANS, al,
           desc(xa), xa, ma, dya, t1, t2, be, desc(dxa), dxa, dma)
    return DivisiveNormalizationGrads(dxa, dma)


LRNDescriptor = alias("LRNDescriptor", LRN, use="cudnn_py.LRN")
lrn_descriptor = alias("lrn_descriptor", LRN, use="cudnn_py.LRN")
