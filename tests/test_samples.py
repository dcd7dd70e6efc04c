"""The ports of NVIDIA's cuDNN samples conv_sample and multiHeadAttention (examples/conv_sample.py,
examples/multi_head_attention.py): flags, data, layouts and the reference checkers on CPU; each port's
runs and checks on the GPU."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import numeric_gradient

from cudnn_py import capi
from reference import attention as attn_ref
from reference import conv as conv_ref

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


cs = _load("conv_sample")
mha = _load("multi_head_attention")


# ================================================================ conv_sample, CPU

def test_lcg_streams_match_the_c_sample():
    """First values of the C sample's initImage for float, half and int8 (printed by the compiled C code)."""
    assert cs.Lcg().uniform(5).tolist() == pytest.approx(
        [0.0539689176, 0.762387633, 0.909310579, 0.198137611, 0.880575001], rel=1e-8)
    g = cs.Lcg()
    g.seeds(1000)
    assert g.seed == 1236085997
    assert cs.Lcg().small_ints(8).tolist() == [2, -1, -2, 2, -2, -1, 1, -1]
    assert cs.Lcg().uniform(5).astype(np.float16).view(np.uint16).tolist() == [0x2AE8, 0x3A19, 0x3B46, 0x3257, 0x3B0B]
    # the jump-ahead blocks give the same sequence as single steps, across calls
    a, b = cs.Lcg(), cs.Lcg()
    seq = np.concatenate([a.seeds(3), a.seeds(17), a.seeds(1)])
    ref = []
    for _ in range(21):
        b.seed = (b.A * b.seed + b.C) & b.MASK
        ref.append(b.seed)
    assert seq.tolist() == ref and a.seed == b.seed


def test_parse_flags_like_the_sample():
    o, err = cs.parse(["-n2", "-c64", "-h7", "-w9", "-k16", "-r3", "-s5", "-pad_h1", "-pad_w2", "-u2", "-v3",
                       "-dgrad", "-x", "-mathType1", "-filterFormat1", "-fold", "-b", "-dataType1"])
    assert err is None
    assert (o.dims, o.filter_dims, o.pad, o.stride) == ([2, 64, 7, 9], [16, 64, 3, 5], [1, 2], [2, 3])
    assert (o.algo, o.mode, o.math_type, o.filter_format, o.fold, o.benchmark) == (
        1, capi.CUDNN_CROSS_CORRELATION, 1, 1, True, True)
    assert cs.parse(["-wgrad"])[0].algo == 2 and cs.parse(["-transformToNCHW"])[0].transform == "to"
    defaults = cs.parse([])[0]
    assert (defaults.dims, defaults.filter_dims, defaults.mode) == (
        [1, 32, 4, 4], [32, 32, 1, 1], capi.CUDNN_CONVOLUTION)
    assert cs.parse(["-c"])[0].dims[1] == 0  # atol of nothing
    assert cs.parse(["-dataType9"])[1] == "Unknown switch '-dataType9'"
    assert cs.parse(["-q1"])[1] == "Unknown switch '-q1'"
    assert cs.parse(["c8"])[1] == "Invalid separator 'c' for option 'c8'"


def test_geometry_and_padded_dims():
    assert cs.generate_strides([2, 3, 4, 5], capi.CUDNN_TENSOR_NCHW) == (60, 20, 5, 1)
    assert cs.generate_strides([2, 3, 4, 5], capi.CUDNN_TENSOR_NHWC) == (60, 1, 15, 3)
    assert cs.output_dim(14, 1, 3, 2) == 7 and cs.output_dim(7, 0, 1, 1) == 7
    o = cs.parse(["-c40", "-k36", "-r3", "-s3"])[0]
    t = cs.Test(o, capi.CUDNN_TENSOR_NCHW_VECT_C, capi.CUDNN_DATA_INT8x32, cs.new_generators())
    assert (t.dims_p, t.fdims_p, t.odims_p) == ([1, 64, 4, 4], [64, 64, 3, 3], [1, 64, 2, 2])
    t4 = cs.Test(o, capi.CUDNN_TENSOR_NCHW_VECT_C, capi.CUDNN_DATA_INT8x4, cs.new_generators())
    assert (t4.dims_p[1], t4.fdims_p[:2]) == (40, [36, 40])


