"""float64 references for the cudnnNormalization* API: the same math as batch normalisation.

cuDNN's ``CUDNN_NORM_PER_CHANNEL`` is batch-norm's spatial mode and ``CUDNN_NORM_PER_ACTIVATION``
its per-activation mode; NORM_OPS_NORM_ACTIVATION / NORM_ADD_ACTIVATION add ``+ z`` and a ReLU.
"""
from __future__ import annotations

from .batchnorm import backward, forward_inference, forward_training, param_shape, reduce_axes  # noqa: F401
