"""The public contract, checked over ``cudnn_py.__all__`` by introspection (a new public name is checked without being
listed here): the exception promise (bad input raises a :class:`cudnn_py.CudnnPyError` subclass before anything needs
a device, never a builtin or third-party exception) and the call shape (handle first, configuration second, outputs
keyword-only, annotated, one spelling per concept). Everything here runs without a GPU.

Where a rule cannot hold for an existing function yet, the exemption lists below name it with the reason; an entry
that no longer needs its exemption fails the test, so the lists only shrink.
"""
from __future__ import annotations

import inspect
import math
import re
import typing
import warnings

import numpy as np
import pytest

import cudnn_py
from cudnn_py import capi
from cudnn_py.errors import ClosedError, CudnnPyError, InvalidTypeError
from cudnn_py.core.dtypes import as_numpy_dtype
from cudnn_py.core.handle import Handle
from cudnn_py.graph.ops.sdpa import FP8_BACKWARD_SCALES, FP8_FORWARD_SCALES
from helpers import Reached, StandIn, fake


def _public() -> dict[str, object]:
    return {n: getattr(cudnn_py, n) for n in cudnn_py.__all__
            if callable(getattr(cudnn_py, n)) and not (isinstance(getattr(cudnn_py, n), type)
                                                       and issubclass(getattr(cudnn_py, n), BaseException))}


PUBLIC = _public()

#: (test, name) -> why the rule does not hold yet; each is an xfail(strict=True): one that starts to pass fails the
#: run until its entry goes. Keep this short.
PENDING: dict[tuple[str, str], str] = {}


def _cases(test: str, names) -> list:
    return [pytest.param(n, marks=pytest.mark.xfail(reason=PENDING[test, n], strict=True))
            if (test, n) in PENDING else n for n in names]


FUNCTIONS = {n: f for n, f in PUBLIC.items() if inspect.isfunction(f)}
CLASSES = {n: c for n, c in PUBLIC.items() if isinstance(c, type)}


def _takes_handle(f) -> bool:
    try:
        params = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        return False
    return "handle" in params


HANDLED = {n: f for n, f in FUNCTIONS.items() if _takes_handle(f)}

#: a value for each configuration parameter name the public calls use (a new call reusing a name is covered)
_CONFIGS = {
    "pool": lambda: cudnn_py.Pooling(), "activation": lambda: cudnn_py.Activation(), "lrn": lambda: cudnn_py.LRN(),
    "conv": lambda: cudnn_py.Convolution(), "op": lambda: "add", "rnn": lambda: cudnn_py.RNN("lstm", 4, 4),
    "attn": lambda: cudnn_py.MultiHeadAttention(1, 4, 4, 4, proj_size=4, max_seq_q=2, max_seq_kv=2, max_batch=1),
    "value": lambda: 1.0, "time_steps": lambda: 2, "alphabet_size": lambda: 3, "pseudo_layer": lambda: 0,
    "lin_id": lambda: 0, "out_shape": lambda: (1, 1, 2, 2), "logits_shape": lambda: (2, 1, 3), "arrays": lambda: {},
    "p": lambda: 0.5,
}


def _host(shape=(2, 4, 4, 4)) -> np.ndarray:
    return np.zeros(shape, np.float32)


def _closed_handle() -> Handle:
    """A Handle in the state ``close()`` leaves it (made without a GPU: cudnnCreate never ran)."""
    h = object.__new__(Handle)
    h._ptr, h.device, h.cache = None, 0, {}
    return h


def _open_handle() -> Handle:
    """A Handle whose cuDNN pointer is NULL: enough for the checks that must run before C (C would refuse it)."""
    h = _closed_handle()
    h._ptr = capi.cudnnHandle_t()
    h._stream_ptr = 0
    return h