def test_vect_c_layouts():
    a = np.arange(2 * 8 * 3 * 2).reshape(2, 8, 3, 2)
    flat = cs.to_vect_c(a, 4)
    assert flat[:5].tolist() == [a[0, 0, 0, 0], a[0, 1, 0, 0], a[0, 2, 0, 0], a[0, 3, 0, 0], a[0, 0, 0, 1]]
    np.testing.assert_array_equal(cs.from_vect_c(flat, a.shape, 4), a)
    x = np.arange(30 * 4).reshape(1, 30, 2, 2)
    nc32 = cs.nchw_to_nc32hw32(x)
    back = cs.nc32hw32_to_nchw(nc32, (1, 32, 2, 2))
    np.testing.assert_array_equal(back[:, :30], x)
    assert not back[:, 30:].any()
    padded = cs.init_image_padded(cs.new_generators(), (1, 3, 2, 2), (1, 4, 2, 2), 4)
    assert (cs.from_vect_c(padded, (1, 4, 2, 2), 4)[:, 3] == 0).all()
    assert padded[:3].tolist() == cs.Lcg().small_ints(3).tolist()


@pytest.mark.parametrize("pad,stride", [((0, 0), (1, 1)), ((1, 2), (2, 1)), ((2, 0), (3, 2))])
def test_references_against_the_float64_conv_reference(rng, pad, stride):
    x, w = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 2))
    for flip, mode in ((True, "convolution"), (False, "cross_correlation")):
        y = cs.conv_reference(x, w, pad, stride, flip=flip)
        np.testing.assert_allclose(y, conv_ref.conv_forward(x, w, pad, stride, mode=mode), rtol=1e-12, atol=1e-12)
        dy = rng.standard_normal(y.shape)
        np.testing.assert_allclose(cs.dgrad_reference(w, dy, x.shape, pad, stride, flip=flip),
                                   conv_ref.conv_backward_data(dy, w, x.shape, pad, stride, mode=mode), atol=1e-12)
        np.testing.assert_allclose(cs.wgrad_reference(x, dy, w.shape, pad, stride, flip=flip),
                                   conv_ref.conv_backward_filter(x, dy, w.shape, pad, stride, mode=mode), atol=1e-12)


# (format, data type, direction, n, c, h, w, k, r, s, pad_h, pad_w, u, v, cross-correlation): the C sample's own
# host reference on its own data (compiled from conv_sample.cpp): element count, sum, first and last values
C_REFERENCE = [
    ((1, 0, 0, 2, 5, 7, 6, 3, 3, 2, 1, 0, 2, 1, 0), 120, 598.038494348526,
     [3.282097339630127, 5.46737813949585, 5.048489093780518, 3.7284371852874756]),
    ((1, 1, 1, 2, 5, 7, 8, 3, 3, 3, 1, 1, 2, 2, 1), 560, 704.0416259765625,
     [0.2218017578125, 0.3740234375, 0.384521484375, 0.291015625]),
    ((0, 0, 2, 2, 5, 7, 6, 3, 3, 2, 1, 0, 2, 1, 0), 90, 640.7161030769348,
     [6.376603126525879, 5.78863000869751, 9.317437171936035, 9.51971435546875]),
    ((2, 3, 0, 2, 32, 6, 5, 32, 3, 2, 1, 1, 2, 1, 0), 1152, -836.0, [-6, -1, 27, 11]),
]


