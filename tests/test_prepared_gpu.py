"""The prepared call on the GPU: a repeat call (replayed from its prepared call) gives what the validated path gives
on fresh random data at new addresses, for every family and engine; torch tensors in give torch tensors out,
ordered on the handle's stream; first calls from 8 threads in fresh processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.calls import prepared as P

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
rng = np.random.default_rng()
SHAPE = (2, 8, 6, 6)


def data(shape=SHAPE, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


POOL = cudnn.Pooling("max", 2, stride=2)
LRN = cudnn.LRN(5)

CONV = cudnn.Convolution(padding=1)
W, DY = (4, 8, 3, 3), (2, 4, 6, 6)

# name -> (input shapes (an int n: n inputs of SHAPE), output shape or None for SHAPE, call(handle, inputs, out, engine))
CASES = {
    "activation_forward": (1, None, lambda h, i, o, e: cudnn.activation_forward(h, "tanh", *i, y=o, engine=e)),
    "activation_backward": (3, None, lambda h, i, o, e: cudnn.activation_backward(h, "relu", *i, dx=o, engine=e)),
    "softmax_forward": (1, None, lambda h, i, o, e: cudnn.softmax_forward(h, *i, y=o)),
    "softmax_backward": (2, None, lambda h, i, o, e: cudnn.softmax_backward(h, *i, dx=o)),
    "pooling_forward": (1, (2, 8, 3, 3), lambda h, i, o, e: cudnn.pooling_forward(h, POOL, *i, y=o, engine=e)),
    "op_tensor": (2, None, lambda h, i, o, e: cudnn.op_tensor(h, "mul", *i, c=o, alpha2=0.5, engine=e)),
    "transform_tensor": (1, None, lambda h, i, o, e: cudnn.transform_tensor(h, *i, y=o, alpha=2.0, engine=e)),
    "lrn_forward": (1, None, lambda h, i, o, e: cudnn.lrn_forward(h, LRN, *i, y=o)),
    "lrn_backward": (3, None, lambda h, i, o, e: cudnn.lrn_backward(h, LRN, *i, dx=o)),
    "convolution_forward": ((SHAPE, W), DY, lambda h, i, o, e: cudnn.convolution_forward(h, CONV, *i, y=o, engine=e)),
    "convolution_backward_data": ((W, DY), SHAPE, lambda h, i, o, e: cudnn.convolution_backward_data(
        h, CONV, *i, dx=o, x_shape=SHAPE, engine=e)),
    "convolution_backward_filter": ((SHAPE, DY), W, lambda h, i, o, e: cudnn.convolution_backward_filter(
        h, CONV, *i, dw=o, w_shape=W, engine=e)),
    "convolution_backward_bias": ((DY,), (1, 4, 1, 1), lambda h, i, o, e: cudnn.convolution_backward_bias(
        h, *i, db=o)),
    "reduce_tensor": (1, (2, 8, 1, 1), lambda h, i, o, e: cudnn.reduce_tensor(
        h, "add", *i, c=o, axes=None if o is not None else (2, 3), engine=e)),
}


def _inputs(n):
    return [cudnn.to_device(data(s)) for s in ((SHAPE,) * n if isinstance(n, int) else n)]


@pytest.mark.parametrize("engine", ["legacy", "graph", "auto"])
@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
@pytest.mark.parametrize("name", list(CASES))
def test_repeat_call_equals_the_validated_call(name, given, engine):
    n, out_shape, call = CASES[name]
    if engine == "graph" and name in ("softmax_forward", "softmax_backward", "lrn_forward", "lrn_backward",
                                      "convolution_backward_bias", "reduce_tensor"):
        engine = "legacy"  # no engine= (legacy only; the call ignores it), or no graph engine for this reduction
    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        call(h, _inputs(n), cudnn.empty(out_shape or SHAPE) if given else None, engine)  # makes the prepared call
        entries = len(h.cache.get(P.CACHE, {}))
        for _ in range(3):  # fresh data, new addresses, poisoned outputs
            ins = _inputs(n)
            out = None
            if given:
                out = cudnn.to_device(np.full(out_shape or SHAPE, np.nan, np.float32))
            got = call(h, ins, out, engine)
            if given:
                assert got is out
            ref_h.clear_caches()  # the validated path: a handle with no prepared calls
            want = call(ref_h, ins, None, engine)
            np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-5, atol=1e-5)
            assert not np.isnan(got.to_numpy()).any()
        assert len(h.cache[P.CACHE]) == entries >= 1  # replayed, not rebuilt


def test_relu_and_add_against_float64():
    with cudnn.Handle() as h:
        for _ in range(3):
            x, b = data(), data((1, 8, 1, 1))
            y = cudnn.activation_forward(h, "relu", cudnn.to_device(x))
            np.testing.assert_allclose(y.to_numpy(), np.maximum(x.astype(np.float64), 0), rtol=1e-6)
            c0 = data()
            c = cudnn.to_device(c0)
            cudnn.add_tensor(h, cudnn.to_device(b), c, alpha=2.0, beta=1.0)
            np.testing.assert_allclose(c.to_numpy(), c0.astype(np.float64) + 2 * b, rtol=1e-5, atol=1e-6)
        assert len(h.cache[P.CACHE]) == 2


def test_in_place_repeat_and_partial_overlap_refused():
    with cudnn.Handle() as h:
        for _ in range(2):
            x0 = data()
            x = cudnn.to_device(x0)
            assert cudnn.activation_forward(h, "relu", x, y=x) is x
            np.testing.assert_allclose(x.to_numpy(), np.maximum(x0, 0))
        buf = cudnn.to_device(data((2 * 8 * 6 * 6 + 8,)))
        a = cudnn.DeviceArray(buf.ptr, SHAPE, np.float32, owner=buf)
        b = cudnn.DeviceArray(buf.ptr + 16, SHAPE, np.float32, owner=buf)
        with pytest.raises(cudnn.InvalidValueError, match="shares memory"):
            cudnn.activation_forward(h, "relu", a, y=b)
        with pytest.raises(cudnn.InvalidValueError, match="shares memory"):
            cudnn.pooling_forward(h, POOL, a, y=cudnn.DeviceArray(buf.ptr, (2, 8, 3, 3), np.float32, owner=buf))
        with pytest.raises(cudnn.InvalidValueError, match="no in-place form"):
            cudnn.lrn_forward(h, LRN, a, y=a)


@pytest.mark.parametrize("engine", ["graph", "legacy"])
def test_broadcast_views_and_outputs_sharing_memory_refused_on_every_route(engine):
    """torch's expand gives strides of 0 that no route verifies (an output of them would be written by racing
    threads): refused before anything is queued, as two outputs in one memory are."""
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 8, 1, 6, device="cuda")
    with cudnn.Handle() as h:
        y = torch.full(SHAPE, float("nan"), device="cuda")
        with pytest.raises(cudnn.InvalidValueError, match=r"x's strides \(48, 6, 0, 1\) .* broadcast view"):
            cudnn.activation_forward(h, "relu", x.expand(SHAPE), y=y, engine=engine)
        with pytest.raises(cudnn.InvalidValueError, match=r"y's strides \(48, 6, 0, 1\) .* broadcast view"):
            cudnn.activation_forward(h, "relu", y, y=x.expand(SHAPE), engine=engine)
        assert torch.isnan(y).all() and torch.isfinite(x).all()
        got = cudnn.activation_forward(h, "relu", x.expand(SHAPE).contiguous(), y=y, engine=engine)
        np.testing.assert_array_equal(got.cpu().numpy(), np.maximum(x.expand(SHAPE).cpu().numpy(), 0))
        stats = torch.full((1, 8, 1, 1), float("nan"), device="cuda")
        scale, bias = torch.ones_like(stats), torch.zeros_like(stats)
        with pytest.raises(cudnn.InvalidValueError, match="outputs saved_mean and saved_inv_var share memory"):
            cudnn.batchnorm_forward_training(h, y, scale, bias, saved_mean=stats, saved_inv_var=stats, engine=engine)
        assert torch.isnan(stats).all()


@pytest.mark.parametrize("name", ["activation_forward", "softmax_forward", "pooling_forward", "op_tensor",
                                  "convolution_forward", "convolution_backward_data"])
def test_torch_in_torch_out(name):
    torch = pytest.importorskip("torch")
    n, out_shape, call = CASES[name]
    with cudnn.Handle() as h:
        for i in range(3):
            ins = [torch.from_numpy(a.to_numpy()).cuda() for a in _inputs(n)]
            got = call(h, ins, None, "auto")
            assert isinstance(got, torch.Tensor) and got.device == ins[0].device and got.dtype == torch.float32
            want = call(h, [cudnn.as_array(t) for t in ins], None, "auto")
            torch.cuda.synchronize()
            np.testing.assert_allclose(got.cpu().numpy(), want.to_numpy(), rtol=1e-6)
            o = torch.full(tuple(got.shape), float("nan"), device="cuda")
            assert call(h, ins, o, "auto") is o
            np.testing.assert_allclose(o.cpu().numpy(), want.to_numpy(), rtol=1e-6)


def test_a_contiguous_torch_tensor_with_other_strides_in_dims_of_size_1_replays_right():
    """The guard checks a tensor that was contiguous when the call was prepared by torch's ``is_contiguous()``: one
    of that shape whose strides differ in its dims of size 1 alone replays the function's last prepared call at its
    own address (no new prepared call), the output given (poisoned) or new, and matches float64."""
    torch = pytest.importorskip("torch")
    with cudnn.Handle() as h:
        for given in (True, False):
            def out():
                return torch.full((1, 8, 1, 6), float("nan"), device="cuda") if given else None
            cudnn.activation_forward(h, "tanh", torch.randn(1, 8, 1, 6, device="cuda"), y=out())  # prepared here
            made = h.cache_info()["prepared"]
            x = torch.randn(400, device="cuda").as_strided((1, 8, 1, 6), (77, 6, 5, 1), storage_offset=16)
            assert x.is_contiguous() and x.stride() != (48, 6, 6, 1)
            y = out()
            got = cudnn.activation_forward(h, "tanh", x, y=y)
            assert got is y if given else isinstance(got, torch.Tensor)
            want = np.tanh(x.cpu().numpy().astype(np.float64))
            np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6)
            assert h.cache_info()["prepared"] == made


def test_torch_output_is_ordered_on_the_handle_stream():
    """The handle works on its own stream behind a long kernel; the output torch allocated is freed at once and a
    new tensor made on torch's stream: without record_stream the allocator would hand the same block out and the
    late kernel would overwrite the new tensor."""
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    with cudnn.Handle(stream=s) as h:
        x = torch.randn(256, 64, 32, 32, device="cuda")
        cudnn.activation_forward(h, "relu", x)  # the first call: the prepared call is made
        cudnn.activation_forward(h, "relu", x)
        torch.cuda.synchronize()
        for _ in range(3):
            with torch.cuda.stream(s):
                torch.cuda._sleep(20_000_000)
            y = cudnn.activation_forward(h, "relu", x)
            assert isinstance(y, torch.Tensor)
            del y
            z = torch.full_like(x, 7.0)
            torch.cuda.synchronize()
            assert bool((z == 7.0).all())


def test_first_calls_from_8_threads_in_fresh_processes():
    """8 threads each open a Handle and make the first calls of a different family at once (a barrier), in fresh
    processes (``CUDNN_PY_THREAD_PROCESSES``, default 8): no error, and no hang (a thread that fails breaks the
    barrier instead of leaving the others waiting; a process that hangs dumps its threads' stacks)."""
    script = textwrap.dedent("""
        import faulthandler, sys, threading, traceback
        import numpy as np
        faulthandler.dump_traceback_later(100, exit=True)
        import cudnn_py as cudnn
        barrier, errors = threading.Barrier(8, timeout=60), []
        def work(i):
            try:
                h = cudnn.Handle()
                x = cudnn.to_device(np.random.default_rng(i).standard_normal((2, 8, 8, 8)).astype(np.float16))
                barrier.wait()
                for _ in range(3):
                    [lambda: cudnn.activation_forward(h, "relu", x), lambda: cudnn.softmax_forward(h, x),
                     lambda: cudnn.pooling_forward(h, cudnn.Pooling("max", 2, stride=2), x),
                     lambda: cudnn.op_tensor(h, "add", x, x),
                     lambda: cudnn.convolution_forward(h, cudnn.Convolution(padding=1), x,
                                                       cudnn.to_device(np.ones((8, 8, 3, 3), np.float16))),
                     lambda: cudnn.lrn_forward(h, cudnn.LRN(5), x),
                     lambda: cudnn.transform_tensor(h, x, layout="NHWC"),
                     lambda: cudnn.sdpa(h, *[cudnn.to_device(np.ones((1, 2, 64, 64), np.float16))] * 3),
                     ][i]()
                h.synchronize()
            except BaseException as e:
                barrier.abort()
                errors.append(f"{i}: {type(e).__name__}: {e} {traceback.format_exc()}")
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(" | ".join(errors)); sys.exit(1 if errors else 0)
    """)
    failures = []
    for _ in range(int(os.environ.get("CUDNN_PY_THREAD_PROCESSES", "8"))):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=150,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        if r.returncode:
            failures.append(r.stdout[-3000:] + r.stderr[-3000:])
    assert not failures, f"{len(failures)} processes failed; the first:\n{failures[0]}"


@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
def test_sdpa_forward_and_backward_repeat_equal_the_validated_calls(given):
    shape = (1, 2, 128, 64)

    def half():
        return cudnn.to_device(data(shape, np.float16))
    with cudnn.Handle() as h, cudnn.Handle() as ref_h:
        for i in range(4):  # the first call makes the prepared calls; the others replay them on fresh data
            q, k, v, do = half(), half(), half(), half()
            out = dict(o=cudnn.empty(shape, np.float16), stats=cudnn.empty((1, 2, 128, 1), np.float32)) if given else {}
            o, st = cudnn.sdpa(h, q, k, v, causal=True, return_stats=True, **out)
            grads = cudnn.sdpa_backward(h, q, k, v, o, do, st, causal=True)
            ref_h.clear_caches()
            ro, rst = cudnn.sdpa(ref_h, q, k, v, causal=True, return_stats=True)
            ref_h.clear_caches()
            rg = cudnn.sdpa_backward(ref_h, q, k, v, ro, do, rst, causal=True)
            for got, want in zip((o, st, *grads), (ro, rst, *rg)):
                np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
            if i == 0:
                entries = len(h.cache[P.CACHE])
        assert len(h.cache[P.CACHE]) == entries == 2
