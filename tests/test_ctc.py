"""CTC loss: descriptor round trips, label validation and bad input (CPU); costs and gradients of
cudnnCTCLoss_v8, both algorithms, against the float64 forward-backward reference (GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.ops.ctc import MAX_LABEL_LENGTH, CTCLoss, check_ctc_labels, ctc_loss, ctc_loss_workspace_size
from reference import ctc as ref
from helpers import NoCallHandle, fake


# ---------------------------------------------------------------- CPU


@pytest.mark.parametrize("norm,grad,mll", [("softmax", "zero_oob", 255), ("none", "skip_oob", 1),
                                           ("softmax", "skip_oob", 17)])
def test_descriptor_round_trip(norm, grad, mll):
    d = CTCLoss(norm, grad, mll)
    assert d.compute_dtype == capi.CUDNN_DATA_FLOAT
    assert d.normalization == {"softmax": capi.CUDNN_LOSS_NORMALIZATION_SOFTMAX,
                               "none": capi.CUDNN_LOSS_NORMALIZATION_NONE}[norm]
    assert d.grad_mode == {"zero_oob": capi.CUDNN_CTC_ZERO_OOB_GRADIENTS,
                           "skip_oob": capi.CUDNN_CTC_SKIP_OOB_GRADIENTS}[grad]
    assert d.max_label_length == mll
    assert "CTCLoss(" in repr(d)
    d.close()
    assert repr(d) == "<CTCLoss closed>"


def test_compute_type_is_the_deprecated_compute_dtype():
    d = CTCLoss()
    with pytest.warns(DeprecationWarning, match="compute_type is deprecated, use compute_dtype"):
        assert d.compute_type == d.compute_dtype == capi.CUDNN_DATA_FLOAT


def test_shared_descriptors_live_in_the_process_cache_and_die_when_dropped():
    import gc
    import weakref
    from cudnn_py.core import caches
    from cudnn_py.ops import ctc
    d = ctc._ctc_desc("none", "skip_oob", 33)
    assert ctc._ctc_desc("none", "skip_oob", 33) is d and caches.shared("ops.ctc") is ctc._DESCS
    d.close()  # shared: close() leaves it to the cache
    assert not d.closed and d.max_label_length == 33
    raw, gone = d._ptr, weakref.ref(d)
    ctc._DESCS.clear()
    del d
    gc.collect()
    assert gone() is None and raw.value is None  # destroyed by its finalizer


def test_ctc_loss_result_is_a_named_tuple():
    from cudnn_py.ops.ctc import CTCLossResult
    r = CTCLossResult(1, None)
    costs, grads = r
    assert (costs, grads) == (r.costs, r.gradients) == (1, None)


@pytest.mark.parametrize("kw,words", [({"normalization": "log_softmax"}, "normalization"),
                                      ({"grad_mode": "nan"}, "grad_mode"),
                                      ({"max_label_length": 0}, "max_label_length"),
                                      ({"max_label_length": 256}, "max_label_length")])
def test_descriptor_bad_arguments(kw, words):
    with pytest.raises(ValueError, match=words):
        CTCLoss(**kw)


def test_check_labels_accepts_concatenated_and_padded():
    a = check_ctc_labels([1, 2, 2, 3], [3, 1], [5, 2], time_steps=5, alphabet_size=4)
    b = check_ctc_labels(np.array([[1, 2, 2], [3, 0, 0]]), np.array([3, 1]), (5, 2), 5, 4)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
        assert u.dtype == np.int32
    np.testing.assert_array_equal(a.labels, [1, 2, 2, 3])


@pytest.mark.parametrize("args,words", [
    (([1, 1, 1], [3], [4], 10, 3), "need at least 5 time steps"),      # 3 labels + 2 repeats > input of 4
    (([1, 2, 1], [3], [2], 10, 3), "longer than the input allows"),
    (([1, 2], [2], [11], 10, 3), "input_lengths[0] = 11"),
    (([1, 2], [2], [0], 10, 3), "input_lengths[0] = 0"),
    (([1, 3], [2], [5], 10, 3), "labels[1] = 3"),                         # alphabet of 3: labels 1..2
    (([0, 1], [2], [5], 10, 3), "labels[0] = 0"),                         # 0 is the blank
    (([1, 2, 1], [2], [5], 10, 3), "sum to 2"),
    (([1, 2], [2, 0], [5], 10, 3), "one entry per sequence"),
    (([1] * 300, [300], [700], 700, 3), "[0, 255]"),
    (([1, 2], [2], [5], 10, 1), "alphabet"),
    ((np.zeros((2, 2, 2), int), [1, 1], [3, 3], 10, 3), "1-D (concatenated) or 2-D"),
    ((np.array([1.0, 2.0]), [2], [5], 10, 3), "integers"),
])
def test_check_labels_rejects(args, words):
    with pytest.raises((ValueError, TypeError)) as info:
        check_ctc_labels(*args)
    assert words in str(info.value)


def test_check_labels_respects_max_label_length():
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        check_ctc_labels([1, 2, 1, 2, 1], [5], [10], 10, 3, max_label_length=4)


H = NoCallHandle()


@pytest.mark.parametrize("call,exc,words", [
    (lambda: ctc_loss(H, fake((10, 2, 5), np.float64), [1, 2], [1, 1], [10, 10]), TypeError, "float32"),
    (lambda: ctc_loss(H, fake((10, 10)), [1, 2], [1, 1], [10, 10]), ValueError, "(T, N, A)"),
    (lambda: ctc_loss(H, fake((4, 1, 5)), [2, 2, 2], [3], [4]), ValueError, "longer than the input allows"),
    (lambda: ctc_loss(H, fake((4, 2, 5)), [2, 3], [1, 1], [4, 4, 4]), ValueError, "one entry per sequence"),
    (lambda: ctc_loss(H, fake((4, 2, 5)), [2, 3, 4], [1, 1, 1], [4, 4, 4]), ValueError, "batch of 2"),
    (lambda: ctc_loss(H, fake((4, 2, 5)), [2, 3], [1, 1], [4, 4], algo="fast"), ValueError, "algo"),
    (lambda: ctc_loss(H, np.zeros((4, 2, 5), np.float32), [2, 3], [1, 1], [4, 4]), TypeError, "to_device"),
    (lambda: ctc_loss(H, fake((4, 2, 5)), [2, 3], [1, 1], [4, 4], costs=fake((3,))), ValueError, "costs has shape"),
    (lambda: ctc_loss(H, fake((4, 2, 5)), [2, 3], [1, 1], [4, 4], gradients=fake((4, 2, 4))), ValueError,
     "gradients has shape"),
    (lambda: ctc_loss(H, fake((4, 2, 5)), [2, 3], [1, 1], [4, 4], compute_gradients=False,
                      gradients=fake((4, 2, 5))), ValueError, "compute_gradients"),
    (lambda: ctc_loss(H, fake((4, 2, 5)), [2, 3], [1, 1], [4, 4], costs=fake((2,), strides=(2,))), ValueError,
     "costs must be C-contiguous"),  # cuDNN writes N packed floats
])
def test_bad_input_caught_before_c(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


def test_max_label_length_constant():
    assert MAX_LABEL_LENGTH == 255


# ---------------------------------------------------------------- GPU


def _dev(a):
    import cudnn_py as cudnn
    return cudnn.to_device(np.ascontiguousarray(a))


def _problem(rng, t, a, label_lengths, input_lengths):
    n = len(label_lengths)
    logits = (rng.standard_normal((t, n, a)) * 2).astype(np.float32)
    labels = []
    for b, ll in enumerate(label_lengths):
        while True:
            seq = rng.integers(1, a, ll)
            if ref.min_input_length(seq) <= input_lengths[b]:
                break
        labels.extend(int(v) for v in seq)
    return logits, np.array(labels, np.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ["deterministic", "non_deterministic"])
def test_costs_and_gradients_full_length(handle, rng, algo):
    t, a, ll = 12, 5, [3, 5, 1, 4]
    il = [t] * len(ll)
    logits, labels = _problem(rng, t, a, ll, il)
    costs, grads = ctc_loss(handle, _dev(logits), labels, ll, il, algo=algo,
                            costs=_dev(np.full(len(ll), np.nan, np.float32)),
                            gradients=_dev(np.full(logits.shape, np.nan, np.float32)))
    want_c, want_g = ref.ctc_loss(logits, labels, ll, il)
    np.testing.assert_allclose(costs.to_numpy(), want_c, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads.to_numpy(), want_g, rtol=1e-4, atol=1e-4)
    assert ctc_loss_workspace_size(handle, logits.shape, algo=algo) >= 0


@pytest.mark.gpu
def test_variable_input_lengths_and_device_labels(handle, rng):
    t, a, ll, il = 10, 4, [2, 4, 3], [10, 7, 5]
    logits, labels = _problem(rng, t, a, ll, il)
    costs, grads = ctc_loss(handle, _dev(logits), _dev(labels), _dev(np.array(ll, np.int32)),
                            _dev(np.array(il, np.int32)), gradients=_dev(np.full(logits.shape, np.nan, np.float32)))
    want_c, want_g = ref.ctc_loss(logits, labels, ll, il)
    np.testing.assert_allclose(costs.to_numpy(), want_c, rtol=1e-4, atol=1e-4)
    g = grads.to_numpy()
    for b, n_t in enumerate(il):  # time steps past a sequence's input length are not compared
        np.testing.assert_allclose(g[:n_t, b], want_g[:n_t, b], rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_deterministic_algo_repeats_bitwise_and_costs_only(handle, rng):
    t, a, ll = 16, 6, [4, 6]
    il = [t, t]
    logits, labels = _problem(rng, t, a, ll, il)
    x = _dev(logits)
    c1, g1 = ctc_loss(handle, x, labels, ll, il)
    c2, g2 = ctc_loss(handle, x, labels, ll, il)
    np.testing.assert_array_equal(c1.to_numpy(), c2.to_numpy())
    np.testing.assert_array_equal(g1.to_numpy(), g2.to_numpy())
    c3, g3 = ctc_loss(handle, x, labels, ll, il, compute_gradients=False)
    assert g3 is None
    np.testing.assert_allclose(c3.to_numpy(), c1.to_numpy(), rtol=1e-6)


@pytest.mark.gpu
def test_normalization_none_takes_probabilities(handle, rng):
    """With normalization "none" the input is probabilities: the cost is -log p(l | probs)."""
    t, a, ll = 8, 4, [2, 3]
    il = [t, t]
    logits, labels = _problem(rng, t, a, ll, il)
    probs = np.exp(ref.log_softmax(logits)).astype(np.float32)
    costs, _ = ctc_loss(handle, _dev(probs), labels, ll, il, normalization="none", compute_gradients=False)
    np.testing.assert_allclose(costs.to_numpy(), ref.ctc_loss(logits, labels, ll, il)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_raw_capi_path(handle, rng):
    """cudnnCTCLoss_v8 through the C layer only."""
    import ctypes

    import cudnn_py as cudnn

    t, a, ll = 6, 3, [2]
    logits, labels = _problem(rng, t, a, ll, [t])
    x, lab, lens, ins = _dev(logits), _dev(labels), _dev(np.array(ll, np.int32)), _dev(np.array([t], np.int32))
    costs, grads = cudnn.empty((1,), np.float32), cudnn.empty(logits.shape, np.float32)
    desc, pd = capi.cudnnCTCLossDescriptor_t(), capi.cudnnTensorDescriptor_t()
    capi.cudnnCreateCTCLossDescriptor(ctypes.byref(desc))
    capi.cudnnCreateTensorDescriptor(ctypes.byref(pd))
    try:
        capi.cudnnSetCTCLossDescriptor_v9(desc, capi.CUDNN_DATA_FLOAT, capi.CUDNN_LOSS_NORMALIZATION_SOFTMAX,
                                          capi.CUDNN_CTC_ZERO_OOB_GRADIENTS, 255)
        capi.cudnnSetTensorNdDescriptor(pd, capi.CUDNN_DATA_FLOAT, 3, (ctypes.c_int * 3)(t, 1, a),
                                        (ctypes.c_int * 3)(a, a, 1))
        size = ctypes.c_size_t()
        capi.cudnnGetCTCLossWorkspaceSize_v8(handle.ptr, capi.CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, desc, pd, pd,
                                             ctypes.byref(size))
        ws = cudnn.empty((max(size.value, 1),), np.uint8)
        int_p = ctypes.POINTER(ctypes.c_int)  # const int labels[] etc.: device addresses cast to int*
        capi.cudnnCTCLoss_v8(handle.ptr, capi.CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, desc, pd, x.ptr,
                             ctypes.cast(lab.ptr, int_p), ctypes.cast(lens.ptr, int_p), ctypes.cast(ins.ptr, int_p),
                             costs.ptr, pd, grads.ptr, size.value, ws.ptr)
        want_c, want_g = ref.ctc_loss(logits, labels, ll, [t])
        np.testing.assert_allclose(costs.to_numpy(), want_c, rtol=1e-4)
        np.testing.assert_allclose(grads.to_numpy(), want_g, rtol=1e-4, atol=1e-4)
    finally:
        capi.cudnnDestroyTensorDescriptor(pd)
        capi.cudnnDestroyCTCLossDescriptor(desc)
