"""FP8 graphs (:meth:`QuantBuilders.fp8_matmul`, :meth:`QuantBuilders.fp8_conv_fprop`): FP8 operands, their
descales on the float32 product, an optional output scale and amax, the pattern cuDNN's FP8 engines recognise.
Block-scale (MX) operations are not offered: cuDNN 9.19 has no engine for them on Hopper (docs/graph_operations.md).
"""
from __future__ import annotations

from cudnn_py import capi
from cudnn_py.core.dtypes import cudnn_dtype
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from .base import Builder

__all__ = ["QuantBuilders", "FP8_DTYPES"]

_DT = capi.cudnnDataType_t
#: the FP8 operand types of the FP8 builders
FP8_DTYPES = (_DT.CUDNN_DATA_FP8_E4M3, _DT.CUDNN_DATA_FP8_E5M2)


class QuantBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods for FP8 graphs."""

    def _fp8_operand(self, t, role: str, what: str):
        t = self._own(t, role)
        if t.dtype not in FP8_DTYPES:
            raise InvalidTypeError(f"{what}: {role} must be FP8 (e4m3 or e5m2), got {t.dtype.name}")
        return t

    def _fp8_factor(self, t, role: str, ndim: int, what: str, need: str):
        if t is None:
            raise InvalidValueError(f"{what} needs {role}= ({need}: a float32 tensor of shape {(1,) * ndim})")
        t = self._own(t, role)
        if t.shape != (1,) * ndim or t.dtype != _DT.CUDNN_DATA_FLOAT:
            raise InvalidTypeError(f"{what}: {role} must be a float32 tensor of shape {(1,) * ndim}, got "
                                   f"{t.describe()}")
        return t

    def _fp8_epilogue(self, prod, factors: list, scale_out, out_dtype, amax: bool, what: str, name):
        """prod * descales [-> amax] [* scale_out], output dtype set; returns y, or (y, amax) with ``amax``."""
        ndim = prod.ndim
        for role, t in factors:
            prod = self.mul(prod, self._fp8_factor(t, role, ndim, what, "the dequantization factor"),
                            name=name and f"{name}.{role}")
        out_dt = self.io_dtype if out_dtype is None else cudnn_dtype(out_dtype)
        if out_dt in FP8_DTYPES and scale_out is None:
            raise InvalidValueError(f"{what} with an FP8 output needs the output scale (scale_y=/scale_c=)")
        peak = (self.reduction(prod, "amax", axes=range(ndim), name=name and f"{name}.amax").set_dtype("float32")
                if amax else None)
        if scale_out is not None:
            prod = self.mul(prod, self._fp8_factor(scale_out, "scale", ndim, what, "the output scale"),
                            name=name and f"{name}.scale")
        prod.set_dtype(out_dt)
        return (prod, peak) if amax else prod

    def fp8_matmul(self, a, b, *, descale_a=None, descale_b=None, scale_c=None, out_dtype=None, amax: bool = False,
                   compute_dtype="float32", name: str | None = None):
        """c = (a @ b) * descale_a * descale_b [* scale_c] with FP8 ``a`` (…, M, K) and ``b`` (…, K, N).
        ``descale_a``/``descale_b``: float32 tensors of shape (1,)*rank (required); ``scale_c``: required for an
        FP8 ``out_dtype`` (default: the graph's io dtype). ``amax=True`` also returns max |c| before ``scale_c``
        (float32, (1,)*rank). Returns c (virtual, dtype set), or (c, amax)."""
        what = "fp8_matmul"
        a, b = self._fp8_operand(a, "a", what), self._fp8_operand(b, "b", what)
        prod = self.matmul(a, b, compute_dtype=compute_dtype, name=name and f"{name}.mm")
        return self._fp8_epilogue(prod, [("descale_a", descale_a), ("descale_b", descale_b)], scale_c, out_dtype,
                                  amax, what, name)

    def fp8_conv_fprop(self, x, w, padding=0, stride=1, dilation=1, *, descale_x=None, descale_w=None, scale_y=None,
                       out_dtype=None, amax: bool = False, compute_dtype="float32", name: str | None = None):
        """y = conv(x, w) * descale_x * descale_w [* scale_y] with FP8 ``x`` and ``w`` (channels-last layouts are
        what FP8 convolution engines take). Factors and ``amax`` as in :meth:`fp8_matmul`. Returns y, or (y, amax)."""
        what = "fp8_conv_fprop"
        x, w = self._fp8_operand(x, "x", what), self._fp8_operand(w, "w", what)
        prod = self.conv_fprop(x, w, padding, stride, dilation, compute_dtype=compute_dtype,
                               name=name and f"{name}.conv")
        return self._fp8_epilogue(prod, [("descale_x", descale_x), ("descale_w", descale_w)], scale_y, out_dtype,
                                  amax, what, name)

