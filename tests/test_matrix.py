"""The correctness matrix (tests/matrix.py): the CPU test checks that validation accepts exactly the verified dtypes of
each (operation, engine); the GPU test checks every verified cell against the float64 reference, outputs poisoned."""
from __future__ import annotations

import types

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.calls import engine_choice as ec
from cudnn_py.core.dtypes import SUPPORTED_DTYPES
from cudnn_py.errors import CudnnError, CudnnNotInitializedError
from helpers import fake, poisoned, poisoned_allocations
from matrix import ALL, ENGINES_TRIED, MATRIX, TOL, counts
from reference import activation as ref_act
from reference import conv as ref_conv
from reference import pooling as ref_pool
from reference import softmax as ref_softmax

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None


def _np(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name)) if ml_dtypes is not None and hasattr(ml_dtypes, name) else np.dtype(name)


OPS = sorted({op for op, _ in MATRIX})
X_SHAPE, W_SHAPE, Y_SHAPE = (2, 8, 6, 6), (8, 8, 3, 3), (2, 8, 6, 6)  # padding 1


# --------------------------------------------------------------------------- calls, by operation

def _call(op: str, h, dtype: np.dtype, engine, arrays=None):
    """Call ``op`` on ``arrays`` (fakes of ``dtype`` when None); returns the output."""
    kw = {} if engine is None else {"engine": engine}
    f = arrays or {}

    def a(name, shape):
        return f[name] if name in f else fake(shape, dtype)
    if op.startswith("convolution"):
        nhwc = dtype == np.int8
        conv = cudnn.Convolution(padding=1, layout="NHWC" if nhwc else "NCHW")
        phys = (lambda s: (s[0], s[2], s[3], s[1])) if nhwc else (lambda s: s)
        if op == "convolution_forward":
            return cudnn.convolution_forward(h, conv, a("x", phys(X_SHAPE)), a("w", phys(W_SHAPE)), y=a("y", phys(Y_SHAPE)),
                                             **kw)
        if op == "convolution_backward_data":
            return cudnn.convolution_backward_data(h, conv, a("w", phys(W_SHAPE)), a("dy", phys(Y_SHAPE)),
                                                   dx=a("dx", phys(X_SHAPE)), **kw)
        return cudnn.convolution_backward_filter(h, conv, a("x", phys(X_SHAPE)), a("dy", phys(Y_SHAPE)),
                                                 dw=a("dw", phys(W_SHAPE)), **kw)
    if op == "pooling_forward":
        return cudnn.pooling_forward(h, cudnn.Pooling("max", window=2), a("x", X_SHAPE), y=a("y", (2, 8, 3, 3)), **kw)
    if op == "activation_forward":
        return cudnn.activation_forward(h, cudnn.Activation("sigmoid"), a("x", X_SHAPE), y=a("y", X_SHAPE), **kw)
    if op == "softmax_forward":
        return cudnn.softmax_forward(h, a("x", X_SHAPE), y=a("y", X_SHAPE), **kw)
    if op == "add_tensor":
        return cudnn.add_tensor(h, a("a", X_SHAPE), a("c", X_SHAPE), **{"beta": 1.0, **kw})
    if op == "op_tensor":
        return cudnn.op_tensor(h, "mul", a("a", X_SHAPE), a("b", X_SHAPE), c=a("c", X_SHAPE), **kw)
    raise AssertionError(op)


# --------------------------------------------------------------------------- CPU: validation follows the table

class _Reached(Exception):
    """Validation let the call through: it was about to reach cuDNN."""


class _StubHandle:
    """A Handle stand-in: every cuDNN call needs ``.ptr`` (or the workspace), which raises :class:`_Reached`."""
    device = device_id = 0
    stream = None
    stream_ptr = 0
    closed = False

    def __init__(self):
        self.cache = {}
        self.workspace = types.SimpleNamespace(cap=None, get=self._reached)

    @staticmethod
    def _reached(*_a, **_k):
        raise _Reached

    @property
    def ptr(self):
        raise _Reached

    @property
    def cuda_device(self):
        raise _Reached


def _accepted(op: str, engine, dtype: np.dtype) -> bool | str:
    """True: reached cuDNN; False: refused in Python with a TypeError/ValueError; else a description of what else
    happened (a cuDNN error or another exception: neither a clean refusal nor an acceptance).

    engine="auto" runs its static rule here: measuring would snapshot the in-place fakes, which on a GPU machine
    copied from their made-up address (12 CUDA_ERROR_INVALID_VALUE from cuMemcpyDtoDAsync under the sanitizer)."""
    saved = ec._mode[0]
    ec.set_mode("static")
    try:
        _call(op, _StubHandle(), dtype, engine)
    except (_Reached, CudnnNotInitializedError):  # the latter: real work reached cuDNN on a machine with no GPU
        return True
    except CudnnError as e:
        return f"cuDNN refused it, not Python: {e}"
    except (TypeError, ValueError):
        return False
    except Exception as e:  # noqa: BLE001 - reported
        return f"{type(e).__name__}: {e}"
    finally:
        ec.set_mode(saved)
    return "returned without reaching cuDNN"


def test_matrix_lists_every_known_dtype_once():
    known = {d.name for d in SUPPORTED_DTYPES}
    assert known <= set(ALL), f"cudnn_py knows dtypes the matrix does not: {sorted(known - set(ALL))}"
    for cell, (verified, refused) in MATRIX.items():
        assert not set(verified) & set(refused), cell
        assert set(verified) | set(refused) == set(ALL), (cell, set(ALL) - set(verified) - set(refused))