def _args(f, handle, fill) -> tuple[list, dict]:
    """Positional values for ``f``'s required parameters: ``handle`` for ``handle``, ``fill(name)`` for the rest."""
    args, kwargs = [], {}
    for p in inspect.signature(f).parameters.values():
        if p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        value = handle if p.name == "handle" else fill(p.name)
        if p.kind == p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
    return args, kwargs


def _config_or_host(name: str):
    make = _CONFIGS.get(name)
    return make() if make else _host()


def _raised(f, *args, **kwargs) -> BaseException | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            f(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - what escaped is what is checked
            return e
    return None


def _assert_ours(e: BaseException | None, what: str) -> BaseException:
    assert e is not None, f"{what}: nothing was raised"
    assert isinstance(e, CudnnPyError), f"{what}: raised {type(e).__module__}.{type(e).__name__}: {e}"
    return e


def test_the_enumeration_finds_the_public_api():
    assert len(HANDLED) >= 60 and len(CLASSES) >= 20
    assert {"pooling_forward", "sdpa", "rnn_forward", "convolution_forward"} <= set(HANDLED)


# --- the exception contract ----------------------------------------------------------------------------------

#: everything that takes a handle: the functions, and the classes made with one (Dropout, Sdpa, ...)
WITH_HANDLE = {**HANDLED, **{n: c for n, c in CLASSES.items() if _takes_handle(c)}}


@pytest.mark.parametrize("name", sorted(WITH_HANDLE))
def test_handle_none_is_refused_first(name):
    f = WITH_HANDLE[name]
    args, kwargs = _args(f, None, _config_or_host)
    e = _assert_ours(_raised(f, *args, **kwargs), name)
    assert isinstance(e, TypeError) and "handle" in str(e), f"{name}: {e}"


@pytest.mark.parametrize("name", _cases("closed", sorted(WITH_HANDLE)))
def test_a_closed_handle_is_refused_first(name):
    f = WITH_HANDLE[name]
    args, kwargs = _args(f, _closed_handle(), _config_or_host)
    e = _assert_ours(_raised(f, *args, **kwargs), name)
    assert isinstance(e, ClosedError), f"{name}: {type(e).__name__}: {e}"


#: calls without an array parameter: they take shapes or C descriptors (the numpy case has nothing to pass them)
_NO_ARRAY_PARAMETER = {"dropout_states_size", "sdpa_cache_clear", "ctc_loss_workspace_size",
                       "choose_forward_algorithm", "choose_backward_data_algorithm",
                       "choose_backward_filter_algorithm"}


@pytest.mark.parametrize("name", sorted(set(HANDLED) - _NO_ARRAY_PARAMETER))
def test_host_arrays_are_refused_before_c(name):
    f = HANDLED[name]
    args, kwargs = _args(f, _open_handle(), _config_or_host)
    e = _assert_ours(_raised(f, *args, **kwargs), name)
    assert isinstance(e, TypeError) and ("host memory" in str(e) or "must be" in str(e)), f"{name}: {e}"


def _required_arrays(f) -> list[str]:
    """The parameters of ``f`` without a default whose annotation is an array type that does not admit None."""
    return [p.name for p in inspect.signature(f).parameters.values() if p.default is p.empty
            and "DeviceArrayLike" in str(p.annotation) and "None" not in str(p.annotation)]


_REQUIRED_ARRAYS = [(n, a) for n, f in sorted(HANDLED.items()) if hasattr(f, "__prepared__")
                    for a in _required_arrays(f)]


@pytest.mark.parametrize("name, array", _REQUIRED_ARRAYS)
def test_a_required_array_given_none_is_refused_naming_it(name, array):
    """None for an array parameter its annotation requires is refused before the function runs (the other arguments
    stand-ins it never reads): sdpa_backward(stats=None) raised a builtin TypeError from the graph builder."""
    f = HANDLED[name]
    args, kwargs = _args(f, _open_handle(), lambda n: None if n == array else object())
    e = _assert_ours(_raised(f, *args, **kwargs), name)
    assert isinstance(e, TypeError) and f"{array} is a required array, got None" in str(e), f"{name}: {e}"


def test_the_required_arrays_are_enumerated():
    assert len(_REQUIRED_ARRAYS) >= 80 and ("sdpa_backward", "stats") in _REQUIRED_ARRAYS


def _second(f) -> str | None:
    params = [p for p in inspect.signature(f).parameters.values() if p.name != "handle"]
    return params[0].name if params and params[0].name in _CONFIGS else None


@pytest.mark.parametrize("name", sorted(n for n, f in HANDLED.items() if _second(f)))
def test_a_wrong_type_configuration_is_refused(name):
    f = HANDLED[name]
    config = _second(f)
    args, kwargs = _args(f, _open_handle(), lambda n: object() if n == config else _config_or_host(n))
    e = _assert_ours(_raised(f, *args, **kwargs), name)
    assert isinstance(e, TypeError), f"{name}: {type(e).__name__}: {e}"


def _enum_keywords(f) -> list[str]:
    """Keyword parameters whose default is a choice name (a str): ``mode``, ``algo``, ``layout``, ``engine``, ..."""
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if isinstance(p.default, str) and p.name != "name"]


