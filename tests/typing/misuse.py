"""Mistakes the public API's annotations must catch: each line marked ``# error`` must get a mypy error.

tests/test_typing.py checks that mypy reports exactly the marked lines (so the types are not ``Any``).
"""
from __future__ import annotations

import numpy as np

import cudnn_py as cudnn

x = cudnn.to_device(np.zeros(3, np.float32))
x.to_numpy().no_such_method()  # error
n: str = x.nbytes  # error
cudnn.empty("3")  # error
t = cudnn.timer()
t.ms + 1.0  # error
cudnn.default_handle().workspace.get("4096")  # error
cudnn.Workspace(cap="1 MiB")  # error
e = cudnn.CudaError("cuX", 2)
e.code.upper()  # error
v: tuple[int, int] = cudnn.version()  # error
h = cudnn.default_handle()
cudnn.pooling_forward(h, "max", x)  # error
r: cudnn.DeviceArray = cudnn.reduce_tensor(h, "max", x, indices=True)  # error
cudnn.activation_forward(h, cudnn.Activation(), x, y=3)  # error
cudnn.convolution_forward(h, cudnn.Convolution(), x, x, autotune="yes")  # error
