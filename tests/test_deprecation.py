"""Old spellings keep working with a DeprecationWarning (cudnn_py._deprecation)."""
from __future__ import annotations

import pytest

from cudnn_py._deprecation import alias, renamed_kwargs
from cudnn_py.errors import InvalidTypeError


def test_renamed_kwargs_moves_old_names_with_a_warning():
    with pytest.warns(DeprecationWarning, match="format= is deprecated, use layout="):
        got = renamed_kwargs("f", {"format": "NHWC"}, {"format": "layout"}, {"layout": None})
    assert got == {"layout": "NHWC"}


def test_renamed_kwargs_refuses_unknown_and_doubled_names():
    with pytest.raises(InvalidTypeError, match="unexpected keyword argument 'bogus'"):
        renamed_kwargs("f", {"bogus": 1}, {"format": "layout"}, {"layout": None})
    with pytest.raises(InvalidTypeError, match="both layout= and its old spelling format="):
        renamed_kwargs("f", {"format": "NHWC"}, {"format": "layout"}, {"layout": "NCHW"})


def test_alias_warns_and_calls_the_new_name():
    def new(a, b=2):
        return a + b
    old = alias("old_name", new)
    with pytest.warns(DeprecationWarning, match="old_name is deprecated, use .*new"):
        assert old(1, b=5) == 6
    assert old.__name__ == "old_name"
