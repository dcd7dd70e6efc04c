"""Device data for graph GPU tests: host arrays laid out with a graph tensor's strides, poisoned outputs (NaN for
floats, -1 for integers), results back in float64, tolerances by dtype."""
from __future__ import annotations

import numpy as np

from cudnn_py.core.memory import DeviceArray, empty, to_device

TOL = {"float32": 2e-3, "float16": 1e-2, "bfloat16": 3e-2, "float8_e4m3fn": 0.13, "float8_e5m2": 0.26}


def dtype_name(t) -> str:
    return np.dtype(t.np_dtype).name


def quantize(a: np.ndarray, dtype) -> np.ndarray:
    """``a`` rounded to ``dtype`` and back to float64 (what the device sees)."""
    return np.asarray(a, np.float64).astype(dtype).astype(np.float64)


def _order(t) -> list[int]:
    return sorted(range(len(t.shape)), key=lambda i: -t.strides[i])


def dev(a: np.ndarray, t, keep: list) -> DeviceArray:
    """Device copy of host ``a`` (logical shape) with graph tensor ``t``'s dtype and strides."""
    order = _order(t)
    buf = to_device(np.ascontiguousarray(np.asarray(a).astype(t.np_dtype).transpose(order)))
    keep.append(buf)
    return DeviceArray(buf.ptr, t.shape, t.np_dtype, t.strides, device_id=buf.device_id, owner=buf)


def out(t, keep: list) -> DeviceArray:
    """A poisoned device array for output ``t`` (NaN; -1 for integer dtypes)."""
    order = _order(t)
    buf = empty(tuple(t.shape[i] for i in order), t.np_dtype)
    kind = np.dtype(t.np_dtype).kind
    buf.fill_(-1 if kind == "i" else np.iinfo(t.np_dtype).max if kind == "u" else True if kind == "b" else np.nan)
    keep.append(buf)
    return DeviceArray(buf.ptr, t.shape, t.np_dtype, t.strides, device_id=buf.device_id, owner=buf)


def host(d: DeviceArray) -> np.ndarray:
    order = sorted(range(d.ndim), key=lambda i: -d.strides[i])
    return d._owner.to_numpy().astype(np.float64).transpose(np.argsort(order))


def run(h, g, inputs: dict, outputs: list, build: bool = True, **build_kw) -> list[np.ndarray]:
    """Build (unless built) and execute ``g`` once with host ``inputs`` {tensor: array}; returns the outputs as
    float64 arrays in ``outputs`` order."""
    keep: list = []
    pack = {t: dev(a, t, keep) for t, a in inputs.items()}
    outs = {t: out(t, keep) for t in outputs}
    if build and not g.plans:
        g.build(h, **build_kw)
    g.execute(h, {**pack, **outs})
    return [host(outs[t]) for t in outputs]


def close(got, ref, dtype: str, scale: float = 1.0, what: str = "") -> None:
    """No NaN (every element written) and within the dtype's tolerance (relative, and absolute against the
    reference's magnitude)."""
    got = np.asarray(got, np.float64)
    assert not np.isnan(got).any(), f"{what}: output has NaN: an element was not written"
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())), err_msg=what)


def rel_err(got, ref) -> float:
    """max |got - ref| / max(1, max |ref|) (NaN counts as infinite)."""
    got = np.asarray(got, np.float64)
    if np.isnan(got).any():
        return float("inf")
    return float(np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max())))
