"""Activations, forward and backward: sigmoid, ReLU, tanh, clipped ReLU, ELU, swish, identity.

::

    y = activation_forward(h, "relu", x)                                  # y allocated
    y = activation_forward(h, Activation("clipped_relu", coef=6.0), x)
    dx = activation_backward(h, Activation("swish", swish_beta=1.5), x, y, dy)

Identity runs as ``cudnnTransformTensor`` (cuDNN's activation calls refuse it). Arrays of any rank 1 to 8 and any
strides (x and y may differ) are accepted. ``engine``: "legacy" (``cudnnActivationForward/Backward``), "graph" (one
pointwise operation: float16, bfloat16, float32, 1 to 5 dimensions, no NaN propagation) or "auto" (the default: the
faster, measured once per configuration; docs/graph_paths.md).
"""
from __future__ import annotations

from ctypes import byref, c_double, c_int

from cudnn_py.core import caches
from cudnn_py import capi
from cudnn_py._deprecation import alias
from cudnn_py.core.args import enum_member, float_arg, nan_flag
from cudnn_py.core.descriptors import Descriptor, Settings, c_nan, read_back, setting
from cudnn_py.graph import legacy as gl
from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import DeviceArray, DeviceArrayLike
from cudnn_py.ops._common import Out, blend, check_array, output
from cudnn_py.calls.prepared import prepared
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["Activation", "activation_forward", "activation_backward", "ACTIVATION_MODES"]

#: the mode names :class:`Activation` takes (any case; also a ``cudnnActivationMode_t`` member, its value or full name)
ACTIVATION_MODES = {
    "sigmoid": capi.CUDNN_ACTIVATION_SIGMOID, "relu": capi.CUDNN_ACTIVATION_RELU, "tanh": capi.CUDNN_ACTIVATION_TANH,
    "clipped_relu": capi.CUDNN_ACTIVATION_CLIPPED_RELU, "elu": capi.CUDNN_ACTIVATION_ELU,
    "identity": capi.CUDNN_ACTIVATION_IDENTITY, "swish": capi.CUDNN_ACTIVATION_SWISH,
}


class _ActivationDescriptor(Descriptor):
    """A ``cudnnActivationDescriptor_t`` of the settings :class:`cudnn_py.Activation` validated."""

    _handle_type = capi.cudnnActivationDescriptor_t
    _create_fn, _destroy_fn = "cudnnCreateActivationDescriptor", "cudnnDestroyActivationDescriptor"
    _shown = ("mode", "coef", "nan_propagation")
    _cache_name = "descriptors.activation"

    def __init__(self, mode: capi.cudnnActivationMode_t, nan_propagation: bool, coef: float, swish_beta: float):
        super().__init__()
        capi.cudnnSetActivationDescriptor(self._ptr, mode, c_nan(nan_propagation), coef)
        capi.cudnnSetActivationDescriptorSwishBeta(self._ptr, swish_beta)

    def _get(self):
        mode, nan, coef = c_int(), c_int(), c_double()
        capi.cudnnGetActivationDescriptor(self.ptr, byref(mode), byref(nan), byref(coef))
        return capi.cudnnActivationMode_t(mode.value), capi.cudnnNanPropagation_t(nan.value), coef.value

    mode = read_back(0, "The ``cudnnActivationMode_t``.")
    nan_propagation = read_back(1, "The ``cudnnNanPropagation_t``.")
    coef = read_back(2, "The clipping threshold (clipped_relu) or alpha (elu).")


