"""Old spellings keep working with a DeprecationWarning (cudnn_py._deprecation)."""
from __future__ import annotations

import json

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


def test_one_filter_quiets_a_ports_c_calls_and_nothing_else():
    """The deprecation policy: a user's own call of a deprecated C function warns (once); a port of C code that
    calls them on purpose silences exactly those with the one filter the examples, benchmarks and pyproject use,
    and the Pythonic layer's old spellings still warn. In a fresh interpreter: each C function warns once per
    process."""
    import subprocess
    import sys
    code = """if True:
        import ctypes, json, warnings
        from cudnn_py import capi
        from cudnn_py._deprecation import alias
        def caught(fn):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                warnings.filterwarnings("ignore", r"cudnn\\w+ is deprecated in cuDNN 9", DeprecationWarning)
                fn()
            return [str(x.message) for x in w]
        d = capi.cudnnActivationDescriptor_t()
        ported = caught(lambda: capi.cudnnCreateActivationDescriptor(ctypes.byref(d)))
        pythonic = caught(alias("old_name", lambda: None))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            capi.cudnnSetActivationDescriptor(d, 1, 0, 0.0)
        print(json.dumps([ported, pythonic, [str(x.message) for x in w]]))
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ported, pythonic, user = json.loads(r.stdout)
    assert ported == [] and len(pythonic) == 1 and "old_name is deprecated" in pythonic[0]
    assert len(user) == 1 and user[0].startswith("cudnnSetActivationDescriptor is deprecated in cuDNN 9")
