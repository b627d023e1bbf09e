"""Real cuDNN through ctypes (gruconv.cudnn_ctypes) against the cuDNN 9.19 golden files.

Every test here needs an NVIDIA GPU and libcudnn: they are marked ``gpu``
(deselected by default; run ``pytest -m gpu``) and skip with the reason
``available()`` gives wherever cuDNN cannot run.  Also runnable as
``python3 tests/test_cudnn_gpu.py``.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import GOLDEN_FILES, load_golden
from gruconv.canonical import StackShape
from gruconv.cudnn_ctypes import available, library_info, run_gru
from gruconv.cudnn_layout import pack, unpack
from gruconv.errors import GruconvError, InputError

AVAILABLE, REASON = available()

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not AVAILABLE, reason=f"real cuDNN unavailable: {REASON}"),
]

STRICT_TOL = 1e-6   # strict fp32 (CUDNN_FMA_MATH) against the golden strict run
F64_TOL = 1e-12     # float64 against the golden float64 run
TF32_MIN = 1e-5     # TF32 must be visibly worse than strict fp32 ...
TF32_MAX = 2e-3     # ... but still close


def shape_of(g, dtype="float32") -> StackShape:
    c = g["config"]
    return StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", dtype)


def run(g, key="opaque", **kw):
    dtype = "float64" if key == "opaque_f64" else "float32"
    return run_gru(g[key], shape_of(g, dtype), g["x"], g["h0"], g["seq_lengths"], **kw)


def maxerr(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def is_large(g) -> bool:
    return g["config"]["H"] >= 64


def test_library_info():
    info = library_info()
    print(f"\n{REASON}\n{info}")
    for key in ("gpu", "cudnn_version", "cuda_runtime_version", "driver_version", "libcudnn", "libcudart"):
        assert key in info and info[key], key
    assert info["cudnn_version"] >= 8000


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_strict_fp32_matches_golden(name):
    g = load_golden(name)
    y, hy, info = run(g)
    assert y.dtype == np.float32 and hy.dtype == np.float32
    assert y.shape == g["y"].shape and hy.shape == g["hy"].shape
    assert info["math_type"] == "CUDNN_FMA_MATH" and info["data_type"] == "CUDNN_DATA_FLOAT"
    ey, ehy = maxerr(y, g["y"]), maxerr(hy, g["hy"])
    print(f"\n{name}: strict |y - golden y| = {ey:.3e}, |hy - golden hy| = {ehy:.3e}, "
          f"|y - y_f64| = {maxerr(y, g['y_f64']):.3e}")
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(hy))
    assert ey <= STRICT_TOL and ehy <= STRICT_TOL


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_tf32_is_visibly_less_precise(name):
    g = load_golden(name)
    y, hy, info = run(g, allow_tf32=True)
    assert info["math_type"] == "CUDNN_DEFAULT_MATH" and info["allow_tf32"] is True
    e = maxerr(y, g["y_f64"])
    golden_e = maxerr(g["y_default_math"], g["y_f64"])
    print(f"\n{name}: tf32 |y - y_f64| = {e:.3e} (golden y_default_math: {golden_e:.3e}; "
          f"|y - y_default_math| = {maxerr(y, g['y_default_math']):.3e})")
    assert e <= TF32_MAX and maxerr(hy, g["hy_f64"]) <= TF32_MAX
    if is_large(g) and golden_e > TF32_MIN:
        assert e > TF32_MIN, "allow_tf32=True ran as precisely as strict fp32: TF32 was not used"


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_float64_matches_golden_f64(name):
    g = load_golden(name)
    y, hy, info = run(g, key="opaque_f64")
    assert y.dtype == np.float64 and info["data_type"] == "CUDNN_DATA_DOUBLE"
    ey, ehy = maxerr(y, g["y_f64"]), maxerr(hy, g["hy_f64"])
    print(f"\n{name}: f64 |y - y_f64| = {ey:.3e}, |hy - hy_f64| = {ehy:.3e} ({info['math_type']})")
    assert ey <= F64_TOL and ehy <= F64_TOL


@pytest.mark.parametrize("key,kw", [("opaque", {}), ("opaque", {"allow_tf32": True}), ("opaque_f64", {})])
def test_varlen_outputs_past_length_are_zero(key, kw):
    varlen = [n for n in GOLDEN_FILES if load_golden(n)["config"]["varlen"]]
    assert varlen, "no varlen golden file"
    for name in varlen:
        g = load_golden(name)
        y, hy, _ = run(g, key=key, **kw)
        assert np.all(np.isfinite(y)) and np.all(np.isfinite(hy))
        lengths = g["seq_lengths"]
        assert lengths.min() < y.shape[0]
        for b, n in enumerate(lengths):
            assert np.all(y[n:, b, :] == 0), f"{name}: batch {b} has output past its length {n}"
            assert np.any(y[n - 1, b, :] != 0)


def swapped_reset_update(g) -> np.ndarray:
    """The golden buffer with the reset and update gates' input matrices swapped (recurrent if none)."""
    shape = shape_of(g)
    params = unpack(np.array(g["opaque"], copy=True), shape)
    for p in params:
        if p.input_weights is not None:
            w = p.input_weights.copy()
            w[[0, 1]] = w[[1, 0]]
            p.input_weights = w
            return pack(params, shape)
    r = params[0].recurrent_weights.copy()
    r[[0, 1]] = r[[1, 0]]
    params[0].recurrent_weights = r
    return pack(params, shape)


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_planted_gate_swap_is_detected(name):
    g = load_golden(name)
    bad = swapped_reset_update(g)
    assert not np.array_equal(bad, g["opaque"])
    y, hy, _ = run_gru(bad, shape_of(g), g["x"], g["h0"], g["seq_lengths"])
    e = max(maxerr(y, g["y"]), maxerr(hy, g["hy"]))
    print(f"\n{name}: swapped r/z gates: max |y - golden| = {e:.3e}")
    assert e > 1e-3


