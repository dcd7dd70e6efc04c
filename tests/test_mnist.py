"""The mnistCUDNN port: data loading and a float64 NumPy LeNet (CPU); the example on the GPU in float32 and float16."""
from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reference import lrn as lrn_ref
from reference import pooling as pool_ref
from reference import softmax as softmax_ref

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mnist_cudnn", REPO / "examples" / "mnist_cudnn.py")
mnist = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mnist)

#: the project's test data sits in shared/ beside the checkout (CI lays it there); a user's in the example's places
SHARED = REPO.parent / "shared" / "data" / "mnistCUDNN"
DATA = mnist.find_data(None) or mnist.find_data(str(SHARED))
needs_data = pytest.mark.skipif(DATA is None, reason=f"mnistCUDNN data not found in {mnist.DATA_CANDIDATES} or "
                                                     f"{SHARED}")
#: what NVIDIA's C sample prints in float32: (class, its softmax value)
ORIGINAL = [(1, 0.9999399), (3, 0.9999288), (5, 0.9999820)]


def _conv(x, w):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    y = np.zeros((n, k, h - r + 1, wd - s + 1))
    for i in range(r):
        for j in range(s):
            y += np.einsum("nchw,kc->nkhw", x[:, :, i:i + h - r + 1, j:j + wd - s + 1], w[:, :, i, j])
    return y


def lenet64(weights, image):
    """The sample's network in float64 NumPy (the references of the individual layers)."""
    def layer(name, x):
        w, b = (np.asarray(v, np.float64) for v in weights[name])
        return _conv(x, w) + b[None, :, None, None]
    x = np.asarray(image, np.float64)
    x = pool_ref.forward(layer("conv1", x), "max", (2, 2), (0, 0), (2, 2))
    x = pool_ref.forward(layer("conv2", x), "max", (2, 2), (0, 0), (2, 2))
    x = np.maximum(layer("ip1", x), 0.0)
    x = lrn_ref.lrn_forward(x, 5, 1e-4, 0.75, 1.0)
    return softmax_ref.forward(layer("ip2", x), "accurate", "channel").reshape(-1)


# ---------------------------------------------------------------- CPU

def test_read_pgm_with_comments(tmp_path):
    pixels = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    p = tmp_path / "img.pgm"
    p.write_bytes(b"P5\n# a comment\n4 3\n# another\n255\n" + pixels.tobytes())
    np.testing.assert_array_equal(mnist.read_pgm(p), pixels)
    (tmp_path / "bad.pgm").write_bytes(b"P2\n4 3\n255\n" + pixels.tobytes())
    with pytest.raises(ValueError, match="PGM"):
        mnist.read_pgm(tmp_path / "bad.pgm")
    (tmp_path / "short.pgm").write_bytes(b"P5\n4 3\n255\n" + pixels.tobytes()[:5])
    with pytest.raises(ValueError, match="pixels"):
        mnist.read_pgm(tmp_path / "short.pgm")


def test_missing_data_says_where_to_get_it(tmp_path, capsys):
    assert mnist.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "mnistCUDNN data not found" in err and str(tmp_path) in err and "samples" in err


@needs_data
def test_data_loads_with_the_sample_shapes():
    w = mnist.load_weights(DATA)
    assert {k: (v[0].shape, v[1].shape) for k, v in w.items()} == {
        "conv1": ((20, 1, 5, 5), (20,)), "conv2": ((50, 20, 5, 5), (50,)),
        "ip1": ((500, 50, 4, 4), (500,)), "ip2": ((10, 500, 1, 1), (10,))}
    img = mnist.load_image(DATA / "one_28x28.pgm")
    assert img.shape == (1, 1, 28, 28) and img.dtype == np.float32 and 0.0 <= img.min() < img.max() <= 1.0


@needs_data
def test_float64_reference_network_reproduces_the_c_sample():
    w = mnist.load_weights(DATA)
    for (fname, cls), (want_cls, want_p) in zip(mnist.IMAGES, ORIGINAL):
        p = lenet64(w, mnist.load_image(DATA / fname))
        assert p.argmax() == cls == want_cls
        assert abs(p.max() - want_p) < 2e-7, (fname, p.max(), want_p)


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
@needs_data
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_port_classifies_and_matches_reference(handle, dtype):
    out = io.StringIO()
    results = mnist.classify(DATA, dtype, handle=handle, out=out)
    print(out.getvalue())
    assert "Result of classification: 1 3 5" in out.getvalue()
    w = mnist.load_weights(DATA)
    for (cls, prob, p), (fname, _), (want_cls, want_p) in zip(results, mnist.IMAGES, ORIGINAL):
        assert cls == want_cls
        if dtype == np.float32:
            np.testing.assert_allclose(p, lenet64(w, mnist.load_image(DATA / fname)), atol=1e-5)
            assert abs(prob - want_p) < 1e-5, (fname, prob, want_p)


@pytest.mark.gpu
@needs_data
def test_example_script_runs():
    r = subprocess.run([sys.executable, str(REPO / "examples" / "mnist_cudnn.py"), str(DATA)], capture_output=True,
                       text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    print(r.stdout, r.stderr)
    assert r.returncode == 0
    assert r.stdout.count("Result of classification: 1 3 5") == 2 and "Test passed!" in r.stdout
