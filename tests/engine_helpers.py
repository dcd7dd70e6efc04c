"""What the ``engine="graph"`` GPU tests of the legacy operation families share: device arrays in a layout from
logical (N, C, ...) host data, NaN-poisoned outputs, host copies back, and the tolerance check per dtype."""
from __future__ import annotations

import numpy as np

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None

#: the data types the graph paths take
GRAPH_DTYPES = ["float32", "float16"] + (["bfloat16"] if BF16 is not None else [])
#: relative tolerance of a float32-compute graph result stored in each dtype
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2, "float64": 1e-12}


def np_dtype(name) -> np.dtype:
    return BF16 if str(name) == "bfloat16" else np.dtype(name)


def layout_strides(shape, layout: str) -> tuple[int, ...]:
    """Packed strides of logical (N, C, *rest) ``shape`` with channels last for ``layout='NHWC'`` (rank >= 3)."""
    n = len(shape)
    order = [0] + list(range(2, n)) + [1] if layout == "NHWC" and n >= 3 else list(range(n))
    strides, acc = [0] * n, 1
    for i in reversed(order):
        strides[i] = acc
        acc *= shape[i]
    return tuple(strides)


def on_device(a: np.ndarray, dtype, layout: str = "NCHW", stream=None):
    """Logical host ``a`` as a device array of ``dtype`` whose memory is ``layout``."""
    from cudnn_py.core.memory import DeviceArray, to_device
    dt = np_dtype(dtype)
    strides = layout_strides(a.shape, layout)
    order = sorted(range(a.ndim), key=lambda i: -strides[i])
    buf = to_device(np.ascontiguousarray(np.asarray(a).astype(dt).transpose(order)), stream)
    return DeviceArray(buf.ptr, a.shape, dt, strides, device_id=buf.device_id, owner=buf)


def poisoned(shape, dtype, layout: str = "NCHW", stream=None):
    """A NaN-filled device array (an element the operation does not write stays NaN)."""
    return on_device(np.full(tuple(shape), np.nan), dtype, layout, stream)


def host(d) -> np.ndarray:
    """A device array (any strides) as a float64 host array of its logical shape."""
    return np.asarray(d.to_numpy(), dtype=np.float64)


def rounded(a: np.ndarray, dtype) -> np.ndarray:
    """``a`` rounded to ``dtype`` and back to float64 (what the device sees)."""
    return np.asarray(a).astype(np_dtype(dtype)).astype(np.float64)


def assert_close(got, ref, dtype, scale: float = 1.0) -> None:
    """``got`` matches float64 ``ref`` within the dtype's tolerance (relative to ref's magnitude); no NaN."""
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.isfinite(got).all(), "output has NaN/inf: an element was not written"
    tol = TOL[str(dtype)] * scale
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))


def graph_or_unsupported(call, strict: bool):
    """``call('graph')``; where cuDNN has no engine for it (:class:`GraphNotSupportedError`, which ``strict``
    configurations must not raise) the refusal must name the graph, and ``call('auto')`` answers instead.
    Returns (result, whether the graph ran)."""
    from cudnn_py.graph import GraphNotSupportedError
    try:
        return call("graph"), True
    except GraphNotSupportedError as e:
        if strict:
            raise
        assert "no engine supports graph" in str(e)
        return call("auto"), False
