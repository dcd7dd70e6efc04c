"""mnistCUDNN in Python: NVIDIA's cuDNN sample (LeNet on three MNIST digits) ported to cudnn_py.

The network, as in the C sample: conv 1->20 5x5, max-pool 2/2, conv 20->50 5x5, max-pool 2/2,
fully connected 800->500, ReLU, LRN (n=5, alpha=1e-4, beta=0.75, k=1), fully connected 500->10,
softmax over channels; pixels scaled by 1/255. The fully connected layers run as convolutions whose
filter covers the whole input (no cuBLAS), biases are added with ``add_tensor``.

    python examples/mnist_cudnn.py [DATA_DIR] [--dtype float32|float16]

DATA_DIR holds the sample's files (conv1.bin, conv1.bias.bin, conv2*, ip1*, ip2*: raw little-endian
float32; one_28x28.pgm, three_28x28.pgm, five_28x28.pgm). It defaults to .data/mnistCUDNN in the checkout,
then the folder the libcudnn9-samples package installs.

What changed from the C sample: ``cudnnGetConvolutionForwardAlgorithm`` (removed in cuDNN 8) is
replaced by the heuristic query ``cudnnGetConvolutionForwardAlgorithm_v7`` behind
``convolution_forward(..., algo="heuristic")``; the cuBLAS ``Sgemv`` of the fully connected layers by
convolutions; the float16 run uses float32 accumulation (the sample's "pseudo half" configuration).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("cudnn_py") is None:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))
import cudnn_py as cdp  # noqa: E402
from cudnn_py.cli.prerequisites import require_gpu  # noqa: E402

SAMPLES_DATA = Path("/usr/src/cudnn_samples_v9/mnistCUDNN/data")  # where the libcudnn9-samples package puts it
DATA_CANDIDATES = (REPO / ".data" / "mnistCUDNN", SAMPLES_DATA)
IMAGES = (("one_28x28.pgm", 1), ("three_28x28.pgm", 3), ("five_28x28.pgm", 5))
#: (file stem, weight shape): the fully connected layers' weights are stored (outputs, inputs).
LAYERS = (("conv1", (20, 1, 5, 5)), ("conv2", (50, 20, 5, 5)), ("ip1", (500, 50, 4, 4)), ("ip2", (10, 500, 1, 1)))
MISSING_DATA = (
    "mnistCUDNN data not found (looked in: {where}).\n"
    "It ships with NVIDIA's cuDNN samples: install the libcudnn9-samples package (or the cuDNN samples\n"
    f"archive from developer.nvidia.com/cudnn) and pass its mnistCUDNN/data folder ({SAMPLES_DATA} for the\n"
    "package), or copy that folder to .data/mnistCUDNN in this checkout"
)


def find_data(arg: str | None) -> Path | None:
    """The data folder: ``arg`` if given, else the first default that exists (None when none does)."""
    if arg is not None:
        p = Path(arg)
        return p if (p / "conv1.bin").is_file() else None
    return next((p for p in DATA_CANDIDATES if (p / "conv1.bin").is_file()), None)


def read_pgm(path: Path) -> np.ndarray:
    """An 8-bit binary PGM (P5) image as a (height, width) uint8 array; ``#`` comments allowed."""
    data = Path(path).read_bytes()
    fields, i = [], 0
    while len(fields) < 4:
        while i < len(data) and data[i:i + 1].isspace():
            i += 1
        if data[i:i + 1] == b"#":
            while i < len(data) and data[i:i + 1] not in (b"\n", b"\r"):
                i += 1
            continue
        j = i
        while j < len(data) and not data[j:j + 1].isspace():
            j += 1
        fields.append(data[i:j])
        i = j
    magic, width, height, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    if magic != b"P5" or not 0 < maxval < 256:
        raise ValueError(f"{path}: not an 8-bit binary PGM (magic {magic!r}, maxval {maxval})")
    pixels = data[i + 1:i + 1 + width * height]
    if len(pixels) != width * height:
        raise ValueError(f"{path}: expected {width * height} pixels, found {len(pixels)}")
    return np.frombuffer(pixels, np.uint8).reshape(height, width)