_ENUM_CASES = sorted((n, k) for n, f in {**HANDLED, **CLASSES}.items() for k in _enum_keywords(f))


@pytest.mark.parametrize("name, keyword", _ENUM_CASES)
def test_a_wrong_enum_is_refused(name, keyword):
    f = PUBLIC[name]
    handle = _open_handle()
    args, kwargs = _args(f, handle, _config_or_host)
    e = _assert_ours(_raised(f, *args, **kwargs, **{keyword: "no_such_choice"}), f"{name}({keyword}=...)")
    assert isinstance(e, (ValueError, TypeError)), f"{name}: {type(e).__name__}: {e}"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_configuration_classes_refuse_junk_with_our_errors(name):
    """Every keyword of a public class's constructor, given an object of no meaning, raises our error (or is
    accepted: an ``owner=`` or a ``name`` takes anything)."""
    cls = CLASSES[name]
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("owner", "name", "handle"):
            continue
        args, kwargs = _args(cls, _open_handle(), lambda n: _CONFIGS.get(n, lambda: 1)())
        if p.default is p.empty:
            i = [q.name for q in params if q.default is q.empty and q.kind != q.KEYWORD_ONLY].index(p.name) \
                if p.kind != p.KEYWORD_ONLY else None
            if i is None:
                kwargs[p.name] = object()
            else:
                args[i] = object()
        else:
            kwargs[p.name] = object()
        e = _raised(cls, *args, **kwargs)
        if e is not None:
            _assert_ours(e, f"{name}({p.name}=object())")


@pytest.mark.parametrize("name", _cases("methods", sorted(CLASSES)))
def test_public_methods_taking_a_handle_refuse_none_and_closed_handles(name):
    cls = CLASSES[name]
    for method, f in inspect.getmembers(cls, inspect.isfunction):
        if method.startswith("_") or not _takes_handle(f):
            continue
        instance = _SAMPLES[name]()
        bound = getattr(instance, method)
        args, kwargs = _args(bound, None, _config_or_host)
        e = _assert_ours(_raised(bound, *args, **kwargs), f"{name}.{method}")
        assert "handle" in str(e), f"{name}.{method}: {e}"
        args, kwargs = _args(bound, _closed_handle(), _config_or_host)
        e = _assert_ours(_raised(bound, *args, **kwargs), f"{name}.{method} (closed handle)")
        assert isinstance(e, ClosedError), f"{name}.{method}: {type(e).__name__}: {e}"


_SAMPLES = {
    "Graph": lambda: cudnn_py.Graph(),
    "MultiHeadAttention": _CONFIGS["attn"],
    "RNN": _CONFIGS["rnn"],
}


