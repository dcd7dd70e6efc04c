"""The tuning database on CPU: the record/lookup interface, environments, digests, concurrent writers, a writer
killed with SIGKILL, damaged, truncated, foreign and newer files, read-only locations, merging."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from cudnn_py.errors import CudnnPyError
from cudnn_py.tuning import (Environment, TuningDatabase, TuningDatabaseError, TuningWarning, database,
                             default_database, set_default_database)

ENV = Environment("9.19.0", "Test GPU", "9.0", "13.0")
OTHER = Environment("9.14.0", "Test GPU", "9.0", "13.0")


@pytest.fixture
def db(tmp_path):
    with TuningDatabase(tmp_path / "t.sqlite", environment=ENV) as d:
        yield d


def test_record_and_lookup(db):
    assert db.lookup("engine_choice", "conv|x") is None
    db.record("engine_choice", "conv|x", {"engine": 12, "knobs": {"SPLIT_K": 2}, "ms": 0.5})
    assert db.lookup("engine_choice", "conv|x") == {"engine": 12, "knobs": {"SPLIT_K": 2}, "ms": 0.5}
    db.record("engine_choice", "conv|x", {"engine": 3})   # an upsert
    assert db.lookup("engine_choice", "conv|x") == {"engine": 3} and db.count() == 1
    assert db.lookup("plan", "conv|x") is None             # kinds are separate
    (rec,) = db.records()
    assert (rec.kind, rec.key, rec.environment, rec.value) == ("engine_choice", "conv|x", ENV, {"engine": 3})
    assert rec.writer.endswith(f":{os.getpid()}") and rec.updated <= time.time()
    db.discard("engine_choice", "conv|x")
    assert db.count() == 0 and db.integrity_check() == "ok"


def test_lookups_see_only_their_environment(db, tmp_path):
    db.record("k", "a", {"v": 1})
    with TuningDatabase(tmp_path / "t.sqlite", environment=OTHER) as other:
        assert other.lookup("k", "a") is None
        other.record("k", "a", {"v": 2})
        assert other.lookup("k", "a") == {"v": 2}
    assert db.lookup("k", "a") == {"v": 1}
    assert db.environments() == [OTHER, ENV] and len(db.records("k", ENV)) == 1 and db.count("k") == 2
    assert db.clear("k") == 2 and db.count() == 0


@pytest.mark.parametrize("kind,key,value,error,match", [
    (3, "k", {}, TypeError, "kind must be a str"), ("", "k", {}, ValueError, "kind must be"),
    ("a b", "k", {}, ValueError, "kind must be"), ("k", b"k", {}, TypeError, "key must be a str"),
    ("k", "", {}, ValueError, "key must be"), ("k", "k", [1], TypeError, "must be a dict"),
    ("k", "k", {"t": float("nan")}, ValueError, "finite"), ("k", "k", {1: object()}, ValueError, "JSON data"),
])
def test_bad_arguments_are_refused_before_sqlite(db, kind, key, value, error, match):
    with pytest.raises(error, match=match) as e:
        db.record(kind, key, value)
    assert isinstance(e.value, CudnnPyError)


def test_a_tampered_record_is_ignored_and_dropped(db):
    db.record("k", "a", {"ms": 1.0})
    db.record("k", "b", {"ms": 2.0})
    with sqlite3.connect(db.path) as c:
        c.execute("UPDATE records SET value = '{\"ms\":0.001}' WHERE key = 'a'")   # someone "improved" a time
        c.execute("UPDATE records SET key = 'c' WHERE key = 'b'")                  # a record under another key
    with pytest.warns(TuningWarning, match="digest does not match"):
        assert db.lookup("k", "a") is None
    with pytest.warns(TuningWarning, match="'c'"):
        assert db.records() == []
    with pytest.warns(TuningWarning):
        assert db.lookup("k", "c") is None
    assert db.count() == 0


_WRITER = textwrap.dedent("""
    import sys, time
    from cudnn_py.tuning import Environment, TuningDatabase
    path, who, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    db = TuningDatabase(path, environment=Environment("9.19.0", "Test GPU", "9.0", "13.0"))
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        db.record("sweep", f"{who}/{n}", {"who": who, "n": n, "pad": "x" * (n % 300)})
        db.record("shared", "hot", {"who": who, "n": n})          # every writer fights over one key too
        n += 1
        print(n, flush=True)
    """)


def _writer(path, who, seconds):
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(path), who, str(seconds)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_eight_processes_writing_at_once_lose_nothing(tmp_path):
    """4 s each by default; CUDNN_PY_STRESS_SECONDS=60 runs the issue's minute."""
    path = tmp_path / "shared.sqlite"
    seconds = float(os.environ.get("CUDNN_PY_STRESS_SECONDS", "4"))
    procs = [_writer(path, f"w{i}", seconds) for i in range(8)]
    counts = {}
    for i, p in enumerate(procs):
        out, _ = p.communicate(timeout=seconds + 120)
        assert p.returncode == 0
        counts[f"w{i}"] = int(out.split()[-1])
    with TuningDatabase(path, environment=ENV) as d:
        assert d.integrity_check() == "ok"
        assert d.count("sweep") == sum(counts.values()) and min(counts.values()) > 0
        for who, n in counts.items():
            assert d.lookup("sweep", f"{who}/{n - 1}") == {"who": who, "n": n - 1, "pad": "x" * ((n - 1) % 300)}
        assert d.lookup("shared", "hot")["who"] in counts


