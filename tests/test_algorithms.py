"""Algorithm records, names, the "fastest" cache and the removed-selector port, on CPU (real library, no GPU)."""
from __future__ import annotations

import ctypes
import json

import pytest

import cudnn_py.calls.fastest_cache as AC
import cudnn_py.calls.algorithms as alg
from cudnn_py import capi
from cudnn_py.errors import CudnnNotSupportedError, InvalidTypeError, InvalidValueError, WorkspaceLimitError
from cudnn_py.tuning import Environment, TuningDatabase, TuningWarning


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


# --- cache files: corrupt, hostile, foreign, inconsistent; written atomically ------------------------------------

def _conv_key(direction="forward", math="CUDNN_DEFAULT_MATH", deterministic=False, limit=None):
    return (direction, (1, 3, 8, 8), (192, 64, 8, 1), (4, 3, 3, 3), False, (1, 4, 6, 6), (144, 36, 6, 1),
            "CUDNN_DATA_FLOAT", "CUDNN_DATA_FLOAT", "CUDNN_DATA_FLOAT", (0, 0), (1, 1), (1, 1), 1,
            "CUDNN_CROSS_CORRELATION", math, deterministic, limit, 0)


def _doc(perf=None, key=None, **top):
    perf = {**_rec().to_dict(), **(perf or {})}
    return {"format": "cudnn_py.algorithm_cache", "version": 1, "cudnn_version": AC._cudnn_version(),
            "entries": [{"key": list(key or _conv_key()), "perf": perf}], **top}


@pytest.mark.parametrize("text,match", [
    ("", "not valid JSON"),
    ('{"format": "cudnn_py.algorithm_cache", "version": 1, "entries": [', "not valid JSON"),  # truncated
    ("\xff\xfe garbage", "not valid JSON|not UTF-8"),
    ("[" * 100000 + "]" * 100000, "not a JSON document|not a cudnn_py"),                   # nesting
    ('{"format": "cudnn_py.algorithm_cache", "version": 1, "entries": [1e999999]}', "entry 0"),
    ("1" * 5000, "not a JSON document"),                                                   # int digit limit
    (json.dumps({"format": "cudnn_py.algorithm_cache", "version": 1, "entries": {}}), "entries"),
    (json.dumps({"format": "cudnn_py.algorithm_cache", "version": 1, "entries": [{"key": 1}]}), "entry 0"),
])
def test_cache_load_refuses_corrupt_files_naming_them(tmp_path, text, match):
    p = tmp_path / "algos.json"
    p.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
    cache = alg.AlgorithmCache()
    with pytest.raises(alg.CacheFileError, match=match) as e:
        cache.load(p)
    assert str(p) in str(e.value) and len(cache) == 0


@pytest.mark.parametrize("perf,key,match", [
    (dict(memory_bytes=-5), None, "memory_bytes"),
    (dict(time_ms=float("nan")), None, "time_ms"),
    (dict(time_ms="1.0"), None, "time_ms"),
    (dict(memory_bytes=True), None, "memory_bytes"),
    (dict(status="CUDNN_STATUS_NOT_SUPPORTED"), None, "status"),
    (dict(status="CUDNN_STATUS_BOGUS"), None, "status"),
    (dict(algo="NO_SUCH"), None, "does not exist"),
    (dict(direction="sideways"), None, "direction"),
    (dict(direction="backward_data", algo="CUDNN_CONVOLUTION_BWD_DATA_ALGO_1"), None, "backward_data record"),
    (dict(math_type="CUDNN_TENSOR_OP_MATH"), _conv_key(math="CUDNN_FMA_MATH"), "math type"),
    (dict(determinism="CUDNN_NON_DETERMINISTIC"), _conv_key(deterministic=True), "not deterministic"),
    (dict(memory_bytes=4096), _conv_key(limit=1024), "limit"),
])
def test_cache_load_checks_every_value_against_its_key(tmp_path, perf, key, match):
    p = tmp_path / "algos.json"
    p.write_text(json.dumps(_doc(perf, key)))
    cache = alg.AlgorithmCache()
    with pytest.raises(alg.CacheFileError, match=match) as e:
        cache.load(p)
    assert str(p) in str(e.value) and len(cache) == 0


