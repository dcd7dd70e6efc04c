"""How a tuning run checks what it measures: a sample of each output copied to the host, and each configuration's
difference from the element-wise median of all of them (the sweep of graph engines and the legacy-algorithm run
share it)."""
from __future__ import annotations

import math
import warnings

import numpy as np

__all__ = ["AGREEMENT", "np_dtype", "sample", "agreement"]


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a dtype name (``bfloat16`` through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


#: relative difference from the configurations' median output above which a configuration is marked as disagreeing
#: (a sanity bound that catches wrong or unwritten results, not a precision test): by data type
AGREEMENT = {"float32": 1e-2, "float16": 5e-2, "bfloat16": 5e-2}
_SAMPLE = 1 << 18


def sample(outputs: dict, stream) -> list[np.ndarray]:
    """Three contiguous runs (start, middle, end: a last partial tile is where engines go wrong) of each output,
    :data:`_SAMPLE` values in all, copied to the host as float32."""
    from cudnn_py.memory import DeviceArray
    out = []
    for buf in outputs.values():
        n, run = buf.size, max(1, _SAMPLE // 3)
        starts = sorted({0, max(0, n // 2 - run // 2), max(0, n - run)}) if n > _SAMPLE else [0]
        parts = [DeviceArray(buf.ptr + s * buf.dtype.itemsize, (min(run if n > _SAMPLE else n, n - s),), buf.dtype,
                             device_id=buf.device_id, owner=buf, stream=stream).to_numpy() for s in starts]
        out.append(np.concatenate(parts).astype(np.float32))
    return out


def agreement(samples: dict[str, list[np.ndarray]], rows: dict[str, dict], dtype: str) -> None:
    """Each configuration's largest relative difference from the element-wise median of all of them ('diff') and
    whether it is within :data:`AGREEMENT` ('agrees'): a minority of wrong configurations cannot hide."""
    if not samples:
        return
    tags = list(samples)
    for i in range(len(samples[tags[0]])):
        stack = np.stack([samples[t][i] for t in tags])
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # an element no configuration wrote: all NaN
            median = np.nanmedian(stack, axis=0)
            scale = float(np.nanmax(np.abs(median))) if np.isfinite(median).any() else 0.0
            for t, values in zip(tags, stack):
                diff = float(np.max(np.abs(values - median))) / (scale or 1.0)
                diff = diff if math.isfinite(diff) else float("inf")
                rows[t]["diff"] = max(rows[t].get("diff") or 0.0, diff)
    for t in tags:
        rows[t]["agrees"] = rows[t]["diff"] <= AGREEMENT.get(dtype, 5e-2)
        if not rows[t]["agrees"]:
            rows[t]["diff"] = min(rows[t]["diff"], 1e300)   # JSON has no infinity