class Activation(Settings):
    """Activation settings: validated once, hashable, with one shared ``cudnnActivationDescriptor_t``.

    ``mode``: a key of :data:`ACTIVATION_MODES` (any case) or a ``cudnnActivationMode_t``. ``coef``: clipped ReLU's
    ceiling (must be > 0 for it) or ELU's alpha. ``swish_beta``: swish's beta (``x * sigmoid(swish_beta * x)``).
    ``nan_propagation``: whether ReLU passes NaN through (default False). The settings read back as properties.
    """

    __slots__ = ("_mode", "_coef", "_swish_beta", "_nan", "_desc")
    _c_class = _ActivationDescriptor

    def __init__(self, mode: str | int = "relu", coef: float = 0.0, swish_beta: float = 1.0, *,
                 nan_propagation: bool = False) -> None:
        self._mode = enum_member(capi.cudnnActivationMode_t, mode, "CUDNN_ACTIVATION_", "activation mode")
        self._coef, self._swish_beta = float_arg(coef, "coef"), float_arg(swish_beta, "swish_beta")
        if self._mode == capi.CUDNN_ACTIVATION_CLIPPED_RELU and not self._coef > 0:
            raise InvalidValueError(f"clipped_relu needs its ceiling coef > 0, got {coef!r}")
        self._nan = nan_flag(nan_propagation)
        self._desc: _ActivationDescriptor | None = None

    mode: capi.cudnnActivationMode_t = setting("_mode")
    coef: float = setting("_coef")
    swish_beta: float = setting("_swish_beta")
    nan_propagation: bool = setting("_nan")

    def _key(self):
        return (self._mode, self._nan, self._coef, self._swish_beta)

    def __repr__(self):
        name = self._mode.name.removeprefix("CUDNN_ACTIVATION_").lower()
        nan = ", nan_propagation=True" if self._nan else ""
        return f"Activation({name!r}, coef={self._coef}, swish_beta={self._swish_beta}{nan})"


#: the Activation of each mode name or member passed instead of an Activation
_BY_MODE = caches.shared("activation.by_mode")


def activation_of(act: Activation | str | int) -> Activation:
    """An :class:`Activation` from itself or a mode name or ``cudnnActivationMode_t`` member (then coef 0, swish_beta
    1; one shared instance per mode, which holds its C descriptor)."""
    if isinstance(act, Activation):
        return act
    if isinstance(act, (str, capi.cudnnActivationMode_t)):
        return _BY_MODE.get(act) or _BY_MODE.setdefault(act, Activation(act))
    raise InvalidTypeError(f"activation must be an Activation, a mode name or a cudnnActivationMode_t, got {act!r}")


#: legacy mode -> (graph forward mode, graph backward mode)
_GRAPH_MODES = {
    capi.CUDNN_ACTIVATION_SIGMOID: ("sigmoid_fwd", "sigmoid_bwd"), capi.CUDNN_ACTIVATION_RELU: ("relu_fwd", "relu_bwd"),
    capi.CUDNN_ACTIVATION_TANH: ("tanh_fwd", "tanh_bwd"), capi.CUDNN_ACTIVATION_CLIPPED_RELU: ("relu_fwd", "relu_bwd"),
    capi.CUDNN_ACTIVATION_ELU: ("elu_fwd", "elu_bwd"), capi.CUDNN_ACTIVATION_SWISH: ("swish_fwd", "swish_bwd"),
    capi.CUDNN_ACTIVATION_IDENTITY: ("identity", "identity"),
}


def _graph(handle: Handle, act: Activation, xa, dya, out, alpha, beta, auto) -> bool:
    """The graph path: one pointwise operation blended into ``out``, forward (``dya`` None) or backward."""
    if act.nan_propagation:
        raise gl.GraphPathRefused("engine='graph' has no NaN-propagation setting; use engine='legacy'")
    backward = dya is not None
    mode = _GRAPH_MODES[act.mode][backward]
    params = {capi.CUDNN_ACTIVATION_CLIPPED_RELU: (("relu_lower_clip", 0.0), ("relu_upper_clip", act.coef)),
              capi.CUDNN_ACTIVATION_ELU: (("elu_alpha", act.coef),),
              capi.CUDNN_ACTIVATION_SWISH: (("swish_beta", act.swish_beta),)}.get(act.mode, ())
    inputs = ([("dy", dya)] if backward else []) + ([] if backward and mode == "identity" else [("x", xa)])

    def build(g, t, _):
        return gl.blend(g, g.pointwise(mode, *(t[name] for name, _a in inputs), **dict(params)), t, alpha, beta)
    return gl.run_graph(handle, "activation_backward" if backward else "activation_forward",
                        (mode, params, float(alpha), float(beta)), inputs + ([("prior", out)] if beta else []),
                        [("dx" if backward else "y", out)], build, auto=auto)


