"""Statistics and normalisation as graph operations."""
from __future__ import annotations

from cudnn_py import capi

from ..descriptors import BackendDescriptor
from .base import LowerContext, Op

__all__ = ["GenStats", "NormForward", "NormBuilders", "NORM_MODES"]

#: short name -> ``cudnnBackendNormMode_t`` member name
NORM_MODES = {"layer": "CUDNN_LAYER_NORM", "rms": "CUDNN_RMS_NORM", "instance": "CUDNN_INSTANCE_NORM",
              "batch": "CUDNN_BATCH_NORM"}
#: role -> tensor attribute of the norm operations
_ROLE_ATTRS = {"x": "xdesc", "y": "ydesc", "scale": "scale_desc", "bias": "bias_desc", "epsilon": "epsilon_desc",
               "mean": "mean_desc", "inv_variance": "inv_variance_desc"}


def stat_shape(mode: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the mean / inverse-variance tensors of a ``mode`` normalisation of x of ``shape``: over
    every dim but the batch (layer, rms), over the spatial dims (instance), over all but the channel (batch)."""
    if mode in ("layer", "rms"):
        return (shape[0],) + (1,) * (len(shape) - 1)
    if mode == "instance":
        return shape[:2] + (1,) * (len(shape) - 2)
    return (1, shape[1]) + (1,) * (len(shape) - 2)


class GenStats(Op):
    """Per-channel sum and sum of squares."""

    kind = "genstats"

    def lower(self, ctx: LowerContext) -> None:
        d = BackendDescriptor("OPERATION_GEN_STATS", mode=capi.CUDNN_GENSTATS_SUM_SQSUM,
                              math_prec=self.params["compute_dtype"], xdesc=ctx.tensor(self.inputs["x"]),
                              sumdesc=ctx.tensor(self.outputs["sum"]), sqsumdesc=ctx.tensor(self.outputs["sqsum"]))
        ctx.add(d.finalize())


class NormForward(Op):
    """Layer, RMS, instance or batch normalisation forward (training or inference phase)."""

    kind = "norm_forward"

    def lower(self, ctx: LowerContext) -> None:
        p = self.params
        d = BackendDescriptor("OPERATION_NORM_FORWARD", mode=p["mode"],
                              phase=capi.CUDNN_NORM_FWD_TRAINING if p["training"] else capi.CUDNN_NORM_FWD_INFERENCE)
        for role, t in (*self.inputs.items(), *self.outputs.items()):
            d.set(_ROLE_ATTRS[role], ctx.tensor(t))
        ctx.add(d.finalize())


class NormBuilders:
    """The :class:`~cudnn_py.graph.Graph` methods that add statistics and normalisations."""

    def genstats(self, x, *, compute_dtype=None, name: str | None = None):
        """Per-channel sum and sum of squares of x (N, C, ...). Returns two (1, C, 1, ...) virtual tensors."""
        x = self._own(x, "x")
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        s = self._virtual(shape, name=name and f"{name}.sum")
        sq = self._virtual(shape, name=name and f"{name}.sqsum")
        self._add_op(GenStats({"x": x}, {"sum": s, "sqsum": sq}, {"compute_dtype": self._compute(compute_dtype)},
                              name))
        return s, sq

    def norm_forward(self, x, scale, bias=None, *, mode: str = "layer", training: bool = True,
                     epsilon: float = 1e-5, mean=None, inv_variance=None, name: str | None = None):
        """Normalisation forward (``mode``: 'layer', 'rms', 'instance', 'batch'), where the loaded cuDNN has it.

        Training returns ``(y, mean, inv_variance)`` (``mean`` is None for rms), the statistics float32 and
        virtual until ``set_output``; inference takes ``mean``/``inv_variance`` (rms: only ``inv_variance``) and
        returns ``y``."""
        x, scale = self._own(x, "x"), self._own(scale, "scale")
        if mode not in NORM_MODES:
            raise ValueError(f"mode must be one of {', '.join(NORM_MODES)}, got {mode!r}")
        if x.ndim < 3:
            raise ValueError(f"norm_forward needs x with a batch, a channel and at least one more dim, got {x.shape}")
        eps = self._float(epsilon, "epsilon")
        if not eps > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
        stat = stat_shape(mode, x.shape)
        for t, what in ((scale, "scale"), (bias, "bias")):
            if t is not None and (t.ndim != x.ndim or any(a not in (1, b) for a, b in zip(t.shape, x.shape))):
                raise ValueError(f"norm_forward: {what} {t.shape} does not broadcast to x {x.shape}")
        if bias is None and mode != "rms":
            raise ValueError(f"{mode} norm needs a bias tensor")
        inputs = {"x": x, "scale": scale}
        if bias is not None:
            inputs["bias"] = self._own(bias, "bias")
        inputs["epsilon"] = self.scalar(eps, ndim=x.ndim)
        outputs = {"y": self._virtual(x.shape, strides=x.strides, like=x, name=name and f"{name}.y")}
        if training:
            if mean is not None or inv_variance is not None:
                raise ValueError("training computes mean and inv_variance: do not pass them")
            if mode != "rms":
                outputs["mean"] = self._virtual(stat, name=name and f"{name}.mean")
            outputs["inv_variance"] = self._virtual(stat, name=name and f"{name}.inv_variance")
            for k in ("mean", "inv_variance"):
                if k in outputs:
                    outputs[k].set_dtype("float32")
        else:
            if mode == "batch":
                raise ValueError("cuDNN's norm forward has no batch-norm inference phase")
            needed = {"inv_variance": inv_variance} if mode == "rms" else {"mean": mean, "inv_variance": inv_variance}
            for k, t in needed.items():
                if t is None:
                    raise ValueError(f"{mode} norm inference needs {k}= (a tensor of shape {stat})")
                inputs[k] = self._own(t, k)
        self._add_op(NormForward(inputs, outputs, {"mode": capi.cudnnBackendNormMode_t[NORM_MODES[mode]],
                                                   "training": bool(training)}, name))
        y = outputs["y"]
        if not training:
            return y
        return y, outputs.get("mean"), outputs["inv_variance"]
