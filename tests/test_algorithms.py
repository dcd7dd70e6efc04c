"""Algorithm records, names, the "fastest" cache and the removed-selector port, on CPU (real library, no GPU)."""
from __future__ import annotations

import ctypes
import json

import pytest

import cudnn_py.algorithms as alg
from cudnn_py import capi
from cudnn_py.errors import CudnnNotSupportedError, WorkspaceLimitError


def _rec(direction="forward", algo=0, status=0, time_ms=1.0, memory=0, det=1, math=0):
    return alg.AlgoPerf(direction, alg.algorithm_enum(direction)(algo), capi.cudnnStatus_t(status), time_ms, memory,
                        capi.cudnnDeterminism_t(det), capi.cudnnMathType_t(math))


@pytest.mark.parametrize("direction,enum_name", [("forward", "cudnnConvolutionFwdAlgo_t"),
                                                 ("backward_data", "cudnnConvolutionBwdDataAlgo_t"),
                                                 ("backward_filter", "cudnnConvolutionBwdFilterAlgo_t")])
def test_parse_algo(direction, enum_name):
    kind = getattr(capi, enum_name)
    members = [m for m in kind if not m.name.endswith("_COUNT")]
    for m in members:
        assert alg.parse_algo(direction, m) is m
        assert alg.parse_algo(direction, int(m)) is m
        assert alg.parse_algo(direction, m.name) is m
        assert alg.parse_algo(direction, m.name.split("_ALGO_")[1].lower()) is m
    with pytest.raises(ValueError, match="does not exist"):
        alg.parse_algo(direction, "NO_SUCH_ALGO")
    with pytest.raises(ValueError, match="does not exist"):
        alg.parse_algo(direction, 99)
    with pytest.raises(ValueError, match="does not exist"):
        alg.parse_algo(direction, kind[f"{members[0].name.rsplit('_ALGO_', 1)[0]}_ALGO_COUNT"].name)
    with pytest.raises(TypeError):
        alg.parse_algo(direction, 1.5)


def test_parse_algo_rejects_other_directions_enum():
    with pytest.raises(TypeError, match="not a forward algorithm"):
        alg.parse_algo("forward", capi.CUDNN_CONVOLUTION_BWD_DATA_ALGO_1)
    with pytest.raises(ValueError, match="direction"):
        alg.parse_algo("sideways", 0)


def test_record_from_struct_and_json_round_trip():
    s = capi.cudnnConvolutionBwdFilterAlgoPerf_t()
    s.algo, s.status, s.time, s.memory = 3, 0, 0.25, 4096
    s.determinism, s.mathType = capi.CUDNN_NON_DETERMINISTIC, capi.CUDNN_TENSOR_OP_MATH
    r = alg.AlgoPerf.from_struct("backward_filter", s)
    assert r.algo is capi.CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 and r.supported and not r.deterministic
    assert r.time_ms == 0.25 and r.memory_bytes == 4096 and r.math_type is capi.CUDNN_TENSOR_OP_MATH
    d = json.loads(json.dumps(r.to_dict()))
    assert d["algo"] == "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3" and alg.AlgoPerf.from_dict(d) == r
    s.status = capi.CUDNN_STATUS_NOT_SUPPORTED
    assert not alg.AlgoPerf.from_struct("backward_filter", s).supported
    assert "ALGO_3" in str(r)