def _legacy(handle: Handle, act: Activation, xa, ya, dya, dxa, alpha: float, beta: float) -> None:
    """``cudnnActivationForward`` (``dya`` None) or ``...Backward``; identity as ``cudnnTransformTensor``."""
    if act.mode == capi.CUDNN_ACTIVATION_IDENTITY:
        blend(handle, capi.cudnnTransformTensor, (), xa.dtype, alpha, beta, [xa if dya is None else dya],
              ya if dya is None else dxa)
    elif dya is None:
        blend(handle, capi.cudnnActivationForward, (act,), xa.dtype, alpha, beta, [xa], ya)
    else:
        blend(handle, capi.cudnnActivationBackward, (act,), xa.dtype, alpha, beta, [ya, dya, xa], dxa)


@prepared(inputs=("x",), outputs=("y",), scalars=("alpha", "beta"), moved=("y",))
def activation_forward(handle: Handle, activation: Activation | str | int, x: DeviceArrayLike, *,
                       y: Out | None = None, alpha: float = 1.0, beta: float = 0.0,
                       engine: str = "auto") -> DeviceArray | Out:
    """``y = alpha * act(x) + beta * y`` (``cudnnActivationForward``); returns y (allocated if not given; may be x).

    ``activation``: an :class:`Activation`, or a mode name or ``cudnnActivationMode_t`` (then coef 0, swish_beta 1).
    """
    act = activation_of(activation)
    xa = check_array(x, "x", handle, floating=True)
    ya = output(y, "y", handle, xa.shape, xa.dtype, like=xa)
    gl.dispatch(engine, handle, None,
                lambda: _legacy(handle, act, xa, ya, None, None, alpha, beta),
                lambda auto: _graph(handle, act, xa, None, ya, alpha, beta, auto))
    return ya if y is None else y


@prepared(inputs=("x", "y", "dy"), outputs=("dx",), scalars=("alpha", "beta"), moved=("dx",))
def activation_backward(handle: Handle, activation: Activation | str | int, x: DeviceArrayLike, y: DeviceArrayLike,
                        dy: DeviceArrayLike, *, dx: Out | None = None, alpha: float = 1.0,
                        beta: float = 0.0, engine: str = "auto") -> DeviceArray | Out:
    """``dx = alpha * dL/dx + beta * dx`` from the forward's x and y and the gradient dy (``cudnnActivationBackward``).

    ``engine``: "legacy", "graph" (which computes the gradient from x; y is checked but not read) or "auto"."""
    act = activation_of(activation)
    xa = check_array(x, "x", handle, floating=True)
    ya = check_array(y, "y", handle, dtype=xa.dtype, shape=xa.shape)
    dya = check_array(dy, "dy", handle, dtype=xa.dtype, shape=xa.shape)
    dxa = output(dx, "dx", handle, xa.shape, xa.dtype, like=dya)
    gl.dispatch(engine, handle, None,
                lambda: _legacy(handle, act, xa, ya, dya, dxa, alpha, beta),
                lambda auto: _graph(handle, act, xa, dya, dxa, alpha, beta, auto))
    return dxa if dx is None else dx


def _activation(mode="relu", coef=0.0, *, nan_propagation=False, swish_beta=None) -> Activation:
    """What the deprecated ActivationDescriptor and activation_descriptor make."""
    return Activation(mode, coef, 1.0 if swish_beta is None else swish_beta, nan_propagation=nan_propagation)


_activation.__qualname__ = "cudnn_py.Activation"
ActivationDescriptor = alias("ActivationDescriptor", _activation)
activation_descriptor = alias("activation_descriptor", _activation)
