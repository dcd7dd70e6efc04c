"""Issue 40 on CPU: the last leaks (item 4) and a new user's first-hour frictions (item 8), each checked as a user
meets it (messages, line counts, files left behind)."""
from __future__ import annotations

import pickle

import pytest

import cudnn_py
from cudnn_py import capi
from cudnn_py.algorithm_queries import AlgoPerf
from cudnn_py.errors import CudnnNotSupportedError, CudnnPyError
from cudnn_py.graph.errors import GraphNotSupportedError

# --- 4. the last leaks ---


@pytest.mark.parametrize("args, shown", [
    ((None, None, None, None), ["graph 'None'", "operations: \n", "tried: none"]),
    (("abc", "abc", "abc", "abc"), ["graph 'abc'", "operations: abc", "tried: abc", "?: abc"]),
    ((1, 2.5, object, [("ok", "pair"), "lone", ["list", "pair"]], "x"), ["graph '1'", "operations: 2.5", "?: lone", "tried: <class 'object'>",
                                                                          "ok: pair", "list: pair", "UNKNOWN ('x')"]),
])
def test_graph_not_supported_error_takes_odd_arguments(args, shown):
    """An exception's constructor never raises: what it got is kept as text, and it still pickles."""
    e = GraphNotSupportedError(*args)
    assert isinstance(e, CudnnNotSupportedError)
    for part in shown:
        assert part in str(e) + "\n"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is GraphNotSupportedError and str(again) == str(e)


@pytest.mark.parametrize("old, args", [
    ("cudnn_py.ops.pooling.PoolingDescriptor", ("max",)), ("cudnn_py.ops.activation.ActivationDescriptor", ("relu",)),
    ("cudnn_py.ops.lrn.LRNDescriptor", ()), ("cudnn_py.descriptors.OpTensorDescriptor", ()),
    ("cudnn_py.descriptors.ReduceTensorDescriptor", ()), ("cudnn_py.ops.convolution.ConvolutionDescriptor", ()),
])
def test_deprecated_descriptor_names_close_and_work_in_with(old, args):
    """What the old names made could be closed and used in ``with``; the Settings they now make can too."""
    import importlib
    module, name = old.rsplit(".", 1)
    make = getattr(importlib.import_module(module), name)
    with pytest.warns(DeprecationWarning, match=f"{name} is deprecated"):
        made = make(*args)
    made.close()
    made.close()  # idempotent, as Descriptor.close
    with pytest.warns(DeprecationWarning):
        with make(*args) as inside:
            assert inside == made  # the object itself, still usable after close()
    assert hash(inside) == hash(made)


def _perf(**change):
    fields = dict(direction="forward", algo=capi.cudnnConvolutionFwdAlgo_t(1), status=capi.CUDNN_STATUS_SUCCESS,
                  time_ms=0.5, memory_bytes=64, determinism=capi.CUDNN_DETERMINISTIC, math_type=capi.CUDNN_DEFAULT_MATH)
    return AlgoPerf(**{**fields, **change})


@pytest.mark.parametrize("change, match", [
    (dict(direction=None), "direction None"), (dict(direction="sideways"), "direction 'sideways'"),
    (dict(algo=None), "algo must be a cudnnConvolutionFwdAlgo_t"), (dict(algo=1), "algo must be"),
    (dict(algo=capi.cudnnConvolutionBwdDataAlgo_t(1)), "algo must be a cudnnConvolutionFwdAlgo_t"),
    (dict(status="ok"), "status must be"), (dict(status=None), "status must be"),
    (dict(time_ms="1"), "time_ms must be a number"), (dict(time_ms=float("nan")), "time_ms is NaN"),
    (dict(time_ms=True), "time_ms must be"), (dict(memory_bytes=-1), "memory_bytes must be >= 0"),
    (dict(memory_bytes=1.5), "memory_bytes must be an int"), (dict(determinism=1), "determinism must be"),
    (dict(math_type=None), "math_type must be"),
])
def test_algo_perf_checks_its_fields(change, match):
    with pytest.raises(CudnnPyError, match=match):
        _perf(**change)


def test_algo_perf_keeps_what_cudnn_reports():
    assert _perf().supported and _perf(status=3000 + 999).status == 3999  # a status newer than the headers
    assert AlgoPerf.from_dict(_perf(time_ms=-1.0).to_dict()) == _perf(time_ms=-1.0)  # Find's "not timed"
