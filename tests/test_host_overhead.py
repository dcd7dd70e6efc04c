"""benchmarks/host_overhead.py on CPU: ``--summary`` of a tree's runs (the medians and the bars counted) and what its
torch floor reads of each tensor."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "host_overhead.py"


@pytest.fixture(scope="module")
def ho():
    spec = importlib.util.spec_from_file_location("host_overhead", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path, name, relu_dev, relu_torch, scale, speeds=(50.0, 51.0)):
    """A run's JSON: relu with every column (DeviceArrays given / new at ``relu_dev``, torch tensors at
    ``relu_torch``); set_tensor and scale_tensor (bare C, DeviceArrays at ``scale``) given only and without torch."""
    (dg, dn), (tg, tn) = relu_dev, relu_torch
    rows = [{"op": "activation_forward relu", "route": "legacy", "bare": 5.0, "dev given": dg, "dev new": dn,
             "torch given": tg, "torch new": tn, "floor given": 6.0, "floor new": 9.0, "torch op": 7.0},
            {"op": "set_tensor", "route": "legacy", "bare": 4.0, "dev given": 7.5},
            {"op": "scale_tensor", "route": "legacy", "bare": scale[0], "dev given": scale[1]}]
    path = tmp_path / name
    path.write_text(json.dumps({"shape": [1, 8, 8, 8], "loop_ns": list(speeds), "rows": rows}))
    return str(path)


def test_summary_takes_each_cells_median_and_each_runs_own_differences(ho, tmp_path, capsys):
    """Each column is its median over the runs; each added time and ratio the median of each run's own: scale_tensor
    adds 2.5, 2.5 and 3.6 us in its runs (2.5: within the bar), though its columns' medians are 3.6 apart."""
    runs = [_run(tmp_path, "a.json", (6.0, 7.0), (6.8, 9.6), (4.0, 6.5)),
            _run(tmp_path, "b.json", (6.2, 7.4), (7.0, 10.0), (8.0, 10.5), speeds=(60.0, 55.0)),
            _run(tmp_path, "c.json", (30.0, 30.0), (40.0, 40.0), (6.0, 9.6))]  # relu stalled: the medians leave it out
    ho.main(["--summary", *runs])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ho.HEADER
    # relu: DeviceArrays 6.2 / 7.4 over 5.0 bare; torch 7.0 / 10.0 over its floor 6.0 / 9.0
    assert out[1].split() == ["activation_forward", "relu", "legacy", "5.0", "6.2", "7.4", "7.0", "10.0", "7.0",
                              "1.2/2.4", "6.0/9.0", "1.0/1.0"]
    assert out[2].split() == ["set_tensor", "legacy", "4.0", "7.5", "-", "-", "-", "-", "3.5/-", "-", "-"]
    assert out[3].split() == ["scale_tensor", "legacy", "6.0", "9.6", "-", "-", "-", "-", "2.5/-", "-", "-"]
    assert out[4] == "3 run(s), loop speed before/after (ns): 50.0/51.0 60.0/55.0 50.0/51.0"
    # given: relu and scale_tensor within 3 us, set_tensor 3.5 over it; torch over DeviceArrays by 1.133x, 1.129x and
    # 1.333x in the runs (median 1.133), its floor 1.0x, 0.968x and 0.2x (0.968)
    assert out[5] == ("given: DeviceArrays within 3 us of the bare C call in 2 of 3 rows; torch tensors within 1.1x of "
                      "DeviceArrays in 0 of 1, torch's floor over 1.1x in 0; torch tensors add above their floor at "
                      "most what DeviceArrays add above the bare C call in 1 of 1")
    # new: 2.4 within 5 us; torch 1.371x, 1.351x, 1.333x (1.351), the floor 1.286x, 1.216x, 0.3x (1.216): over too
    assert out[6] == ("new: DeviceArrays within 5 us of the bare C call in 1 of 1 rows; torch tensors within 1.1x of "
                      "DeviceArrays in 0 of 1, torch's floor over 1.1x in 1; torch tensors add above their floor at "
                      "most what DeviceArrays add above the bare C call in 1 of 1")
    assert len(out) == 7


def test_summary_needs_no_gpu_and_refuses_a_missing_file(tmp_path):
    import subprocess
    r = subprocess.run([sys.executable, str(BENCH), "--summary", str(tmp_path / "none.json")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "none.json" in r.stderr and "Traceback" not in r.stderr, r.stderr


class Tensor:
    """A torch tensor's signature reads, counted."""

    def __init__(self, contiguous: bool):
        self.contiguous, self.read = contiguous, []
        self.shape, self.dtype = (1, 8), "float16"

    def is_contiguous(self):
        self.read.append("is_contiguous")
        return self.contiguous

    def stride(self):
        self.read.append("stride")
        return (8, 1)

    def get_device(self):
        self.read.append("get_device")
        return 0

    def data_ptr(self):
        self.read.append("data_ptr")
        return 1 << 20


def test_the_torch_floor_reads_each_tensor_as_the_guard_does(ho):
    """A contiguous tensor's layout by ``is_contiguous()``, another's by its strides (as the prepared call's guard)."""
    bare = []
    a, b = Tensor(True), Tensor(False)
    floor = ho.torch_floor(lambda: bare.append(1), [a, b], [])
    a.read.clear(), b.read.clear()
    floor()
    assert a.read == ["is_contiguous", "get_device", "data_ptr"] and b.read == ["stride", "get_device", "data_ptr"]
    assert bare == [1]