def load_weights(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{layer: (weights as K, C, R, S float32, bias float32)} read from the sample's .bin files."""
    out = {}
    for name, shape in LAYERS:
        w = np.fromfile(folder / f"{name}.bin", dtype="<f4")
        b = np.fromfile(folder / f"{name}.bias.bin", dtype="<f4")
        if w.size != np.prod(shape) or b.size != shape[0]:
            raise ValueError(f"{folder / name}.bin: expected {np.prod(shape)} weights and {shape[0]} biases, "
                             f"found {w.size} and {b.size}")
        out[name] = (w.reshape(shape), b)
    return out


def load_image(path: Path) -> np.ndarray:
    """A PGM digit as the network's input: float32 (1, 1, 28, 28) scaled to [0, 1]."""
    return (read_pgm(path).astype(np.float32) / np.float32(255.0))[None, None]


class LeNet:
    """The sample's network on one handle, with its weights on the device in ``dtype``."""

    def __init__(self, handle: cdp.Handle, weights: dict, dtype=np.float32):
        self.h, self.dtype = handle, np.dtype(dtype)
        self.params = {name: (cdp.to_device(w.astype(self.dtype)),
                              cdp.to_device(b.astype(self.dtype).reshape(1, -1, 1, 1)))
                       for name, (w, b) in weights.items()}
        self.conv = cdp.Convolution()  # no padding, stride 1, cross-correlation; float32 accumulation
        self.pool = cdp.Pooling("max", window=2, stride=2)
        self.lrn = cdp.LRN(n=5, alpha=1e-4, beta=0.75, k=1.0)

    def _layer(self, name: str, x):
        w, b = self.params[name]
        y = cdp.convolution_forward(self.h, self.conv, x, w)
        return cdp.add_tensor(self.h, b, y, beta=1.0)  # y += bias, broadcast over N, H, W

    def forward(self, image: np.ndarray) -> np.ndarray:
        """Class probabilities (10,) for one (1, 1, 28, 28) image."""
        x = cdp.to_device(image.astype(self.dtype))
        x = cdp.pooling_forward(self.h, self.pool, self._layer("conv1", x))
        x = cdp.pooling_forward(self.h, self.pool, self._layer("conv2", x))
        x = cdp.activation_forward(self.h, "relu", self._layer("ip1", x))
        x = cdp.lrn_forward(self.h, self.lrn, x)
        p = cdp.softmax_forward(self.h, self._layer("ip2", x), algo="accurate", mode="channel")
        return p.to_numpy().reshape(-1).astype(np.float64)


def classify(folder: Path, dtype=np.float32, handle=None, out=sys.stdout) -> list[tuple[int, float, np.ndarray]]:
    """Run the three digits; print like the C sample; return [(predicted class, its probability, probabilities)]."""
    own = handle is None
    h = cdp.Handle() if own else handle
    try:
        net = LeNet(h, load_weights(folder), dtype)
        results = []
        for fname, _ in IMAGES:
            print(f"Performing forward propagation ...  ({fname}, {np.dtype(dtype).name})", file=out)
            p = net.forward(load_image(folder / fname))
            print("Resulting weights from Softmax:", file=out)
            print(" ".join(f"{v:.7f}" for v in p), file=out)
            results.append((int(p.argmax()), float(p.max()), p))
        print("Result of classification: " + " ".join(str(r[0]) for r in results), file=out)
        return results
    finally:
        if own:
            h.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", help="folder with the mnistCUDNN data (default: the first of "
                    + ", ".join(str(p) for p in DATA_CANDIDATES) + " that exists)")
    ap.add_argument("--dtype", choices=("float32", "float16", "both"), default="both")
    args = ap.parse_args(argv)
    folder = find_data(args.data)
    if folder is None:
        where = args.data if args.data else ", ".join(str(p) for p in DATA_CANDIDATES)
        print(MISSING_DATA.format(where=where), file=sys.stderr)
        return 2
    require_gpu(ap.prog)
    expected = [cls for _, cls in IMAGES]
    ok = True
    for dt in (("float32", "float16") if args.dtype == "both" else (args.dtype,)):
        print(f"\nTesting {'single' if dt == 'float32' else 'half'} precision ({dt})")
        got = [r[0] for r in classify(folder, np.dtype(dt))]
        ok &= got == expected
    print("\nTest passed!" if ok else "\nTest failed!")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