def test_cache_load_accepts_what_the_key_allows(tmp_path):
    p = tmp_path / "algos.json"
    p.write_text(json.dumps(_doc(dict(math_type="CUDNN_TENSOR_OP_MATH", memory_bytes=512), _conv_key(limit=1024))))
    assert alg.AlgorithmCache().load(p) == 1


def test_cache_load_refuses_another_cudnn_version(tmp_path):
    p = tmp_path / "algos.json"
    p.write_text(json.dumps(_doc(cudnn_version=1)))
    with pytest.raises(alg.CacheFileError, match="written with cuDNN 1"):
        alg.AlgorithmCache().load(p)
    p.write_text(json.dumps(_doc(cudnn_version="9.19")))
    with pytest.raises(alg.CacheFileError, match="cudnn_version"):
        alg.AlgorithmCache().load(p)


def test_cache_load_refuses_huge_and_missing_files(tmp_path, monkeypatch):
    monkeypatch.setattr(AC, "MAX_FILE_BYTES", 100)
    p = tmp_path / "big.json"
    p.write_text(json.dumps(_doc()))
    with pytest.raises(alg.CacheFileError, match="larger than"):
        alg.AlgorithmCache().load(p)
    with pytest.raises(alg.CacheFileError, match="cannot be read"):
        alg.AlgorithmCache().load(tmp_path / "missing.json")


def test_cache_put_refuses_records_that_cannot_answer_the_key():
    cache = alg.AlgorithmCache()
    with pytest.raises(ValueError, match="status"):
        cache.put(_conv_key(), _rec(status=int(capi.CUDNN_STATUS_NOT_SUPPORTED)))
    with pytest.raises(ValueError, match="math type"):
        cache.put(_conv_key(math="CUDNN_FMA_MATH"), _rec(math=int(capi.CUDNN_TENSOR_OP_MATH)))
    with pytest.raises(TypeError, match="JSON"):
        cache.put(("forward", float("nan")), _rec())
    cache.put(_conv_key(), _rec())
    assert len(cache) == 1


def test_cache_save_is_atomic_and_does_not_follow_symlinks(tmp_path):
    cache = alg.AlgorithmCache()
    cache.put(_conv_key(), _rec())
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = tmp_path / "algos.json"
    path.symlink_to(victim)
    for pid_guess in range(3):  # the old predictable temporary name, planted as a symlink too
        (tmp_path / f"algos.json.tmp{pid_guess}").symlink_to(victim)
    cache.save(path)
    assert victim.read_text() == "precious"
    assert not path.is_symlink() and alg.AlgorithmCache().load(path) == 1
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert leftovers == []
    assert (path.stat().st_mode & 0o077) == 0  # private, as mkstemp made it


