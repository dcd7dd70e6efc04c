"""The plan store without a GPU: records in the tuning database, keys, environments, hostile records, damaged or
and read-only databases."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import types

import pytest

from cudnn_py import capi
from cudnn_py.graph import plan_store
from cudnn_py.tuning import FILE_NAME, Environment, TuningDatabase, TuningWarning
from cudnn_py.tuning import fingerprint

ENV = Environment("9.19.0", "Test GPU", "9.0", "13.0")
ENTRY = [{"json": "{}", "tag": "eng0", "ms": 0.5}]


@pytest.fixture
def fixed_env(monkeypatch):
    """This process's device 0 (the current one without a GPU) reads as ENV."""
    monkeypatch.setitem(fingerprint._cache, 0, ENV)
    for name in ("CUDNN_PY_PLAN_CACHE_DIR", "CUDNN_PY_TUNING_DB"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def store(tmp_path, fixed_env):
    plan_store.set_plan_cache_dir(tmp_path)
    yield tmp_path
    plan_store.set_plan_cache_dir(None)


def _key(graph_key, options):
    return hashlib.sha256(repr((graph_key, options)).encode()).hexdigest()


def test_round_trip_and_key(store):
    assert plan_store.load(("g",), ("build",), None) is None
    plan_store.save(("g",), ("build",), None, ENTRY)
    assert plan_store.load(("g",), ("build",), None) == ENTRY
    assert plan_store.load(("g2",), ("build",), None) is None          # another graph
    assert plan_store.load(("g",), ("autotune",), None) is None        # other options
    assert {p.name for p in store.iterdir()} <= {FILE_NAME, FILE_NAME + "-wal", FILE_NAME + "-shm"}
    db = plan_store.database()
    assert db.path == store / FILE_NAME and db.count(plan_store.KIND) == 1
    (rec,) = db.records(plan_store.KIND)
    assert rec.environment == ENV and rec.key == _key(("g",), ("build",)) and rec.value == {"plans": ENTRY}


def test_disabled_reads_and_writes_nothing(fixed_env):
    plan_store.set_plan_cache_dir(None)
    plan_store.save(("g",), (), None, ENTRY)
    assert plan_store.load(("g",), (), None) is None
    assert plan_store.plan_cache_dir() is None and plan_store.database() is None


def test_plans_of_another_environment_are_not_used(store):
    other = TuningDatabase(store / FILE_NAME, environment=Environment("9.14.0", "Test GPU", "9.0", "13.0"))
    other.record(plan_store.KIND, _key(("g",), ()), {"plans": ENTRY})
    assert plan_store.load(("g",), (), None) is None
    plan_store.save(("g",), (), None, ENTRY)
    assert plan_store.load(("g",), (), None) == ENTRY and other.lookup(plan_store.KIND, _key(("g",), ())) == \
        {"plans": ENTRY}
    other.close()


@pytest.mark.parametrize("value", [{}, {"plans": []}, {"plans": [{"json": 1, "tag": "x", "ms": None}]},
                                   {"plans": [{"json": "{}", "tag": "x", "ms": "fast"}]},
                                   {"plans": [{"json": "{}", "tag": "x", "ms": -1.0}]}])
def test_malformed_records_are_ignored_and_dropped(store, value):
    db = plan_store.database()
    db.record(plan_store.KIND, _key(("g",), ()), value)
    with pytest.warns(RuntimeWarning, match="ignoring"):
        assert plan_store.load(("g",), (), None) is None
    assert db.count(plan_store.KIND) == 0


def test_a_tampered_record_is_ignored_with_a_warning(store):
    plan_store.save(("g",), (), None, ENTRY)
    with sqlite3.connect(store / FILE_NAME) as c:
        c.execute("UPDATE records SET value = ?", (json.dumps({"plans": [{"json": "{}", "tag": "evil", "ms": 0}]}),))
    with pytest.warns(TuningWarning, match="digest does not match"):
        assert plan_store.load(("g",), (), None) is None
    plan_store.save(("g",), (), None, ENTRY)   # measured again, stored again
    assert plan_store.load(("g",), (), None) == ENTRY


def test_a_time_that_is_not_finite_is_stored_as_none(store):
    plan_store.save(("g",), (), None, [{"json": "{}", "tag": "eng0", "ms": float("nan")}])
    assert plan_store.load(("g",), (), None) == [{"json": "{}", "tag": "eng0", "ms": None}]


def test_save_refuses_what_is_not_a_plan_list(store):
    for bad in ([], [{"json": "{}"}], "plans"):
        with pytest.raises(ValueError, match="non-empty list"):
            plan_store.save(("g",), (), None, bad)


def test_environment_variables_turn_it_on(tmp_path, fixed_env, monkeypatch):
    from cudnn_py.tuning import database as dbm
    monkeypatch.setattr(plan_store, "_dir", [None, False])
    monkeypatch.setenv("CUDNN_PY_PLAN_CACHE_DIR", str(tmp_path / "plans"))
    assert plan_store.plan_cache_dir() == tmp_path / "plans"
    plan_store.save(("g",), (), None, ENTRY)
    assert plan_store.load(("g",), (), None) == ENTRY
    assert (tmp_path / "plans" / FILE_NAME).is_file()
    # CUDNN_PY_TUNING_DB alone: the default database holds the plans
    monkeypatch.setattr(plan_store, "_dir", [None, False])
    monkeypatch.delenv("CUDNN_PY_PLAN_CACHE_DIR")
    monkeypatch.setenv("CUDNN_PY_TUNING_DB", str(tmp_path / "all.sqlite"))
    monkeypatch.setattr(dbm, "_default", [None])
    assert plan_store.plan_cache_dir() is None and plan_store.database().path == tmp_path / "all.sqlite"
    plan_store.save(("g",), (), None, ENTRY)
    assert plan_store.load(("g",), (), None) == ENTRY
    monkeypatch.setattr(plan_store, "_dir", [None, False])


def test_use_database(fixed_env):
    db = TuningDatabase(environment=ENV)
    plan_store.use_database(db)
    try:
        plan_store.save(("g",), (), None, ENTRY)
        assert db.lookup(plan_store.KIND, _key(("g",), ())) == {"plans": ENTRY}
        with pytest.raises(TypeError, match="TuningDatabase"):
            plan_store.use_database("a path")
    finally:
        plan_store.use_database(None)
    assert plan_store.database() is not db


def test_a_damaged_database_warns_and_the_call_goes_on(tmp_path, fixed_env):
    (tmp_path / FILE_NAME).write_bytes(b"SQLite format 3\0" + b"\x07" * 5000)
    plan_store.set_plan_cache_dir(tmp_path)
    try:
        with pytest.warns(RuntimeWarning, match="damaged"):
            assert plan_store.load(("g",), (), None) is None
        with pytest.warns(RuntimeWarning, match="cannot write.*damaged"):
            plan_store.save(("g",), (), None, ENTRY)
    finally:
        plan_store.set_plan_cache_dir(None)


@pytest.mark.parametrize("text,match", [(b"\xff", "not UTF-8"), ("{truncated", "not valid JSON"),
                                        ("[1, 2]", "JSON object"), ("[" * 100000, "not valid JSON"),
                                        ("x" * (17 << 20), "far below")])
def test_plan_json_is_checked_before_cudnn_sees_it(text, match):
    from cudnn_py.graph import plan_from_json
    with pytest.raises(ValueError, match=match):
        plan_from_json(None, text, tag="plans/a.json")
    with pytest.raises(TypeError, match="str or bytes"):
        plan_from_json(None, 12345)


def test_a_store_directory_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        plan_store.set_plan_cache_dir(f)


def test_knob_and_autotune_arguments_are_checked_before_cudnn():
    from cudnn_py.graph import plans
    class Checked(Exception):
        pass

    def lower(handle):
        raise Checked  # the knobs passed their checks: the operation graph is next

    for name in ("SPLIT_K", "CUDNN_KNOB_TYPE_SPLIT_K", capi.CUDNN_KNOB_TYPE_SPLIT_K):
        with pytest.raises(Checked):
            plans.engine_config(types.SimpleNamespace(lower=lower), None, 0, {name: 2})
    with pytest.raises(ValueError, match="unknown knob type"):
        plans.engine_config(None, None, 0, {"NOPE": 1})
    with pytest.raises(TypeError, match="knob 'SPLIT_K' must be an int"):
        plans.engine_config(None, None, 0, {"SPLIT_K": 2.5})
    with pytest.raises(TypeError, match="no cache="):
        plans.autotune(None, None, {}, cache=False)