def test_backend_descriptor_set_refuses_junk_attribute_types():
    d = cudnn_py.BackendDescriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")  # creating one needs cuDNN, not a GPU
    for junk in (b"", "no_such_type", object(), 1.5, -1):
        e = _raised(cudnn_py.BackendDescriptor.set, d, "CUDNN_ATTR_TENSOR_DIMENSIONS", [1], attr_type=junk)
        _assert_ours(e, f"BackendDescriptor.set(attr_type={junk!r})")


#: what a wrong argument may be: None, objects of no meaning, wrong types, out-of-range numbers, junk sequences
_JUNK = (None, object(), "junk", "", -1, 0, 1.5, math.nan, math.inf, 2 ** 100, -2 ** 100, True, b"x", 1j, int, print,
         [object()], (object(),), ("a", 1), (-1, 2), (2 ** 70,), {}, {1: object()}, np.zeros((2, 2), np.int8),
         np.float64(1.5))


def _parameters(f) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_wrong_arguments_raise_only_our_errors(name, tmp_path, monkeypatch):
    """Every public function and constructor, each parameter in turn given each value of :data:`_JUNK` (the others
    a host array or a configuration, then 1 or a configuration; the handle an open one): whatever is raised is a
    :class:`CudnnPyError` (one that needs a GPU raises NoDeviceError, one), never a builtin exception."""
    monkeypatch.chdir(tmp_path)  # a path parameter given "junk" writes nothing in the checkout
    f = PUBLIC[name]
    params = _parameters(f)
    positional = [p.name for p in params if p.default is p.empty and p.kind != p.KEYWORD_ONLY]
    escapes = []
    for p in params:
        for fill in (_config_or_host, lambda n: _CONFIGS.get(n, lambda: 1)()):
            for junk in _JUNK:
                args, kwargs = _args(f, _open_handle(), fill)
                if p.name in positional:
                    args[positional.index(p.name)] = junk
                else:
                    kwargs[p.name] = junk
                e = _raised(f, *args, **kwargs)
                if e is not None and not isinstance(e, CudnnPyError):
                    escapes.append(f"{p.name}={junk!r:.40}: {type(e).__module__}.{type(e).__name__}: {e}")
    if not params:
        e = _raised(f)
        if e is not None and not isinstance(e, CudnnPyError):
            escapes.append(f"(): {type(e).__module__}.{type(e).__name__}: {e}")
    assert not escapes, f"{name}: {len(escapes)} builtin exceptions, the first: " + "\n".join(escapes[:5])


#: the arguments where a (2, 4, 8, 8) float32 stand-in array or a default configuration is not a valid call (stand-in
#: arrays are never read: the handle raises Reached once validation has passed)
_VALID = {
    "convolution_forward": {"w": ((4, 4, 3, 3),)}, "convolution_backward_data": {"w": ((4, 4, 3, 3),)},
    "convolution_backward_filter": {"w_shape": (4, 4, 3, 3), "dy": ((2, 4, 6, 6),)},
    "convolution_bias_activation_forward": {"w": ((4, 4, 3, 3),), "bias": ((1, 4, 1, 1),)},
    "ctc_loss": {"logits": ((5, 2, 4),), "labels": [1, 2, 1], "label_lengths": [2, 1], "input_lengths": [5, 5]},
    "op_tensor": {"b": ((2, 4, 8, 8),)}, "pooling_backward": {"y": ((2, 4, 4, 4),), "dy": ((2, 4, 4, 4),)},
    "spatial_tf_grid_forward": {"theta": ((2, 2, 3),), "out_shape": (2, 4, 8, 8)},
    "spatial_tf_grid_backward": {"dgrid": ((2, 8, 8, 2),)},
    "spatial_tf_sampler_forward": {"grid": ((2, 8, 8, 2),)}, "spatial_tf_sampler_backward": {"grid": ((2, 8, 8, 2),)},
    **{n: {"q": ((1, 2, 64, 64), "bfloat16"), "k": ((1, 2, 64, 64), "bfloat16"), "v": ((1, 2, 64, 64), "bfloat16"),
           "o": ((1, 2, 64, 64), "bfloat16"), "do": ((1, 2, 64, 64), "bfloat16"), "stats": ((1, 2, 64, 1),)}
       for n in ("sdpa", "sdpa_backward")},
    **{n: {"q": ((1, 2, 64, 128), "float8_e4m3fn"), "k": ((1, 2, 64, 128), "float8_e4m3fn"),
           "v": ((1, 2, 64, 128), "float8_e4m3fn"), "o": ((1, 2, 64, 128), "float8_e4m3fn"),
           "do": ((1, 2, 64, 128), "float8_e4m3fn"), "stats": ((1, 2, 64, 1),),
           **{s: 1.0 for s in (*FP8_FORWARD_SCALES, *FP8_BACKWARD_SCALES)}} for n in ("sdpa_fp8", "sdpa_fp8_backward")},
    **{n: {p: ((1, 4, 1, 1),) for p in ("scale", "bias", "mean", "var", "saved_mean", "saved_inv_var")}
       for n in HANDLED if "norm" in n},
}
#: functions whose valid stand-in call cannot pass validation on this machine (a Dropout needs a GPU; cuDNN builds
#: graphs and transform descriptors only with a driver; the RNN and attention calls need their descriptors' arrays
#: and a training forward's result): junk is then refused before or at that point
_NOT_REACHED = {"dropout_forward", "dropout_backward", "sdpa", "sdpa_backward", "transform_tensor_ex",
                "rnn_forward", "rnn_backward_data", "rnn_backward_weights", "attention_forward",
                "attention_backward_data", "attention_backward_weights"}


