"""The one cache mechanism (cudnn_py.core.caches): bounded, thread-safe, per handle or per process, inspectable."""
from __future__ import annotations

import pytest

from cudnn_py.core import caches
from cudnn_py.errors import InvalidTypeError, InvalidValueError
from helpers import hammer


def test_cache_is_bounded_and_drops_the_oldest():
    c = caches.Cache("t", maxsize=3)
    for k in range(5):
        c[k] = k * 10
    assert list(c.items()) == [(2, 20), (3, 30), (4, 40)]
    c[3] = 31  # replacing a key evicts nothing
    assert len(c) == 3 and c[3] == 31
    assert c.setdefault(9, "x") == "x" and 2 not in c and len(c) == 3
    assert c.setdefault(9, "y") == "x"
    assert c.pop(9) == "x" and c.pop(9, "gone") == "gone"
    c.update({7: 1, 8: 2})
    assert len(c) == 3 and set(c) >= {7, 8}
    c.clear()
    assert len(c) == 0 and "t" in repr(c)


@pytest.mark.parametrize("leave", ["pop", "del", "clear", "evict"])
def test_an_entry_leaving_empties_the_front(leave):
    c = caches.Cache("t", maxsize=2)
    c.update({1: "a", 2: "b"})
    c.front["last"] = "a"
    c[2] = "c"  # replacing or adding leaves the shortcuts
    assert c.front == {"last": "a"}
    {"pop": lambda: c.pop(1), "del": lambda: c.__delitem__(1), "clear": c.clear,
     "evict": lambda: c.update({3: "d"})}[leave]()
    assert c.front == {}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_cache_refuses_a_bad_bound(bad):
    with pytest.raises(InvalidValueError, match="maxsize"):
        caches.Cache("t", maxsize=bad)


def test_cache_survives_threads_inserting_past_its_bound():
    """Issue 13 point 12: 8 threads, a 1 µs switch interval, far more keys than the bound: no error, bound kept."""
    c = caches.Cache("race", maxsize=64)

    def work(t):
        for k in range(3000):
            c[(t, k)] = k
            c.setdefault((t, k, "s"), k)
            c.get((t, k - 1))

    assert hammer(work) == [] and len(c) <= 64


def test_shared_caches_are_listed_and_cleared():
    c = caches.shared("test.shared", maxsize=10)
    assert caches.shared("test.shared") is c
    c["k"] = 1
    assert caches.info()["test.shared"] == 1
    caches.clear()
    assert caches.info()["test.shared"] == 0


def test_handle_cache_refuses_what_is_not_a_handle():
    with pytest.raises(InvalidTypeError, match="handle"):
        caches.handle_cache("abc", "x")
