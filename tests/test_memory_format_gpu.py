"""New outputs follow the input's memory format (torch's ``preserve_format``; issue 39 item 4), on the GPU: each
family's allocated output of a channels-last input is channels-last, for DeviceArrays and torch tensors, on the
first call and on its prepared repeat call (fresh data at new addresses), and matches a float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.core.memory import DeviceArray
from reference import activation as ref_act
from reference import batchnorm as ref_bn
from reference import lrn as ref_lrn
from reference import pooling as ref_pool
from reference import softmax as ref_softmax

pytestmark = pytest.mark.gpu

SHAPE = (2, 16, 6, 8)


def _nhwc(host: np.ndarray, kind: str):
    """``host`` (N, C, H, W) on the GPU in channels-last memory, as a DeviceArray or a torch tensor."""
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(host).cuda().contiguous(memory_format=torch.channels_last)
    packed = cudnn.to_device(np.ascontiguousarray(host.transpose(0, 2, 3, 1)))
    n, h, w, c = packed.shape
    return DeviceArray.from_parts(packed.ptr, (n, c, h, w), packed.dtype, (h * w * c, 1, w * c, c),
                                  packed.device_id, packed, None)


def _host(a) -> np.ndarray:
    return a.detach().cpu().numpy() if hasattr(a, "detach") else a.to_numpy()


def _strides(a) -> tuple:
    return tuple(a.stride()) if hasattr(a, "stride") else a.strides


def _channels_last(a) -> bool:
    n, c, h, w = a.shape
    return _strides(a) == (h * w * c, 1, w * c, c)


def _params(rng):
    c = SHAPE[1]
    sc, bi, me = (rng.standard_normal((1, c, 1, 1)).astype(np.float32) for _ in range(3))
    va = (np.abs(rng.standard_normal((1, c, 1, 1))) + 0.5).astype(np.float32)
    return sc, bi, me, va


CASES = {
    "relu": (lambda h, x, x2, p: cudnn.activation_forward(h, "relu", x),
             lambda x, x2, p: ref_act.forward(x, "relu")),
    "softmax": (lambda h, x, x2, p: cudnn.softmax_forward(h, x),
                lambda x, x2, p: ref_softmax.forward(x, "accurate", "channel")),
    "max pool": (lambda h, x, x2, p: cudnn.pooling_forward(h, cudnn.Pooling("max", 2, stride=2), x),
                 lambda x, x2, p: ref_pool.forward(x, "max", (2, 2), (0, 0), (2, 2))),
    "lrn": (lambda h, x, x2, p: cudnn.lrn_forward(h, cudnn.LRN(5, 1e-4, 0.75, 2.0), x),
            lambda x, x2, p: ref_lrn.lrn_forward(x, 5, 1e-4, 0.75, 2.0)),
    "op_tensor add": (lambda h, x, x2, p: cudnn.op_tensor(h, "add", x, x2), lambda x, x2, p: x + x2),
    "transform_tensor": (lambda h, x, x2, p: cudnn.transform_tensor(h, x), lambda x, x2, p: x),
    "batchnorm inference": (
        lambda h, x, x2, p: cudnn.batchnorm_forward_inference(h, x, *p),
        lambda x, x2, p: ref_bn.forward_inference(x, p[0], p[1], p[2], p[3], "spatial")),
    "normalization inference": (
        lambda h, x, x2, p: cudnn.normalization_forward_inference(h, x, *p),
        lambda x, x2, p: ref_bn.forward_inference(x, p[0], p[1], p[2], p[3], "spatial")),
}


@pytest.mark.parametrize("kind", ["device", "torch"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_new_output_of_channels_last_data_is_channels_last(handle, rng, kind, case):
    call, reference = CASES[case]
    handle.clear_caches()
    for _ in range(2):  # the first call, then the prepared call's replay on fresh data at new addresses
        xh = rng.standard_normal(SHAPE).astype(np.float32)
        x2h = rng.standard_normal(SHAPE).astype(np.float32)
        ph = _params(rng)
        p = tuple(cudnn.to_device(a) if kind == "device" else _nhwc(a, "torch").contiguous() for a in ph)
        y = call(handle, _nhwc(xh, kind), _nhwc(x2h, kind), p)
        handle.synchronize()
        assert _channels_last(y), f"{case}: strides {_strides(y)} for a channels-last input"
        assert type(y).__module__.partition(".")[0] == ("torch" if kind == "torch" else "cudnn_py")
        want = np.asarray(reference(xh.astype(np.float64), x2h.astype(np.float64),
                                    tuple(a.astype(np.float64) for a in ph)))
        got = _host(y).astype(np.float64)
        assert np.isfinite(got).all()
        assert np.linalg.norm(got - want) <= 1e-4 * np.linalg.norm(want), case


@pytest.mark.parametrize("kind", ["device", "torch"])
def test_dropout_keeps_channels_last(handle, rng, kind):
    p = 0.25
    with cudnn.Dropout(handle, p, seed=int(rng.integers(1 << 30))) as drop:
        for _ in range(2):
            xh = (rng.standard_normal(SHAPE) + 3.0).astype(np.float32)  # never 0: a dropped element is exactly 0
            y, _ = cudnn.dropout_forward(handle, drop, _nhwc(xh, kind))
            handle.synchronize()
            assert _channels_last(y)
            got = _host(y)
            kept = got != 0
            np.testing.assert_allclose(got[kept], xh[kept] / (1 - p), rtol=1e-6)
            assert 0.1 < 1 - kept.mean() < 0.4