def _valid_argument(name: str, param: str, arrays: frozenset):
    value = _VALID.get(name, {}).get(param)
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):  # (shape, [dtype]): a stand-in array
        return fake(value[0], as_numpy_dtype(value[1]) if len(value) > 1 else np.float32)
    if value is not None:
        return value
    return fake((2, 4, 8, 8)) if param in arrays else _CONFIGS.get(param, lambda: 1.0)()


def _array_parameters(f) -> frozenset:
    spec = getattr(f, "__prepared__", None)
    return spec.arrays if spec else frozenset(p.name for p in _parameters(f) if "DeviceArrayLike" in str(p.annotation))


@pytest.mark.parametrize("name", sorted(HANDLED))
def test_junk_in_one_argument_of_a_valid_call_raises_only_our_errors(name):
    """Each function taking a handle on a valid call of stand-in arrays (the handle raises Reached once validation
    passes), each parameter in turn given each value of :data:`_JUNK` and arrays of another shape and dtype: whatever is
    raised is ours. (:func:`test_wrong_arguments_raise_only_our_errors` fills the others with host arrays, which are
    refused first: epsilon='x', algo=[1], x_shape=3, engine=<array> and conv=None escaped as builtin errors behind
    them.)"""
    f, arrays = HANDLED[name], _array_parameters(HANDLED[name])
    params = _parameters(f)[1:]

    def call(param=None, junk=None):
        args, kwargs = _args(f, StandIn(), lambda n: _valid_argument(name, n, arrays))
        optional = {p.name for p in params if p.default is not p.empty}
        kwargs.update((n, _valid_argument(name, n, arrays)) for n in _VALID.get(name, {}) if n in optional)
        if param is not None:
            positional = [p.name for p in params if p.default is p.empty and p.kind != p.KEYWORD_ONLY]
            if param in positional:
                args[positional.index(param) + 1] = junk
            else:
                kwargs[param] = junk
        return _raised(f, *args, **kwargs)
    assert isinstance(call(), (Reached, type(None))) or name in _NOT_REACHED, f"{name}: the valid call failed: {call()}"
    escapes = [f"{p.name}={junk!r:.40}: {type(e).__name__}: {e}" for p in params
               for junk in (*_JUNK, fake((3, 5), np.float16), fake((2, 4, 8, 8), np.int8))
               if not isinstance(e := call(p.name, junk), (CudnnPyError, Reached, type(None)))]
    assert not escapes, f"{name}: {len(escapes)} builtin exceptions, the first: " + "\n".join(escapes[:5])