@pytest.mark.parametrize("op", OPS)
def test_validation_accepts_exactly_the_verified_dtypes(op):
    problems = []
    engines = [e for o, e in MATRIX if o == op]
    tried = [None] if engines == [None] else list(ENGINES_TRIED)
    for engine in tried:
        if (op, engine) not in MATRIX:  # an engine the table does not list must be refused for every dtype
            taken = [d.name for d in SUPPORTED_DTYPES if _accepted(op, engine, d) is not False]
            if taken:
                problems.append(f"engine={engine!r} is accepted for {taken} but is not in tests/matrix.py")
            continue
        verified, refused = MATRIX[(op, engine)]
        for d in SUPPORTED_DTYPES:
            got = _accepted(op, engine, d)
            if got is True and d.name not in verified:
                problems.append(f"engine={engine!r} accepts {d.name}, which is not verified on the GPU")
            elif got is False and d.name in verified:
                problems.append(f"engine={engine!r} refuses {d.name}, which the table lists as verified")
            elif got not in (True, False):
                problems.append(f"engine={engine!r} {d.name}: {got}")
    assert not problems, f"{op}:\n  " + "\n  ".join(problems)


def test_counts_are_reported():
    c = counts()
    print("matrix (verified, refused) per operation:", c)
    assert all(v > 0 for v, _ in c.values())


# --------------------------------------------------------------------------- GPU: every verified cell is right

def _data(rng, shape, dtype: np.dtype) -> np.ndarray:
    if dtype == np.int8:
        return rng.integers(-1, 2, size=shape).astype(np.int8)
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def _reference(op: str, host: dict) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in host.items()}
    if op == "convolution_forward":
        return ref_conv.conv_forward(f["x"], f["w"], 1)
    if op == "convolution_backward_data":
        return ref_conv.conv_backward_data(f["dy"], f["w"], X_SHAPE, 1)
    if op == "convolution_backward_filter":
        return ref_conv.conv_backward_filter(f["x"], f["dy"], W_SHAPE, 1)
    if op == "pooling_forward":
        return ref_pool.forward(f["x"], "max", (2, 2), (0, 0), (2, 2))
    if op == "activation_forward":
        return ref_act.forward(f["x"], "sigmoid")
    if op == "softmax_forward":
        return ref_softmax.forward(f["x"], "accurate", "channel")
    if op == "add_tensor":
        return f["a"] + f["c"]
    if op == "op_tensor":
        return f["a"] * f["b"]
    raise AssertionError(op)


_INPUTS = {"convolution_forward": {"x": X_SHAPE, "w": W_SHAPE}, "convolution_backward_data": {"w": W_SHAPE,
                                                                                             "dy": Y_SHAPE},
           "convolution_backward_filter": {"x": X_SHAPE, "dy": Y_SHAPE}, "pooling_forward": {"x": X_SHAPE},
           "activation_forward": {"x": X_SHAPE}, "softmax_forward": {"x": X_SHAPE},
           "add_tensor": {"a": X_SHAPE, "c": X_SHAPE}, "op_tensor": {"a": X_SHAPE, "b": X_SHAPE}}
_OUTPUT = {"convolution_forward": ("y", Y_SHAPE), "convolution_backward_data": ("dx", X_SHAPE),
           "convolution_backward_filter": ("dw", W_SHAPE), "pooling_forward": ("y", (2, 8, 3, 3)),
           "activation_forward": ("y", X_SHAPE), "softmax_forward": ("y", X_SHAPE), "add_tensor": None,
           "op_tensor": ("c", X_SHAPE)}
_CELLS = [pytest.param(op, engine, d, id=f"{op}-{engine}-{d}") for (op, engine), (ver, _) in MATRIX.items()
          for d in ver if ml_dtypes is not None or d != "bfloat16"]


@pytest.mark.gpu
@pytest.mark.parametrize("op,engine,dtype", _CELLS)
def test_verified_cell_matches_float64_reference(handle, rng, op, engine, dtype):
    dt = _np(dtype)
    host = {k: _data(rng, s, dt) for k, s in _INPUTS[op].items()}
    nhwc = op.startswith("convolution") and dt == np.int8

    def dev(a):  # int8 convolution: channels-last arrays (layout="NHWC" shapes)
        return cudnn.to_device(np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if nhwc else a, stream=handle.stream)
    arrays = {k: dev(v) for k, v in host.items()}
    with poisoned_allocations():
        out = _OUTPUT[op]
        if out is not None:
            name, shape = out
            shape = (shape[0], shape[2], shape[3], shape[1]) if nhwc else shape
            arrays[name] = poisoned(shape, dt, handle.stream)
        result = _call(op, handle, dt, engine, arrays)
        got = (arrays["c"] if op == "add_tensor" else result).to_numpy().astype(np.float64)
    if nhwc:
        got = got.transpose(0, 3, 1, 2)
    want = _reference(op, host)
    assert got.shape == want.shape
    assert not np.isnan(got).any(), f"{op} engine={engine} {dtype}: unwritten (NaN-poisoned) output elements"
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= TOL[dtype], f"{op} engine={engine} {dtype}: relative error {err:.3g} > {TOL[dtype]}"
