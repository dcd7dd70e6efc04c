"""examples/ctc_alignment.py: CTC costs fall and the greedy decoding reaches the targets (GPU)."""
from __future__ import annotations

import importlib.util
import pathlib

import pytest

PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "ctc_alignment.py"


def _load():
    spec = importlib.util.spec_from_file_location("ctc_alignment", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_greedy_decode_merges_repeats_and_drops_blanks():
    import numpy as np

    ex = _load()
    best = [2, 2, 0, 1, 1, 0, 0, 1, 4, 4]  # b b _ a a _ _ a d d  -> "baad"
    scores = np.eye(len(ex.ALPHABET))[best]
    assert ex.greedy_decode(scores, len(best)) == "baad"
    assert ex.greedy_decode(scores, 3) == "b"


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ["deterministic", "non_deterministic"])
def test_example_learns_the_targets(capsys, algo):
    result = _load().main(["--steps", "100", "--algo", algo])
    assert result["last"] < result["first"] / 20
    assert result["decoded"] == result["targets"]
    assert "decoded 'cafe'" in capsys.readouterr().out