def test_cache_save_failure_leaves_the_old_file(tmp_path, monkeypatch):
    cache = alg.AlgorithmCache()
    cache.put(_conv_key(), _rec())
    path = tmp_path / "algos.json"
    cache.save(path)
    before = path.read_text()
    monkeypatch.setattr(AC.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        cache.save(path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["algos.json"]


def test_allowed_by_math_type():
    default, tensor, fma = capi.CUDNN_DEFAULT_MATH, capi.CUDNN_TENSOR_OP_MATH, capi.CUDNN_FMA_MATH
    recs = [_rec(algo=1, math=int(tensor)), _rec(algo=2, math=int(default)), _rec(algo=3, math=int(fma))]
    assert [r.algo for r in alg.allowed_by_math_type(recs, default)] == [1, 2]  # DEFAULT also allows TENSOR_OP
    assert [r.algo for r in alg.allowed_by_math_type(recs, fma)] == [3]
    relabelled = alg.allowed_by_math_type(recs[:2], capi.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
    assert [r.math_type for r in relabelled] == [capi.CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION] * 2


def test_is_choice():
    assert alg.is_choice("heuristic") and alg.is_choice("FASTEST")
    assert not alg.is_choice("IMPLICIT_GEMM") and not alg.is_choice(capi.CUDNN_CONVOLUTION_FWD_ALGO_GEMM)


@pytest.fixture(autouse=True)
def private_database():
    """The process-wide cache keeps its choices in a database of this test's own (in memory)."""
    from cudnn_py.tuning import TuningDatabase
    alg.algorithm_cache.use_database(TuningDatabase(environment=ENV))
    yield
    alg.algorithm_cache.use_database(AC._default_database)


@pytest.fixture
def no_c(monkeypatch):
    """resolve_algorithm's C queries replaced: algorithm n needs n KiB of workspace; the heuristics rank 2, 0, 1."""
    monkeypatch.setattr(alg, "workspace_size", lambda h, d, a, b, conv, c, algo: int(alg.parse_algo(d, algo)) << 10)
    monkeypatch.setattr(alg, "heuristic_algorithms", lambda h, d, a, b, conv, c: [
        _rec(d, algo=2, memory=2048), _rec(d, algo=0, memory=0), _rec(d, algo=1, memory=1024, det=0)])
    alg.algorithm_cache.clear()
    yield
    alg.algorithm_cache.clear()


def _resolve(spec, **kw):
    return alg.resolve_algorithm(None, kw.pop("direction", "forward"), spec, (None, None, None), lambda m: None,
                                 capi.CUDNN_DEFAULT_MATH, problem="the test's", **kw)


def test_resolve_algorithm_heuristic_and_named(no_c):
    assert _resolve("heuristic")[0] == 2 and _resolve("heuristic")[2] == 2048
    assert _resolve("heuristic", limit=1500)[0] == 0
    assert _resolve("IMPLICIT_PRECOMP_GEMM") == (capi.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                 capi.CUDNN_DEFAULT_MATH, 1024)
    with pytest.raises(WorkspaceLimitError, match="limit is 100 B"):
        _resolve(1, limit=100)
    with pytest.raises(ValueError, match="not deterministic"):
        _resolve("ALGO_0", direction="backward_data", deterministic=True)


def test_resolve_algorithm_fastest_measures_once(no_c):
    measured = []

    def measure():
        measured.append(1)
        return [_rec(algo=1, memory=1024, det=0), _rec(algo=0, memory=0)]
    key = ("forward", "a key")
    assert _resolve("fastest", cache_key=key, measure=measure)[0] == 1
    assert _resolve("fastest", cache_key=key, measure=measure)[0] == 1 and len(measured) == 1  # remembered
    assert _resolve("fastest", cache_key=key + ("det",), measure=measure, deterministic=True)[0] == 0
    with pytest.raises(ValueError, match="measure"):
        _resolve("fastest")


ENV = Environment("9.19.0", "Test GPU", "9.0", "13.0")
CONV_KEY = ("forward", (8, 3, 32, 32), (3072, 1024, 32, 1), (16, 3, 3, 3), False, (8, 16, 30, 30),
            (14400, 900, 30, 1), "float32", "float32", "float32", ((0, 0), (0, 0)), (1, 1), (1, 1), 1,
            "cross_correlation", "CUDNN_DEFAULT_MATH", False, None, 0)


def test_choices_live_in_the_tuning_database(tmp_path):
    """Another process (here: another cache on the same file) finds a choice without measuring; another
    environment does not; clear() forgets it everywhere."""
    path = tmp_path / "tuning.sqlite"
    first = alg.AlgorithmCache(TuningDatabase(path, environment=ENV))
    first.put(CONV_KEY, _rec(algo=1, time_ms=0.25, memory=64))
    fresh = alg.AlgorithmCache(lambda: TuningDatabase(path, environment=ENV))
    assert fresh.get(CONV_KEY) == first.get(CONV_KEY) and CONV_KEY in fresh and len(fresh) == 1
    assert fresh.entries() == [(CONV_KEY, _rec(algo=1, time_ms=0.25, memory=64))]
    elsewhere = alg.AlgorithmCache(TuningDatabase(path, environment=Environment("9.14.0", "Test GPU", "9.0", "13.0")))
    assert elsewhere.get(CONV_KEY) is None and len(elsewhere) == 0
    fresh.clear()
    assert alg.AlgorithmCache(TuningDatabase(path, environment=ENV)).get(CONV_KEY) is None


def test_a_stored_choice_that_cannot_answer_its_key_is_measured_again(tmp_path):
    db = TuningDatabase(tmp_path / "t.sqlite", environment=ENV)
    key_text = json.dumps(list(CONV_KEY), separators=(",", ":"))
    # a backward-data record under a forward key: well-formed, digest right, but not an answer to the key
    db.record(AC.KIND, key_text, {"perf": _rec("backward_data", algo=1).to_dict()})
    cache = alg.AlgorithmCache(db)
    with pytest.warns(TuningWarning, match="measured again"):
        assert cache.get(CONV_KEY) is None
    assert db.count(AC.KIND) == 0
    db.record(AC.KIND, key_text, {"perf": "junk"})
    with pytest.warns(TuningWarning, match="missing"):
        assert cache.get(CONV_KEY) is None


def test_loading_a_json_file_imports_it_into_the_database(tmp_path):
    src = alg.AlgorithmCache()
    src.put(CONV_KEY, _rec(algo=1))
    src.save(tmp_path / "old.json")
    db = TuningDatabase(tmp_path / "t.sqlite", environment=ENV)
    assert alg.AlgorithmCache(db).load(tmp_path / "old.json") == 1
    assert alg.AlgorithmCache(TuningDatabase(tmp_path / "t.sqlite", environment=ENV)).get(CONV_KEY) == _rec(algo=1)


def test_a_database_that_cannot_be_opened_leaves_the_choices_in_memory(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database" * 100)
    cache = alg.AlgorithmCache(lambda: TuningDatabase(bad, environment=ENV))
    with pytest.warns(TuningWarning, match="stay in this process.*not an SQLite file"):
        assert cache.get(CONV_KEY) is None
        cache.put(CONV_KEY, _rec(algo=1))
        assert cache.get(CONV_KEY) == _rec(algo=1) and cache.entries() == [(CONV_KEY, _rec(algo=1))]
        cache.clear()
    assert cache._data == {}


# --- issue 46: AlgoPerf validates every field it accepts --------------------------------------------------------

def test_an_int_status_becomes_the_member_and_an_unknown_one_prints():
    """An int status was kept as is: to_dict() and str() then raised AttributeError ('int' has no 'name')."""
    r = _rec(status=int(capi.CUDNN_STATUS_NOT_SUPPORTED))
    assert r.status is capi.CUDNN_STATUS_NOT_SUPPORTED and "CUDNN_STATUS_NOT_SUPPORTED" in str(r)
    assert alg.AlgoPerf.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    newer = alg.AlgoPerf(**{**vars(r), "status": 3999})  # a status of a cuDNN newer than the headers
    assert newer.status == 3999 and "status 3999" in str(newer) and newer.to_dict()["status"] == 3999
    assert alg.AlgoPerf.from_dict(json.loads(json.dumps(newer.to_dict()))) == newer


@pytest.mark.parametrize("field, value", [
    ("status", -1), ("status", 2 ** 31), ("time_ms", float("inf")), ("time_ms", float("-inf")), ("time_ms", -0.5),
    ("time_ms", -2), ("memory_bytes", 2 ** 64), ("memory_bytes", 2 ** 80),
])
def test_algo_perf_refuses_values_out_of_range_naming_the_field(field, value):
    with pytest.raises(InvalidValueError, match=f"AlgoPerf {field}"):
        alg.AlgoPerf(**{**vars(_rec()), field: value})


def test_algo_perf_keeps_cudnns_not_timed_and_coerces_an_int_time():
    assert _rec(time_ms=-1.0).time_ms == -1.0  # the heuristic list's and a failed measurement's time
    assert type(_rec(time_ms=2).time_ms) is float


@pytest.mark.parametrize("d", [None, [], "perf", 1])
def test_from_dict_refuses_what_is_not_a_dict(d):
    with pytest.raises(InvalidTypeError, match="from_dict takes the dict"):
        alg.AlgoPerf.from_dict(d)