def test_a_writer_killed_mid_write_leaves_a_consistent_database(tmp_path):
    path = tmp_path / "killed.sqlite"
    p = _writer(path, "victim", 60.0)
    line = ""
    for _ in range(200):          # let it commit a good number of records, then kill it where it stands
        line = p.stdout.readline()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    p.stdout.close()
    committed = int(line)
    with TuningDatabase(path, environment=ENV) as d:
        assert d.integrity_check() == "ok"
        n = d.count("sweep")
        assert n >= committed
        assert [d.lookup("sweep", f"victim/{i}")["n"] for i in range(n)] == list(range(n))  # a prefix, no holes
        d.record("sweep", "after", {"ok": True})
        assert d.lookup("sweep", "after") == {"ok": True}


def _filled(tmp_path, n=400) -> bytes:
    path = tmp_path / "full.sqlite"
    with TuningDatabase(path, environment=ENV) as d:
        for i in range(n):
            d.record("plan", f"k{i}", {"json": "y" * 300, "i": i})
    return path.read_bytes()


@pytest.mark.parametrize("cut", [0.5, 0.1, 60 / 200000])
def test_a_truncated_file_is_refused_clearly(tmp_path, cut):
    data = _filled(tmp_path)
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(data[:max(1, int(len(data) * cut))])
    with pytest.raises(TuningDatabaseError, match="damaged|truncated"):
        TuningDatabase(bad, environment=ENV)


