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
cudnn.convolution_fowrard(h, cudnn.Convolution(), x, x)  # error[attr-defined]
cudnn.sdpa(h, x, x, x, casual=True)  # error[call-overload]
cudnn.sdpa(h, x, x, x, causal="yes")  # error[call-overload]
o: str = cudnn.sdpa(h, x, x, x, causal=True)  # error[assignment]
cudnn.sdpa_backward(h, x, x, x, x, x, x, dropuot=0.1)  # error[call-overload]
cudnn.sdpa_backward(h, x, x, x, x, x, x).dbias  # error[attr-defined]
cudnn.Sdpa(h, x, x, x, casual=True)  # error[call-arg]
g = cudnn.Graph()
tq = g.tensor((1, 2, 8, 64), "float16")
g.sdpa(tq, tq, tq, casual=True)  # error[call-overload]
g.sdpa(tq, tq, tq, return_stats=False)[1].set_output(True)  # error[attr-defined]
g.sdpa_backward(tq, tq, tq, tq, tq, tq, causal="yes")  # error[arg-type]
g.sdpa_fp8(tq, tq, tq, dropout=0.1,  # error[call-arg]
           descale_q=tq, descale_k=tq, descale_v=tq, descale_s=tq, scale_s=tq, scale_o=tq)
cudnn.graph.conv_forward(h, x, x, paddin=1)  # error[call-arg]
