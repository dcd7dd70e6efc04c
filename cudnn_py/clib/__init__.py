"""The C layer's runtime: the loaded libcudnn, the functions bound to it, their status, logging, NVTX ranges
and the record of the calls made (what a prepared call replays). :mod:`cudnn_py.capi` is generated on top."""