@pytest.mark.parametrize("name, instead", [("DeviceArrayLike", "to_device()"), ("StreamLike", "new_stream()")])
def test_the_typing_aliases_say_they_cannot_be_called(name, instead):
    """``cudnn_py.DeviceArrayLike()`` raised typing's "Cannot instantiate typing.Union"; the aliases still work as
    typing Unions (annotations, ``|``, ``Optional``, TypeVar bounds)."""
    alias = getattr(cudnn_py, name)
    with pytest.raises(InvalidTypeError, match=f"{name} is a type alias for annotations and cannot be called; "
                                               f".*{re.escape(instead)}"):
        alias()
    assert alias == typing.Union[alias.__args__] and typing.Optional[alias] == (alias | None)
    assert typing.get_args(alias | bytes)[-1] is bytes and typing.TypeVar("T", bound=alias).__bound__ is alias


# --- typing: every public callable is annotated ----------------------------------------------------------------

#: public callables whose annotations are not complete yet, with what is missing and why (each an xfail(strict=True))
UNANNOTATED = {
    "BackendDescriptor": "desc_type (graph/descriptors.py: the attribute/descriptor-type conventions are helper-owned)",
    "AlgorithmCache": "database (algorithms.py, another owner's file)",
}


def _unannotated(f) -> list[str]:
    """The parameters (and ``return``) of ``f`` without an annotation (mypy checks that they resolve)."""
    target = f.__init__ if isinstance(f, type) else f
    hints = getattr(target, "__annotations__", {})
    sig = inspect.signature(target)
    missing = [p for p, v in sig.parameters.items() if p not in hints and p not in ("self", "cls")
               and v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL)]
    if "return" not in hints and not isinstance(f, type):  # mypy takes an annotated __init__ as returning None
        missing.append("return")
    return missing


_ANNOTATED = sorted(n for n, f in PUBLIC.items() if inspect.isfunction(f) or isinstance(f, type))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=UNANNOTATED[n], strict=True))
                                  if n in UNANNOTATED else n for n in _ANNOTATED])
def test_every_public_callable_is_annotated(name):
    """Parameters (``handle`` too) and the return: what a user's type checker sees is never an implicit ``Any``."""
    assert _unannotated(PUBLIC[name]) == [], name


# --- one call shape -------------------------------------------------------------------------------------------

def _params(f) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        return {}


@pytest.mark.parametrize("name", sorted(n for n, f in PUBLIC.items() if "handle" in _params(f)))
def test_the_handle_comes_first(name):
    assert list(_params(PUBLIC[name]))[0] == "handle", name


#: the configuration classes: a call that takes one takes it second, right after the handle
CONFIG_CLASSES = ("Pooling", "Activation", "LRN", "Convolution", "RNN", "MultiHeadAttention", "Dropout", "OpTensor",
                  "ReduceTensor")