def _sample_reference(case):
    fmt, dt, algo, n, c, h, w, k, r, s, ph, pw, u, v, xcorr = case
    argv = [f"-n{n}", f"-c{c}", f"-h{h}", f"-w{w}", f"-k{k}", f"-r{r}", f"-s{s}", f"-pad_h{ph}", f"-pad_w{pw}",
            f"-u{u}", f"-v{v}", f"-filterFormat{fmt}"] + [[], ["-dgrad"], ["-wgrad"]][algo] + ["-x"] * xcorr
    o, err = cs.parse(argv)
    assert err is None
    types = (capi.CUDNN_DATA_FLOAT, capi.CUDNN_DATA_HALF, capi.CUDNN_DATA_INT8x4, capi.CUDNN_DATA_INT8x32)
    t = cs.Test(o, cs.FORMATS[fmt], types[dt], cs.new_generators())
    hx, hw, hy = t.host_data()
    if t.vect:
        x, wt = cs.from_vect_c(hx, t.dims_p, t.vec), cs.from_vect_c(hw, t.fdims_p, t.vec)
        return cs.to_vect_c(cs.epilog(cs.conv_reference(x, wt, o.pad, o.stride), np.int8), t.vec)
    return t.reference(hx, hw, hy)


@pytest.mark.parametrize("case,size,total,first", C_REFERENCE)
def test_host_reference_matches_the_c_samples(case, size, total, first):
    ref = _sample_reference(case)
    assert ref.size == size
    exact = ref.dtype != np.float32  # float16 rounding and int8 arithmetic agree exactly; float32 to its rounding
    assert float(ref.astype(np.float64).sum()) == (total if exact else pytest.approx(total, rel=1e-6))
    assert ref[:4].tolist() == (first if exact else pytest.approx(first, rel=1e-6))


def test_count_errors_and_epilog():
    ref = np.array([0.5, 2.0, -3.0, 0.0], np.float32)
    assert cs.count_errors(ref.copy(), ref) == 0
    dev = ref + np.array([0.019, 0.039, 0.07, np.nan], np.float32)  # abs 0.019 ok, rel 0.0195 ok, rel 0.023, NaN
    assert cs.count_errors(dev, ref) == 2
    assert cs.count_errors(np.array([1, 2], np.int8), np.array([1, 3], np.int8)) == 1
    acc = np.array([5, -5, 200, -200, 3], np.int64)  # 0.8 * acc: 4.0000001, -4.0000001, 160 -> 127, -160 -> -128, 2.4
    assert cs.epilog(acc, np.int8).tolist() == [4, -4, 127, -128, 2]
    assert cs.epilog(np.array([0.5 / np.float32(0.8)]), np.float16).dtype == np.float16