def test_a_corrupted_file_is_refused_clearly(tmp_path):
    data = bytearray(_filled(tmp_path))
    data[len(data) // 2:len(data) // 2 + 4096] = bytes(range(256)) * 16
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(bytes(data))
    with pytest.raises(TuningDatabaseError, match="damaged"):
        TuningDatabase(bad, environment=ENV)
    bad.write_text("{\"format\": \"cudnn_py.algorithm_cache\"}" * 20)
    with pytest.raises(TuningDatabaseError, match="not an SQLite file"):
        TuningDatabase(bad, environment=ENV)


def test_a_newer_schema_is_refused(tmp_path, db):
    db.record("k", "a", {})
    with sqlite3.connect(db.path) as c:
        c.execute(f"PRAGMA user_version = {database.SCHEMA_VERSION + 1}")
    with pytest.raises(TuningDatabaseError, match=f"schema {database.SCHEMA_VERSION + 1} by a newer cudnn-py"):
        TuningDatabase(db.path, environment=ENV)


def test_another_programs_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t(x)")
    with pytest.raises(TuningDatabaseError, match="another program"):
        TuningDatabase(path, environment=ENV)


def test_an_unwritable_location_degrades_to_memory_with_one_warning(tmp_path):
    with pytest.warns(TuningWarning, match="in memory") as caught:
        d = TuningDatabase("/proc/cudnn_py_cannot_exist.sqlite", environment=ENV)  # /proc takes no new file
        d.record("k", "a", {"v": 1})
        assert d.lookup("k", "a") == {"v": 1}
    assert len(caught) == 1 and d.in_memory and d.degraded


def test_a_read_only_file_is_read_into_memory(db, monkeypatch):
    db.record("k", "a", {"v": 1})
    path = db.path
    db.close()
    real = TuningDatabase._raw_connect

    def read_only(self, target, uri=False):   # as the file system would answer a write (root ignores chmod)
        conn = real(self, target, uri)
        if target == str(path):
            conn.execute("PRAGMA query_only = 1")
        return conn
    monkeypatch.setattr(TuningDatabase, "_raw_connect", read_only)
    with pytest.warns(TuningWarning, match="cannot be written"):
        d = TuningDatabase(path, environment=ENV)
        d.record("k", "b", {"v": 2})
    assert d.in_memory and d.lookup("k", "a") == {"v": 1} and d.lookup("k", "b") == {"v": 2}
    monkeypatch.undo()
    assert TuningDatabase(path, environment=ENV).lookup("k", "b") is None   # the file was not touched


def test_merge_keeps_the_newer_record(tmp_path, db):
    db.record("k", "a", {"v": "old"})
    db.record("k", "only-here", {"v": 0})
    time.sleep(0.01)
    with TuningDatabase(tmp_path / "b.sqlite", environment=ENV) as b, \
            TuningDatabase(tmp_path / "b.sqlite", environment=OTHER) as b_other:
        b.record("k", "a", {"v": "new"})
        b_other.record("k", "a", {"v": "other env"})
    assert db.merge(tmp_path / "b.sqlite") == 2
    assert db.lookup("k", "a") == {"v": "new"} and db.lookup("k", "only-here") == {"v": 0}
    assert db.merge(tmp_path / "b.sqlite") == 0          # nothing newer the second time
    assert {r.environment for r in db.records()} == {ENV, OTHER}


def test_put_records_with_a_source_runs_once(db):
    recs = [database.Record("k", "a", ENV, {"v": 1}, time.time(), "import")]
    assert not db.imported("files") and db.put_records(recs, source="files") == 1
    db.clear()
    assert db.imported("files") and db.put_records(recs, source="files") == 0 and db.count() == 0


def test_default_database_follows_the_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setattr(database, "_default", [None])
    monkeypatch.delenv("CUDNN_PY_TUNING_DB", raising=False)
    monkeypatch.setenv("CUDNN_PY_PLAN_CACHE_DIR", str(tmp_path / "plans"))
    assert database.default_path() == str(tmp_path / "plans" / "tuning.sqlite")
    monkeypatch.delenv("CUDNN_PY_PLAN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert database.default_path() == str(tmp_path / "cache" / "cudnn_py" / "tuning.sqlite")
    monkeypatch.setenv("CUDNN_PY_TUNING_DB", str(tmp_path / "mine.sqlite"))
    first = default_database()
    assert first.path == tmp_path / "mine.sqlite" and default_database() is first
    set_default_database(":memory:")
    assert default_database().in_memory and default_database().path is None
    set_default_database(None)
    assert default_database() is first


def test_closed_database_says_so(db):
    db.close()
    db.close()
    with pytest.raises(TuningDatabaseError, match="closed"):
        db.lookup("k", "a")


def _driver_fingerprint(device: int) -> tuple[str, str, str] | None:
    """(name, compute capability, driver) of ``device`` asked of the driver directly; None where it has none."""
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return None
    except Exception:  # noqa: BLE001 - no cuda-bindings or no driver library
        return None
    err, dev = driver.cuDeviceGet(device)
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    attr = driver.CUdevice_attribute
    name = driver.cuDeviceGetName(96, dev)[1].split(b"\0")[0].decode()
    major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
    minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
    version = driver.cuDriverGetVersion()[1]
    return name, f"{major}.{minor}", f"{version // 1000}.{version % 1000 // 10}"


@pytest.mark.parametrize("device", [0, 4096])
def test_the_fingerprint_is_what_the_driver_says_of_the_device_or_none(device):
    """The GPU fields of an environment (read from the driver query ``cudnn-py info`` shows too): the device's name,
    compute capability and the driver's CUDA version, or "none" for each where there is no such device."""
    from cudnn_py.tuning_records import fingerprint
    assert fingerprint._gpu(device) == (_driver_fingerprint(device) or ("none", "none", "none"))