@pytest.mark.parametrize("name", sorted(HANDLED))
def test_the_configuration_comes_second(name):
    required = [(i, p) for i, p in enumerate(_params(HANDLED[name]).values())
                if p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
    for i, p in required:
        if any(c in str(p.annotation).replace("|", " ").split() for c in CONFIG_CLASSES):
            assert i == 1, f"{name}: the configuration {p.name} is parameter {i}"


#: output arrays (written by the call); positional use of them is deprecated
OUTPUT_NAMES = {"y", "dx", "dw", "db", "c", "o", "dq", "dk", "dv", "dweights", "dtheta", "grid", "dgrid", "dmeans",
                "dscale", "dbias", "dz", "dhx", "dcx", "hy", "cy", "costs", "gradients"}
#: calls where a parameter of such a name is an input, not an output
OUTPUT_EXEMPT = {
    ("convolution_algorithms", "y"): "y is the forward output's role given as an input (its shape picks the records)",
    ("convolution_workspace_size", "y"): "y is the forward output's role given as an input (its shape)",
}


@pytest.mark.parametrize("name", sorted(HANDLED))
def test_outputs_are_keyword_only(name):
    for p in _params(HANDLED[name]).values():
        if p.name in OUTPUT_NAMES and p.default is None and (name, p.name) not in OUTPUT_EXEMPT:
            assert p.kind == p.KEYWORD_ONLY, f"{name}: output {p.name} is {p.kind.description}"


def test_positional_outputs_still_work_with_a_warning():
    from helpers import NoCallHandle, fake
    with pytest.warns(DeprecationWarning, match=r"pooling_forward\(\): passing outputs positionally is deprecated; "
                                                r"pass y= as keywords"), pytest.raises(ValueError, match="y has shape"):
        cudnn_py.pooling_forward(NoCallHandle(), cudnn_py.Pooling(), fake((1, 1, 4, 4)), fake((1, 1, 3, 3)))
    with pytest.raises(TypeError, match="got y both positionally and as y="):
        cudnn_py.pooling_forward(NoCallHandle(), cudnn_py.Pooling(), fake((1, 1, 4, 4)), fake((1, 1, 2, 2)),
                                 y=fake((1, 1, 2, 2)))


def test_return_types_follow_from_the_signature():
    """A call whose result is an array or a named tuple by a flag has typed overloads (mypy sees which)."""
    for name, f in FUNCTIONS.items():
        ret = str(inspect.signature(f).return_annotation)
        kinds = {"array": re.search(r"\bDeviceArray\b|\bOut\b", ret) is not None,
                 "tuple": re.search(r"\w+(Result|Outputs|Grads)\b", ret) is not None}
        if all(kinds.values()):
            assert typing.get_overloads(f), f"{name} returns {ret} without overloads"


#: families that have a graph path take engine="legacy"|"graph"|"auto" ("auto" by default) on each data call; these
#: calls of such families do not yet, each with its reason
ENGINE_EXEMPT = {
    "batchnorm_ex_sizes": "a size query", "normalization_sizes": "a size query",
    "convolution_algorithms": "an algorithm query of the legacy engine",
    "convolution_workspace_size": "a workspace query of the legacy engine",
    "convolution_backward_bias": "no graph path yet", "set_tensor": "no graph path yet",
    "transform_tensor_ex": "no graph path yet",
}


def test_engine_is_one_option_with_auto_the_default():
    families: dict[str, list[str]] = {}
    for name, f in HANDLED.items():
        families.setdefault(f.__module__, []).append(name)
        engine = _params(f).get("engine")
        if engine is not None:
            assert engine.default == "auto", f"{name}: engine defaults to {engine.default!r}"
    for module, names in families.items():
        if any("engine" in _params(HANDLED[n]) for n in names):
            lacking = {n for n in names if "engine" not in _params(HANDLED[n])}
            assert lacking <= set(ENGINE_EXEMPT), f"{module}: {sorted(lacking - set(ENGINE_EXEMPT))} take no engine="
    assert all(n in HANDLED and "engine" not in _params(HANDLED[n]) for n in ENGINE_EXEMPT)


MEMORY_FORMATS = {None, "NCHW", "NHWC", "NCHW_VECT_C", "NCDHW", "NDHWC"}


def test_one_name_per_concept():
    """Per-batch lengths are seq_lengths (RNNs) or seq_len_q / seq_len_kv (attention); "measure and keep the
    fastest" is autotune=; layout= names a memory format everywhere."""
    for name, f in PUBLIC.items():
        for p in _params(f).values():
            if p.name.startswith("seq_len"):
                assert p.name in ("seq_lengths", "seq_len_q", "seq_len_kv"), f"{name}: {p.name}"
            assert p.name not in ("benchmark", "measure", "find", "tune", "fastest"), f"{name}: {p.name}"
            if p.name == "layout":
                assert p.default in MEMORY_FORMATS, f"{name}: layout={p.default!r} is not a memory format"
