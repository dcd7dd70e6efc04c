"""The on-disk plan store without a GPU: keys, atomic writes, and hostile or foreign files ignored with a warning."""
from __future__ import annotations

import json
import os

import pytest

from cudnn_py.graph import plan_store


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_store, "_device_tag", lambda handle: "Test GPU|sm_90")
    plan_store.set_plan_cache_dir(tmp_path)
    yield tmp_path
    plan_store.set_plan_cache_dir(None)


ENTRY = [{"json": "{}", "tag": "eng0", "ms": 0.5}]


def test_round_trip_and_key(store):
    assert plan_store.load(("g",), ("build",), None) is None
    plan_store.save(("g",), ("build",), None, ENTRY)
    assert plan_store.load(("g",), ("build",), None) == ENTRY
    assert plan_store.load(("g2",), ("build",), None) is None          # another graph
    assert plan_store.load(("g",), ("autotune",), None) is None        # other options
    assert [p.name for p in store.iterdir()] == [next(store.glob("plan-*.json")).name]  # no temporary left


def test_disabled_reads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDNN_PY_PLAN_CACHE_DIR", raising=False)
    plan_store.set_plan_cache_dir(None)
    plan_store.save(("g",), (), None, ENTRY)
    assert plan_store.load(("g",), (), None) is None
    assert plan_store.plan_cache_dir() is None


@pytest.mark.parametrize("content", [b"", b"{not json", b"\xff\xfe", json.dumps([1, 2]).encode(),
                                     json.dumps({"format": 99}).encode()])
def test_corrupt_files_are_ignored_with_a_warning(store, content):
    plan_store.save(("g",), (), None, ENTRY)
    path = next(store.glob("plan-*.json"))
    path.write_bytes(content)
    with pytest.warns(RuntimeWarning, match=str(path.name)):
        assert plan_store.load(("g",), (), None) is None


@pytest.mark.parametrize("field,value", [("cudnn", "1.0.0"), ("device", "Other|sm_80"), ("key", "0" * 64),
                                         ("plans", []), ("plans", [{"json": 1, "tag": "x", "ms": None}]),
                                         ("plans", [{"json": "{}", "tag": "x", "ms": "fast"}])])
def test_foreign_or_malformed_entries_are_ignored(store, field, value):
    plan_store.save(("g",), (), None, ENTRY)
    path = next(store.glob("plan-*.json"))
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="ignoring"):
        assert plan_store.load(("g",), (), None) is None


def test_symlinks_are_neither_followed_nor_written_through(store, tmp_path_factory):
    plan_store.save(("g",), (), None, ENTRY)
    path = next(store.glob("plan-*.json"))
    target = tmp_path_factory.mktemp("elsewhere") / "victim"
    target.write_text("precious")
    path.unlink()
    os.symlink(target, path)
    assert plan_store.load(("g",), (), None) is None
    plan_store.save(("g",), (), None, ENTRY)
    assert target.read_text() == "precious"
    assert not path.is_symlink() and plan_store.load(("g",), (), None) == ENTRY


def test_environment_variable_turns_it_on(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_store, "_device_tag", lambda handle: "Test GPU|sm_90")
    monkeypatch.setattr(plan_store, "_dir", [None, False])
    monkeypatch.setenv("CUDNN_PY_PLAN_CACHE_DIR", str(tmp_path / "plans"))
    assert plan_store.plan_cache_dir() == tmp_path / "plans"
    plan_store.save(("g",), (), None, ENTRY)
    assert plan_store.load(("g",), (), None) == ENTRY


@pytest.mark.parametrize("text,match", [(b"\xff", "not UTF-8"), ("{truncated", "not valid JSON"),
                                        ("[1, 2]", "JSON object"), ("[" * 100000, "not valid JSON"),
                                        ("x" * (17 << 20), "far below")])
def test_plan_json_is_checked_before_cudnn_sees_it(text, match):
    from cudnn_py.graph import plan_from_json
    with pytest.raises(ValueError, match=match):
        plan_from_json(None, text, tag="plans/a.json")
    with pytest.raises(TypeError, match="str or bytes"):
        plan_from_json(None, 12345)


def test_a_store_that_cannot_be_made_or_written_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_store, "_device_tag", lambda handle: "Test GPU|sm_90")
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        plan_store.set_plan_cache_dir(f)
    plan_store.set_plan_cache_dir(tmp_path / "store")
    try:
        def refuse(*a, **k):
            raise PermissionError("read-only file system")
        monkeypatch.setattr(plan_store.tempfile, "mkstemp", refuse)
        with pytest.warns(RuntimeWarning, match="cannot write.*read-only"):
            plan_store.save(("g",), (), None, ENTRY)
    finally:
        plan_store.set_plan_cache_dir(None)


def test_knob_and_autotune_arguments_are_checked_before_cudnn():
    from cudnn_py.graph import plans
    assert plans._knob_type("SPLIT_K") == plans._knob_type("CUDNN_KNOB_TYPE_SPLIT_K")
    with pytest.raises(ValueError, match="unknown knob type"):
        plans._knob_type("NOPE")
    with pytest.raises(TypeError, match="int value"):
        plans._knob_value(2.5, "SPLIT_K")
    with pytest.raises(TypeError, match="no cache="):
        plans.autotune(None, None, {}, cache=False)
