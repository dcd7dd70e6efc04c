"""A newcomer's frictions with the command line and the first calls, each checked as the user
meets it (the usage and suggestion an argument mistake prints, help as plain text, ``info`` without cuDNN, the one
line a plain ``pip install .`` gets from ``Handle()``, a Convolution given to ``convolution_output_shape``)."""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import numpy as np
import pytest

import cudnn_py
from cudnn_py import cli
from cudnn_py.cli import info
from cudnn_py.errors import InvalidTypeError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _console_script(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/usr/bin/cudnn-py"])  # the program named cudnn-py in usage lines


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        status = cli.main(list(argv))
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1  # a message (SystemExit("algos: ...")) exits 1
        message = "" if isinstance(e.code, int) or e.code is None else f"{e.code}\n"
    else:
        message = ""
    out, err = capsys.readouterr()
    return status, out, err + message


def test_a_mistyped_option_gets_the_commands_usage_and_the_option_meant():
    """``algos --modle resnet50`` printed the top-level usage and 'unrecognized arguments', no suggestion."""
    r = subprocess.run([sys.executable, "-m", "cudnn_py", "algos", "--modle", "resnet50"], cwd=ROOT, text=True,
                       capture_output=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.startswith("usage: python -m cudnn_py algos [--preset NAME"), r.stderr
    assert r.stderr.rstrip().endswith("error: unrecognized arguments: --modle resnet50; did you mean --model?")


def _commands():
    parser = cli.Parser(prog="cudnn-py")
    sub = parser.add_subparsers(dest="command")
    for names in cli.COMMANDS.values():
        first, *others = (importlib.import_module(f"cudnn_py.cli.{m}") for m in names)
        p = first.add_parser(sub)
        for module in others:
            module.add_arguments(p)
    return sub.choices


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_option_of_every_command_mistyped_is_suggested(command, capsys):
    """Two letters swapped (the last two: ``--modle``) or one doubled: the suggestion is the option meant, with the
    command's usage, without a value typed after it (plural and singular pairs such as --mode/--modes included)."""
    options = [o for o in _commands()[command]._option_string_actions if o.startswith("--") and o != "--help"]
    assert options
    wrong = []
    for option in options:
        for typo in (option[:-2] + option[-1] + option[-2], option[:4] + option[3] + option[4:]):
            if typo == option:
                continue
            status, _, err = _main(capsys, command, typo)
            if status != 2 or not err.startswith(f"usage: cudnn-py {command}") or \
                    not err.rstrip().endswith(f"did you mean {option}?"):
                wrong.append((typo, err.strip().splitlines()[-1]))
    assert wrong == []


def test_several_mistyped_options_each_get_theirs(capsys):
    status, _, err = _main(capsys, "algos", "--presett", "resnet50-conv1", "--bacth", "3")
    assert status == 2 and err.rstrip().endswith("did you mean --preset for --presett or --batch for --bacth?")
    status, _, err = _main(capsys, "algos", "--modle=resnet50")
    assert status == 2 and err.rstrip().endswith("did you mean --model?")
    status, _, err = _main(capsys, "algos", "--nothing-like-it")
    assert status == 2 and err.rstrip().endswith("unrecognized arguments: --nothing-like-it")


def test_no_command_prints_what_there_is_to_run_and_a_top_level_typo_is_suggested(capsys):
    status, out, _ = _main(capsys)
    assert status == 2 and "info " in out and "algos " in out and "--version" in out  # was: 'required: COMMAND'
    status, _, err = _main(capsys, "--verison")
    assert status == 2 and err.rstrip().endswith("unrecognized arguments: --verison; did you mean --version?")


@pytest.mark.parametrize("option, value", [("--device", "-1"), ("--seed", "-1"), ("--workspace-limit", "-5"),
                                           ("--seed", "x")])
def test_algos_refuses_a_negative_device_seed_or_limit_before_any_work(option, value, capsys):
    """--device -1 was reported as 'cannot use CUDA device -1: no NVIDIA driver' here and, with a GPU, refused by
    Handle only after the float64 references; --seed -1 was NumPy's ValueError traceback."""
    status, _, err = _main(capsys, "algos", "--preset", "resnet50-conv1", option, value)
    assert status == 2 and f"error: argument {option}: {value!r}: " in err, err


@pytest.mark.parametrize("argv, meant", [(["algo"], "'algos'"), (["algos", "--model", "resnet5"], "'resnet50'"),
                                         (["algos", "--preset", "resnet50-conv9"], "'resnet50-conv1'")])
def test_an_invalid_choice_suggests_the_closest(argv, meant, capsys):
    status, _, err = _main(capsys, *argv)
    assert status == 2 and "invalid choice" in err and f"; did you mean {meant}" in err, err


@pytest.mark.parametrize("argv", [["--help"], ["info", "--help"], ["algos", "--help"]])
def test_help_reads_as_plain_text(argv, capsys):
    """``algos --help`` and ``info --help`` showed the module docstrings' ````markup```` and ``:func:`` roles."""
    status, out, _ = _main(capsys, *argv)
    assert status == 0 and out.startswith("usage: cudnn-py")
    assert not re.search(r"``|:\w+:`", out), [line for line in out.splitlines() if "`" in line]


def test_plain_strips_restructuredtext():
    assert cli.plain("``python -m cudnn_py algos``: see :func:`collect` and :mod:`~cudnn_py.cli.algos_graph`, "
                     ":doc:`the guide <docs/tuning>`") == \
        "python -m cudnn_py algos: see collect and algos_graph, the guide"


def _info(cudnn: bool, bindings: bool = True) -> str:
    found = {"version": "9.19.0", "headers": "9.19.0", "path": "/lib/libcudnn.so.9", "found_via": "test",
             "cuda_runtime": "13.0", "max_sm": 120, "sublibraries": {"graph": "ok"}}
    return info.format_text({
        "python": "3", "cudnn": found if cudnn else None,
        "cudnn_error": "cuDNN (libcudnn.so.9) was not found. Tried:\n  - system loader: no\ninstall it",
        "packages": {"cuda-bindings": "13.0.0"} if bindings else {},
        "driver": {"cuda_version": None, "gpus": [], "why_none": "no driver"}, "warnings": []})


def test_info_without_cudnn_does_not_say_it_loads_cudnn():
    """'cuDNN not found' was followed by 'Without a GPU cudnn_py still loads cuDNN'."""
    text = _info(cudnn=False)
    assert "cuDNN         not found\n              cuDNN (libcudnn.so.9) was not found. Tried:\n" \
           "                - system loader: no\n              install it\n" in text
    assert "loads cuDNN" not in text and "Once cuDNN is found, cudnn_py without a GPU creates" in text
    assert "Without a GPU cudnn_py still loads cuDNN, creates" in _info(cudnn=True)


def test_info_without_cuda_bindings_does_not_say_there_is_no_driver():
    assert "driver        not asked (needs cuda-bindings)\n" in _info(cudnn=True, bindings=False)
    assert "driver        none\n" in _info(cudnn=True)


def test_no_cuda_package_is_named_with_its_install_command_in_one_line():
    """A plain ``pip install .`` (no cu12/cu13 extra: no cuda-bindings): Handle() said 'import cuda.core: cannot
    import name 'bindings' from 'cuda' (unknown location); install ...'; the algos prerequisite said 'cuda-bindings is
    not installed (No module named 'cuda.bindings')' without the install command."""
    code = textwrap.dedent("""
        import sys
        sys.modules[sys.argv[1]] = None   # as where it is not installed
        import cudnn_py
        from cudnn_py.cli import info
        from cudnn_py.core.streams import missing_device
        print(missing_device())
        print(info.driver_and_gpus()["why_none"])
        cudnn_py.Handle()
    """)
    hint = "install cudnn-py with the extra for your driver: `pip install "
    for module, package in (("cuda.bindings", "cuda-bindings"), ("cuda.core", "cuda-core")):
        r = subprocess.run([sys.executable, "-c", code, module], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        said = f"{package} is not installed; {hint}"
        if package == "cuda-bindings":  # what asks the driver (cuda.core is imported by the first device call only)
            refused, why_none = r.stdout.splitlines()
            assert refused.startswith(f"cannot use CUDA device 0: {said}") and why_none.startswith(said), r.stdout
            assert "[cu12]" in refused and "[cu13]" in refused
        assert r.returncode == 1
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith(f"cudnn_py.errors.NoDeviceError: cannot use a GPU: {said}"), r.stderr
        assert "During handling" not in r.stderr and "direct cause" not in r.stderr


def test_convolution_output_shape_given_a_convolution_points_to_its_method():
    """``convolution_output_shape(x, w, Convolution(...))`` printed the arrays in a generic 'x_shape must contain
    only ints' (22 lines); pooling_output_shape given a Pooling already pointed to Pooling.output_shape."""
    x, w, conv = np.zeros((1, 3, 8, 8), np.float32), np.zeros((4, 3, 3, 3), np.float32), cudnn_py.Convolution(1)
    for args in ((x, w, conv), ((1, 3, 8, 8), [4, 3, 3, 3], conv), (conv, x, w)):
        with pytest.raises(InvalidTypeError, match=r"not a Convolution: use Convolution.output_shape, here "
                                                   r"Convolution\(.*\)\.output_shape\(\(1, 3, 8, 8\), "
                                                   r"(\(4, 3, 3, 3\)|\[4, 3, 3, 3\])\)") as e:
            cudnn_py.convolution_output_shape(*args)
        assert len("".join(traceback.format_exception(e.value)).splitlines()) <= 6
    assert conv.output_shape(x.shape, w.shape) == cudnn_py.convolution_output_shape(x.shape, w.shape, 1) == (1, 4, 8, 8)