def test_cache_put_get_save_load_clear(tmp_path):
    cache = alg.AlgorithmCache()
    k1 = ("forward", [8, 3, 32, 32], "CUDNN_DATA_FLOAT", 0)
    k2 = ("backward_data", [1, 2], None, False)
    with pytest.raises(TypeError):
        cache.put(k1, "not a record")
    with pytest.raises(TypeError):
        cache.put(("forward", object()), _rec())
    cache.put(tuple(tuple(v) if isinstance(v, list) else v for v in k1), _rec(algo=1, time_ms=0.5, memory=64))
    cache.put(tuple(tuple(v) if isinstance(v, list) else v for v in k2), _rec("backward_data", algo=5))
    assert len(cache) == 2
    path = tmp_path / "c.json"
    cache.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "cudnn_py.algorithm_cache" and len(doc["entries"]) == 2
    other = alg.AlgorithmCache()
    gen = other.generation
    assert other.load(path) == 2 and other.generation == gen + 1
    assert other.entries() == cache.entries()
    key = ("forward", (8, 3, 32, 32), "CUDNN_DATA_FLOAT", 0)
    assert key in other and other.get(key).algo is capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
    other.clear()
    assert len(other) == 0 and other.get(key) is None and other.generation == gen + 2
    other.put(("x",), _rec())
    other.load(path, merge=False)
    assert ("x",) not in other and len(other) == 2


def test_cache_load_rejects_foreign_files(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a cudnn_py algorithm cache"):
        alg.AlgorithmCache().load(p)
    p.write_text(json.dumps({"format": "cudnn_py.algorithm_cache", "version": 7, "entries": []}))
    with pytest.raises(ValueError, match="version"):
        alg.AlgorithmCache().load(p)


def test_select_algorithm():
    recs = [_rec(algo=6, status=int(capi.CUDNN_STATUS_NOT_SUPPORTED)), _rec(algo=4, memory=1000, det=0),
            _rec(algo=1, memory=100), _rec(algo=0, memory=0)]
    assert alg.select_algorithm(recs).algo == 4
    assert alg.select_algorithm(recs, deterministic=True).algo == 1
    assert alg.select_algorithm(recs, limit=500).algo == 1
    assert alg.select_algorithm(recs, limit=0).algo == 0
    assert alg.select_algorithm(recs, limit=0, sizes=lambda r: 0).algo == 4
    with pytest.raises(WorkspaceLimitError, match="limit of 10 B"):
        alg.select_algorithm(recs[:3], limit=10)
    with pytest.raises(CudnnNotSupportedError, match="CUDNN_STATUS_NOT_SUPPORTED"):
        alg.select_algorithm(recs[:1])
    with pytest.raises(CudnnNotSupportedError, match="no algorithm"):
        alg.select_algorithm([])


def test_preferences_keep_cudnn7_values():
    assert alg.CUDNN_CONVOLUTION_FWD_NO_WORKSPACE == 0
    assert alg.CUDNN_CONVOLUTION_FWD_PREFER_FASTEST == 1
    assert alg.CUDNN_CONVOLUTION_FWD_SPECIFY_WORKSPACE_LIMIT == 2
    assert alg.CUDNN_CONVOLUTION_BWD_DATA_SPECIFY_WORKSPACE_LIMIT == 2
    assert alg.CUDNN_CONVOLUTION_BWD_FILTER_PREFER_FASTEST == 1


def test_selector_validates_before_c():
    with pytest.raises(ValueError, match="preference"):
        alg.choose_forward_algorithm(None, None, None, None, None, 7)
    with pytest.raises(ValueError, match="memory_limit"):
        alg.choose_backward_data_algorithm(None, None, None, None, None,
                                           alg.CUDNN_CONVOLUTION_BWD_DATA_SPECIFY_WORKSPACE_LIMIT, -1)
    with pytest.raises(ValueError, match="direction"):
        alg.max_algorithm_count(None, "up")


def test_removed_names_point_to_the_port():
    from cudnn_py.errors import FunctionNotAvailableError
    with pytest.raises(FunctionNotAvailableError, match="choose_forward_algorithm"):
        capi.cudnnGetConvolutionForwardAlgorithm(None, None, None, None, None, 1, 0, None)
    assert callable(alg.cudnnGetConvolutionForwardAlgorithm)
    out = ctypes.c_int(-1)
    assert alg._store(ctypes.byref(out), capi.CUDNN_CONVOLUTION_FWD_ALGO_FFT) is capi.CUDNN_CONVOLUTION_FWD_ALGO_FFT
    assert out.value == int(capi.CUDNN_CONVOLUTION_FWD_ALGO_FFT)
