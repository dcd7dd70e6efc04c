"""Bindings generated from newer headers than the loaded library: import works, missing functions fail only when called.

Each library is loaded in its own process through CUDNN_PY_LIBRARY: the installed one everywhere, and an older
system cuDNN where the machine has one (the GPU machine has 9.14 beside the 9.19 wheel).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_py import capi, library

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = Path("/usr/lib/x86_64-linux-gnu/libcudnn.so.9")

PROBE = r"""
import json
from cudnn_py import capi, library
from cudnn_py.errors import FunctionNotAvailableError
missing, messages = [], []
for name in capi.FUNCTIONS:
    fn = getattr(capi, name)
    if not fn.available:
        missing.append(name)
        try:
            fn(*[None] * len(fn._argtypes))
        except FunctionNotAvailableError as e:
            messages.append(str(e))
print(json.dumps({"version": library().version_string, "path": library().path, "missing": missing,
                  "messages": messages, "create_tensor_ok": bool(capi.cudnnCreateTensorDescriptor.available)}))
"""


def probe(path: str) -> dict:
    env = {**os.environ, "CUDNN_PY_LIBRARY": path,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def check(result: dict) -> None:
    assert len(result["messages"]) == len(result["missing"])
    for name, msg in zip(result["missing"], result["messages"]):
        assert name in msg and result["version"] in msg and "does not export it" in msg
    assert result["create_tensor_ok"]


def test_installed_library():
    result = probe(library().path)
    check(result)
    print(f"cuDNN {result['version']}: {len(capi.FUNCTIONS) - len(result['missing'])} of {len(capi.FUNCTIONS)} "
          f"functions exported; missing: {result['missing']}")
    if result["version"] == capi.HEADERS_VERSION:
        assert result["missing"] == []


@pytest.mark.skipif(not SYSTEM.exists(), reason=f"no system cuDNN at {SYSTEM}")
def test_older_system_library():
    result = probe(str(SYSTEM))
    check(result)
    print(f"system cuDNN {result['version']} at {result['path']}: missing {result['missing']}")
    assert result["path"].startswith(str(SYSTEM.parent))