def test_transform_mode_prints_the_sample_lines(capsys):
    assert cs.main(["-n1", "-c30", "-h2", "-w2", "-transformFromNCHW"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Executing: conv_sample.py -n1 -c30 -h2 -w2 -transformFromNCHW", "==== NCHW DIMENSIONS ====",
        "NCHW dims are 1, 30, 2, 2", "==== NC/32H32W DIMENSIONS ====", "NC/32H32W dims are 1, 32, 2, 2"]
    assert cs.transform_layout([1, 64, 1, 1], "to").shape == (1, 64, 1, 1)
    assert capsys.readouterr().out.startswith("Data layout of NCHW and NC/32H32W will be the same")


def test_refusals_without_a_gpu(capsys):
    assert cs.main(["-dataType7"]) == 1
    assert "Unknown switch '-dataType7'" in capsys.readouterr().err
    assert cs.main(["-filterFormat5"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("This sample only supports")
    assert cs.main(["-filterFormat2", "-wgrad"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "This sample does not support dgrad or wgrad for INT8x4 and INT8x32!"


@pytest.mark.skipif(os.environ.get("CUDNN_PY_REQUIRE_GPU") == "1", reason="checks the machine without a GPU")
def test_conv_sample_without_gpu_says_so_in_one_line(capsys):
    from conftest import gpu_missing_reason
    if not gpu_missing_reason():
        pytest.skip("a GPU is visible")
    assert cs.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("conv_sample.py: ")


# ================================================================ multiHeadAttention, CPU

def test_mha_parse_and_defaults():
    o = mha.parse([])
    names = ("attnNumHeads", "attnBatchSize", "attnBeamSize", "attnSeqLenQ", "attnSeqLenK")
    assert tuple(o[n] for n in names) == (2, 4, 3, 24, 20)
    o = mha.parse(["-attnTrain1", "-attnSmScaler1.5e-1", "-attnDropoutRate0.1", "-attnProjQsize2", "-attnQsize8x"])
    assert o["attnTrain"] == 1 and o["attnSmScaler"] == 0.15 and o["attnQsize"] == 8 and o["attnProjQsize"] == 2
    assert o["attnDropoutRate"] == float(np.float32(0.1))
    with pytest.raises(mha.SampleExit, match="missing numerical argument in option '-attnTrain'"):
        mha.parse(["-attnTrain"])
    with pytest.raises(mha.SampleExit, match="unknown switch 'attnTrain1'"):
        mha.parse(["attnTrain1"])
    assert mha.usage().splitlines()[6] == "-attnTrain<%d>       - selects API mode (0-inference, 1-training)"


@pytest.mark.parametrize("argv,match", [
    (["-attnDataType1", "-attnCompPrec0"], "-attnDataType1 and -attnCompPrec0 are not supported"),
    (["-attnProjBias2"], "wrong -attnProjBias value"),
    (["-attnBeamSize0"], "wrong attention NumHeads/BatchSize/BeamSize"),
    (["-attnFileDump1"], "requires -attnBatchSize=1"),
    (["-attnFileDump1", "-attnBatchSize1"], "requires -attnBeamSize=1"),
    (["-attnFileDump1", "-attnBatchSize1", "-attnBeamSize1", "-attnProjVsize0"], "projection sizes above 0"),
    (["-attnDataLayout6"], "wrong -attnDataLayout6 option"),
])
def test_mha_configuration_errors(argv, match):
    with pytest.raises(mha.SampleExit, match=match):
        mha.Config.from_options(mha.parse(argv))


def test_mha_precisions_and_sizes():
    c = mha.Config.from_options(mha.parse(["-attnDataType2", "-attnCompPrec0", "-attnProjOsize0"]))
    assert (c.dtype, c.compute_dtype, c.o_len) == (np.float16, np.float32, 16)
    assert c.dims("q") == [24, 4, 3, 32] and c.dims("k") == [20, 4, 1, 32] and c.count("o") == 24 * 4 * 3 * 16
    c = mha.Config.from_options(mha.parse(["-attnDataType1", "-attnCompPrec1", "-attnDataLayout4"]))
    assert c.dtype == np.float64 and c.axes == (mha.B, mha.T, mha.N, mha.V)


@pytest.mark.parametrize("layout", range(6))
def test_mha_layouts(layout):
    c = mha.Config.from_options(mha.parse([f"-attnDataLayout{layout}", "-attnBeamSize1", "-attnBatchSize3",
                                           "-attnSeqLenQ5", "-attnQsize4"]))
    flat = np.arange(c.count("q"), dtype=np.float32)
    a = mha.to_batch_major(c, flat, "q")
    assert a.shape == (3, 5, 4)
    np.testing.assert_array_equal(mha.from_batch_major(c, a, "q"), flat)
    dims = {mha.T: 5, mha.N: 3, mha.B: 1}
    t, n = 2, 1  # element (batch n, time t, vector 3): its flat index from the axis order
    idx = {mha.T: t, mha.N: n, mha.B: 0}
    lin = 0
    for ax in mha.LAYOUTS[layout]:
        lin = lin * dims[ax] + idx[ax]
    assert a[n, t, 3] == lin * 4 + 3


def test_mha_testgen_prints_the_configuration(capsys):
    c = mha.Config.from_options(mha.parse(["-attnBatchSize2", "-attnBeamSize1", "-attnSeqLenQ3", "-attnSeqLenK4",
                                           "-attnDataLayout2"]))
    mha.testgen(c, np.random.default_rng(0))
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["Test parameters:", "", "#### attnTrain       = 0 (inference)"]
    assert "#### attnSmScaler    = 1.0000e+00" in lines and "#### attnDataLayout  = 2 (N,T,B,V)" in lines
    assert lines[-10:] == ["sequence_length_q[idx=0]=3", "sequence_length_q[idx=1]=3", "",
                           "sequence_length_k[idx=0]=4", "sequence_length_k[idx=1]=4", "",
                           "attention_window[time=0]=0:4", "attention_window[time=1]=0:4",
                           "attention_window[time=2]=0:4", ""]
    assert c.pythonic
    r = mha.Config.from_options(mha.parse(["-attnRandGeom1", "-attnSeqLenQ6", "-attnSeqLenK5"]))
    mha.testgen(r, np.random.default_rng(3))
    assert all(1 <= n <= 6 for n in r.q_lengths) and len(r.q_lengths) == 12 and len(r.k_lengths) == 4
    assert all(0 <= lo <= hi <= 5 and lo < 5 for lo, hi in zip(r.lo_win, r.hi_win))
    assert not r.pythonic  # beam 3


def test_mha_reference_gradients_are_the_derivatives(rng):
    heads, q_size, k_size, v_size, proj, tq, tk = 2, 4, 3, 5, 2, 3, 4
    q, k, v = rng.standard_normal((q_size, tq)), rng.standard_normal((k_size, tk)), rng.standard_normal((v_size, tk))
    w = [rng.standard_normal(s) for s in ((heads, proj, q_size), (heads, proj, k_size), (heads, 3, v_size),
                                          (heads, q_size, 3))]
    dout = rng.standard_normal((q_size, tq))
    out, grads, _ = mha.attn_reference(q, k, v, *w, 0.7, True, dout)
    args = [q, k, v] + w

    def loss():
        return float(np.sum(mha.attn_reference(*args, 0.7, True)[0] * dout))
    for name, arr in zip(("dq", "dk", "dv", "dwq", "dwk", "dwv", "dwo"), args):
        np.testing.assert_allclose(grads[name], numeric_gradient(loss, arr), rtol=1e-6, atol=1e-7, err_msg=name)
    # the same model as tests/reference/attention.py (vectors in rows there)
    wd = dict(zip(("wq", "wk", "wv", "wo"), w))
    want, cache = attn_ref.forward(q.T[None], k.T[None], v.T[None], wd, [tq], [tk], [0] * tq, [tk] * tq, 0.7, True)
    np.testing.assert_allclose(out.T, want[0], rtol=1e-12, atol=1e-12)
    dq = attn_ref.backward(dout.T[None], cache)[0]
    np.testing.assert_allclose(grads["dq"].T, dq[0] + dout.T, rtol=1e-10, atol=1e-12)


def _fake_dump(tmp_path, c, rng, corrupt=None):
    """Dump files whose results are the reference model's own (as a correct library would write them)."""
    named = {"wq": (c.heads, c.q_proj, c.q_size), "wk": (c.heads, c.k_proj, c.k_size),
             "wv": (c.heads, c.v_proj, c.v_size), "wo": (c.heads, c.o_proj, c.v_proj)}
    weights = {n: mha.init_buffer(rng, int(np.prod(s)), c.dtype).reshape(s) for n, s in named.items()}
    ins = {n: mha.init_buffer(rng, c.count(n), c.dtype) for n in ("q", "k", "v")}
    ins["do"] = mha.init_buffer(rng, c.count("o"), c.dtype)
    col = lambda flat, which: mha.seq_view(flat, c.dims(which), c.axes)[:, 0, 0, :].T.astype(np.float64)  # noqa: E731
    out, grads, _ = mha.attn_reference(col(ins["q"], "q"), col(ins["k"], "k"), col(ins["v"], "v"),
                                       *(weights[n].astype(np.float64) for n in named), c.scaler, c.res_link,
                                       col(ins["do"], "o"))
    if c.res_link:
        grads["dq"] = grads["dq"] - col(ins["do"], "o")  # cuDNN's dq leaves out the residual path
    back = lambda a, which: mha.from_batch_major(c, a.T[None].astype(c.dtype), which)  # noqa: E731
    res = {"inputs": ins, "weights": weights, "out": back(out, "o"),
           "dq": back(grads["dq"], "q"), "dk": back(grads["dk"], "k"), "dv": back(grads["dv"], "v"),
           "dweights": {n: grads["d" + n].astype(c.dtype) for n in named}}
    if corrupt:
        res[corrupt][3] += 0.5
    mha.dump(tmp_path, c, res)


@pytest.mark.parametrize("layout,res_link", [(3, 0), (0, 1)])
def test_mha_dump_and_reference_check(tmp_path, capsys, layout, res_link):
    argv = ["-attnFileDump1", "-attnTrain1", "-attnDataType1", "-attnCompPrec1", "-attnNumHeads3", "-attnBeamSize1",
            "-attnBatchSize1", "-attnQsize8", "-attnKsize6", "-attnVsize5", "-attnProjQsize2", "-attnProjKsize2",
            "-attnProjVsize3", "-attnProjOsize8", f"-attnResLink{res_link}", "-attnSeqLenQ4", "-attnSeqLenK7",
            f"-attnDataLayout{layout}"]
    c = mha.Config.from_options(mha.parse(argv))
    mha.testgen(c, np.random.default_rng(1))
    _fake_dump(tmp_path, c, np.random.default_rng(2))
    capsys.readouterr()
    assert mha.attn_ref(tmp_path) == 0
    out = capsys.readouterr().out
    assert "Multi-head attention model: train=1, nheads=3, scaler=1.0000e+00" in out
    assert "Loaded [3x2x8] of WQ weights from 'wq.dat'" in out and "Loaded [8x4] of Q data from 'q.dat'" in out
    assert [ln.split(" [")[0] for ln in out.splitlines() if ln.startswith(("PASS", "FAIL"))] == [
        "PASS: out", "PASS: dq", "PASS: dk", "PASS: dv", "PASS: dwq", "PASS: dwk", "PASS: dwv", "PASS: dwo"]
    first = (tmp_path / "q.dat").read_text().splitlines()[0]
    assert len(first.split()) == 4 and first.startswith(" ") and "e" in first  # a row per element, a column per step
    _fake_dump(tmp_path, c, np.random.default_rng(2), corrupt="dk")
    assert mha.attn_ref(tmp_path) == 1
    out = capsys.readouterr().out
    # flat element 3 is step 0 of vector element 3: row 3, column 0 of the [6 x 7] file, flat index 21 there
    assert "FAIL: dk" in out and "dk_res[21]=" in out and "PASS: dv" in out


# ================================================================ GPU

CONV_RUNS = [
    [],
    ["-dgrad"],
    ["-wgrad"],
    ["-c16", "-h9", "-w7", "-k8", "-r3", "-s3", "-pad_h1", "-pad_w1", "-u2", "-v1"],
    ["-dgrad", "-c16", "-h9", "-w7", "-k8", "-r3", "-s2", "-pad_h1", "-pad_w0", "-u1", "-v2", "-x"],
    ["-wgrad", "-c16", "-h9", "-w7", "-k8", "-r3", "-s3", "-pad_h1", "-pad_w1", "-u2", "-v2"],
    ["-filterFormat1", "-c16", "-h9", "-w7", "-k8", "-r3", "-s3", "-pad_h1", "-pad_w1"],
    ["-filterFormat1", "-wgrad", "-c16", "-h9", "-w7", "-k8", "-r3", "-s3", "-pad_h1", "-pad_w1"],
    ["-mathType1", "-c64", "-h14", "-w14", "-k32", "-r1", "-s1"],
]


@pytest.mark.gpu
@pytest.mark.parametrize("argv", CONV_RUNS, ids=lambda a: " ".join(a) or "defaults")
def test_conv_sample_passes_its_own_check(capsys, argv):
    assert cs.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out.count("Test PASSED") == 2 and not any("FAILED" in ln or "error" in ln for ln in out)
    assert sum(ln.startswith("^^^^ CUDA : elapsed = ") for ln in out) == 2


@pytest.mark.gpu
def test_conv_sample_check_catches_a_wrong_reference(capsys):
    """The forward reference always flips the filter (as the C sample's): cross-correlation with a 3x3 filter fails."""
    assert cs.main(["-x", "-c8", "-h6", "-w6", "-k8", "-r3", "-s3"]) == -1
    out = capsys.readouterr().out
    assert out.count("Test FAILED, num errors = ") == 2


def _fold_beams(c, flat, which):
    """Sequence data in the sample's layout -> [batch * beam, time, vector] (keys/values repeated per beam)."""
    a = mha.seq_view(flat, c.dims(which), c.axes).transpose(1, 2, 0, 3).astype(np.float64)  # [N, beam, T, V]
    if which in ("k", "v"):
        a = np.repeat(a, c.beam, axis=1)
    return a.reshape(-1, a.shape[2], a.shape[3])


def _named_weights(handle, c, flat):
    """The flat weight space as named arrays (the weight layout does not depend on the beam size)."""
    import cudnn_py as cudnn
    if isinstance(flat, dict):
        return {k: np.asarray(v, np.float64) for k, v in flat.items()}
    attn = cudnn.MultiHeadAttention(c.heads, c.q_size, c.k_size, c.v_size, q_proj_size=c.q_proj,
                                    k_proj_size=c.k_proj, v_proj_size=c.v_proj, o_proj_size=c.o_proj,
                                    max_seq_q=c.seq_q, max_seq_kv=c.seq_k, max_batch=c.batch, scale=c.scaler,
                                    biases=c.proj_bias, dtype=c.dtype, compute_dtype=c.compute_dtype)
    w = attn.new_weights(handle)
    w.copy_(flat)
    return {k: v.astype(np.float64) for k, v in cudnn.read_attention_weights(handle, attn, w).items()}


def _check_mha(handle, c, res, weights_flat, rtol, atol):
    lq = np.array(c.q_lengths)
    lk = np.repeat(np.array(c.k_lengths), c.beam)
    w = _named_weights(handle, c, weights_flat)
    q, k, v = (_fold_beams(c, res["inputs"][n], n) for n in ("q", "k", "v"))
    want, cache = attn_ref.forward(q, k, v, w, lq, lk, c.lo_win, c.hi_win, c.scaler, c.res_link)
    qvalid = (np.arange(c.seq_q)[None, :] < lq[:, None])[..., None]
    kvalid = (np.arange(c.seq_k)[None, :] < lk[:, None])[..., None]

    def close(got, exp, what):
        np.testing.assert_allclose(got, exp, rtol=rtol, atol=atol * max(1.0, float(np.abs(exp).max())), err_msg=what)
    close(np.where(qvalid, _fold_beams(c, res["out"], "o"), 0), want, "out")
    if not c.train:
        return
    dq, dk, dv, dw = attn_ref.backward(_fold_beams(c, res["inputs"]["do"], "o"), cache)
    close(np.where(qvalid, _fold_beams(c, res["dq"], "q"), 0), dq, "dq")
    per_batch = lambda a: a.reshape(c.batch, c.beam, *a.shape[1:]).sum(1)  # noqa: E731 - beams share K and V
    kvalid = kvalid[::c.beam]
    for name, got, exp in (("dk", res["dk"], dk), ("dv", res["dv"], dv)):
        close(np.where(kvalid, mha.seq_view(got, c.dims(name[1]), c.axes)[:, :, 0].transpose(1, 0, 2), 0),
              per_batch(exp), name)
    got_w = _named_weights(handle, c, res["dw"])
    for name in dw:
        close(got_w[name], dw[name], "d" + name)


# float32: the sample keeps cuDNN's default math (TF32 tensor cores on Hopper) and an unscaled softmax (smScaler 1),
# which put single elements up to ~0.4% of the output's scale off on an H200 (rtol 1e-2 / atol 2e-3 failed 1 in 2304)
TOL = {np.float64: (1e-9, 1e-10), np.float32: (2e-2, 5e-3), np.float16: (3e-2, 3e-2)}


@pytest.mark.gpu
@pytest.mark.parametrize("argv", [
    ["-attnTrain0"],                                   # the sample's defaults: beam 3, layout T,N,B: C layer
    ["-attnTrain1"],
    ["-attnTrain0", "-attnSweep1", "-attnDataLayout5", "-attnResLink1", "-attnProjOsize32"],
    ["-attnTrain1", "-attnDataType1", "-attnCompPrec1", "-attnBeamSize2", "-attnDataLayout1", "-attnNumHeads3"],
    ["-attnTrain1", "-attnDataType2", "-attnCompPrec0", "-attnBeamSize1", "-attnDataLayout2"],
    # random lengths and windows; seed 217 draws no query step whose window misses every key
    ["-attnTrain1", "-attnDataType1", "-attnCompPrec1", "-attnBeamSize1", "-attnBatchSize3", "-attnRandGeom1",
     "-attnRandSeed217", "-attnSeqLenQ5", "-attnSeqLenK9", "-attnDataLayout3"],
    ["-attnTrain0", "-attnDataType1", "-attnCompPrec1", "-attnBeamSize1", "-attnDataLayout0", "-attnResLink1",
     "-attnProjOsize32"],
], ids=lambda a: " ".join(a))
def test_mha_runs_match_the_float64_reference(handle, capsys, argv):
    res = mha.run(argv)
    out = capsys.readouterr().out.splitlines()
    c = mha.Config.from_options(mha.parse(argv))
    mha.testgen(c, np.random.default_rng(c.rand_seed))  # the same lengths and windows as the run drew
    capsys.readouterr()
    assert out[-2:] == ["Test DONE", ""] and sum(ln.startswith("Elapsed time = ") for ln in out) == 1
    calls = [ln for ln in out if ln.startswith("Calling ")]
    assert len(calls) == (3 if c.train else 1 if c.sweep else c.seq_q)
    _check_mha(handle, c, res, res["inputs"]["w"], *TOL[c.dtype.type])


@pytest.mark.gpu
def test_mha_pythonic_and_c_layer_paths_agree(capsys):
    argv = ["-attnTrain1", "-attnBeamSize1", "-attnBatchSize3", "-attnDataLayout4", "-attnResLink1",
            "-attnProjOsize32", "-attnProjBias1", "-attnDataType1", "-attnCompPrec1"]
    a, b = mha.run(argv, path="pythonic"), mha.run(argv, path="capi")
    capsys.readouterr()
    for name in ("out", "dq", "dk", "dv", "dw"):
        assert not np.isnan(a[name]).any(), name
        np.testing.assert_allclose(a[name], b[name], rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.gpu
def test_mha_file_dump_passes_the_reference_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["-attnFileDump1", "-attnTrain1", "-attnDataType1", "-attnCompPrec1", "-attnResLink1", "-attnDataLayout3",
            "-attnNumHeads3", "-attnBeamSize1", "-attnBatchSize1", "-attnQsize8", "-attnKsize8", "-attnVsize8",
            "-attnProjQsize2", "-attnProjKsize2", "-attnProjVsize2", "-attnProjOsize8", "-attnSeqLenQ4",
            "-attnSeqLenK10", "-attnSmScaler1.0"]
    assert mha.main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{n}.dat" for n in ("meta", "q", "k", "v", "out", "dout", "dq", "dk", "dv", "wq", "wk", "wv", "wo",
                             "dwq", "dwk", "dwv", "dwo"))
    capsys.readouterr()
    assert mha.main(["attn_ref"]) == 0
    assert capsys.readouterr().out.count("PASS: ") == 8