def test_h0_none_means_zeros_and_runs_are_deterministic():
    g = load_golden(GOLDEN_FILES[0])
    shape = shape_of(g)
    a = run_gru(g["opaque"], shape, g["x"])
    b = run_gru(g["opaque"], shape, g["x"], np.zeros_like(g["h0"]), np.full(g["x"].shape[1], g["x"].shape[0]))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = run(g)
    d = run(g)
    np.testing.assert_array_equal(c[0], d[0])


def test_float16_runs_close_to_f64():
    name = max(GOLDEN_FILES, key=lambda n: load_golden(n)["config"]["H"])
    g = load_golden(name)
    y, hy, info = run_gru(g["opaque"].astype(np.float16), shape_of(g, "float16"), g["x"], g["h0"],
                          g["seq_lengths"])
    assert y.dtype == np.float16 and info["data_type"] == "CUDNN_DATA_HALF"
    e = maxerr(y, g["y_f64"])
    print(f"\n{name}: float16 ({info['math_precision']}, {info['math_type']}) |y - y_f64| = {e:.3e}; "
          f"failed attempts: {info['math_attempts_failed']}")
    assert e < 5e-2


def test_wrong_buffer_size_is_a_clear_error():
    g = load_golden(GOLDEN_FILES[0])
    with pytest.raises(InputError, match="another shape or another cuDNN"):
        run_gru(g["opaque"][:-1], shape_of(g), g["x"], g["h0"], g["seq_lengths"])
    c = g["config"]
    other = StackShape(c["I"], c["H"] + 1, c["L"], c["bidir"], "linear")
    with pytest.raises(InputError, match="another shape"):
        run_gru(g["opaque"], other, g["x"], None, g["seq_lengths"])


def test_bad_inputs_are_input_errors():
    g = load_golden(GOLDEN_FILES[0])
    shape = shape_of(g)
    T, B, _ = g["x"].shape
    with pytest.raises(InputError, match="seq_lengths"):
        run_gru(g["opaque"], shape, g["x"], g["h0"], np.full(B, T + 1))
    with pytest.raises(InputError, match="seq_lengths"):
        run_gru(g["opaque"], shape, g["x"], g["h0"], np.zeros(B, np.int32))
    with pytest.raises(InputError, match="x must be"):
        run_gru(g["opaque"], shape, g["x"][:, :, :-1], g["h0"])
    with pytest.raises(InputError, match="h0"):
        run_gru(g["opaque"], shape, g["x"], g["h0"][:, :-1])
    with pytest.raises(GruconvError):
        run_gru(g["opaque"].astype(np.int32), shape, g["x"])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-m", "gpu", "-q", "-s", "-p", "no:cacheprovider"]))
