"""Random numbers inside a graph: ``OPERATION_RNG`` (cuDNN's counter-based Philox generator: the same seed and offset
give the same numbers), and dropout built on it.
"""
from __future__ import annotations

import ctypes

from cudnn_py import capi
from cudnn_py.core.args import float_arg, shape_arg
from cudnn_py.errors import InvalidTypeError, InvalidValueError

from ..descriptors import BackendDescriptor
from .base import Builder, LowerContext, Op

__all__ = ["Rng", "RngBuilders", "RNG_DISTRIBUTIONS"]

#: short name -> ``cudnnRngDistribution_t`` member name
RNG_DISTRIBUTIONS = {"bernoulli": "CUDNN_RNG_DISTRIBUTION_BERNOULLI"}


class Rng(Op):
    """y ~ Bernoulli(probability), elementwise; ``params``: distribution, probability, seed (int or None: the
    ``seed``/``offset`` input tensors)."""

    kind = "rng"

    def lower(self, ctx: LowerContext) -> None:
        p = self.params
        dist = BackendDescriptor("RNG", distribution=capi.cudnnRngDistribution_t[RNG_DISTRIBUTIONS[p["distribution"]]],
                                 bernoulli_dist_probability=float(p["probability"])).finalize()
        d = BackendDescriptor("OPERATION_RNG", ydesc=ctx.tensor(self.outputs["y"]), desc=dist)
        if p["seed"] is not None:
            d.set("seed", int(p["seed"]))
        else:
            seed = ctx.tensor(self.inputs["seed"])
            # RNG_SEED takes a tensor descriptor too; the attribute table knows only INT64
            capi.cudnnBackendSetAttribute(d.ptr, capi.CUDNN_ATTR_OPERATION_RNG_SEED, capi.CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          1, ctypes.byref(ctypes.c_void_p(seed.ptr.value)))
            d.set("offset_desc", ctx.tensor(self.inputs["offset"]))
        ctx.add(d.finalize(), dist)


class RngBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that add random numbers."""

    def _seed_offset(self, seed, offset, ndim: int) -> tuple[dict, int | None]:
        if isinstance(seed, bool):
            raise InvalidTypeError("seed must be an int or an int64 Tensor, not a bool")
        if isinstance(seed, int):
            if offset is not None:
                raise InvalidValueError("offset= goes with a seed tensor; with an int seed the offset is 0")
            if not 0 <= seed < 2 ** 63:
                raise InvalidValueError(f"seed must be in [0, 2**63), got {seed}")
            return {}, seed
        ins = {}
        for role, t in (("seed", seed), ("offset", offset)):
            if t is None:
                raise InvalidValueError(f"rng: a seed tensor needs an offset tensor too (int64, shape (1,)*{ndim})")
            t = self._own(t, role)
            if t.dtype != capi.CUDNN_DATA_INT64 or t.shape != (1,) * ndim or t.is_by_value:
                raise InvalidTypeError(f"rng: {role} must be a device int64 tensor of shape {(1,) * ndim}, got "
                                       f"{t.describe()}")
            ins[role] = t
        return ins, None

    def bernoulli(self, shape, probability: float, *, seed=0, offset=None, like=None, name: str | None = None):
        """A mask of ``shape`` with elements 1 (probability ``probability``) or 0, from cuDNN's Philox generator.
        ``seed``: an int baked into the graph, or an int64 device tensor of shape (1,)*rank read at execution with
        the ``offset`` tensor (same shape and dtype): the same seed and offset give the same mask. ``like``: a
        tensor whose layout the mask follows. Returns the mask (virtual; float32 intermediates, the graph's io dtype
        as an output)."""
        shape = shape_arg(shape, "shape")
        prob = float_arg(probability, "probability")
        if not 0 <= prob <= 1:
            raise InvalidValueError(f"probability must be in [0, 1], got {probability!r}")
        ins, fixed = self._seed_offset(seed, offset, len(shape))
        if like is not None:
            like = self._own(like, "like")
        y = self.virtual(shape, strides=like.strides if like is not None and like.shape == shape else None,
                          like=like, name=name and f"{name}.y")
        self.add_op(Rng(ins, {"y": y}, {"distribution": "bernoulli", "probability": prob, "seed": fixed}, name))
        return y

    def dropout(self, x, p: float, *, seed=0, offset=None, name: str | None = None):
        """Dropout: y = x * mask / (1 - p) with mask ~ Bernoulli(1 - p) (see :meth:`bernoulli` for ``seed`` and
        ``offset``). Returns ``(y, mask)``, both virtual; make the mask an output to reuse it in the backward pass
        (dx = dy * mask / (1 - p)), or rebuild it there from the same seed and offset."""
        x = self._own(x, "x")
        rate = float_arg(p, "p")
        if not 0 <= rate < 1:
            raise InvalidValueError(f"dropout rate p must be in [0, 1), got {p!r}")
        mask = self.bernoulli(x.shape, 1 - rate, seed=seed, offset=offset, like=x, name=name and f"{name}.rng")
        scaled = self.mul(x, mask, name=name and f"{name}.mask")
        y = self.scale(scaled, 1 / (1 - rate), name=name and f"{name}.scale") if rate else scaled
        return y, mask
