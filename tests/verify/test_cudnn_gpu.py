"""Real cuDNN through ctypes (gruconv.verify.reference.cudnn_lib, gruconv.verify.reference.cudnn_rnn) against the cuDNN 9.19 golden files,
the float64 oracle (LSTM) and the layout module (cudnnGetRNNWeightParams, GRU and LSTM).

Every test here needs an NVIDIA GPU and libcudnn: they are marked ``gpu``
(deselected by default; run ``pytest -m gpu``) and fail with the reason
``available()`` gives wherever cuDNN cannot run (a GPU run that skipped them
would look green with the GPU hidden, issue 31).  ``available()`` is asked by a
fixture, never at import: collecting this file (in every process, ``-m 'not gpu'``
included) must not load libcudart/libcudnn or call ``cudaGetDeviceCount``.  Also
runnable as ``python3 tests/verify/test_cudnn_gpu.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

if __name__ == "__main__":  # run as a script: conftest and the support modules live in tests/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import GOLDEN_FILES, load_golden
from gruconv.model.canonical import GateParams, RNNStack, StackShape
from gruconv.model.cudnn_layout import iter_matrix_regions, pack, params_size, unpack
from gruconv.verify.reference.cudnn_lib import available, library_info
from gruconv.verify.reference.cudnn_rnn import run, weight_regions, weight_space_bytes
from gruconv.verify.reference.oracle import run_stack
from gruconv.errors import GruconvError, InputError

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cudnn")]


@pytest.fixture(scope="module")
def cudnn() -> str:
    """What :func:`available` says, once per module run; a test here cannot run without it."""
    ok, reason = available()
    assert ok, f"pytest -m gpu needs real cuDNN: {reason}"
    return reason

STRICT_TOL = 1e-6   # strict fp32 (CUDNN_FMA_MATH) against the golden strict run
F64_TOL = 1e-12     # float64 against the golden float64 run
TF32_MIN = 1e-5     # TF32 must be visibly worse than strict fp32 ...
TF32_MAX = 2e-3     # ... but still close


def shape_of(g, dtype="float32") -> StackShape:
    c = g["config"]
    return StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", dtype)


def gru_forward(opaque, shape, x, h0=None, seq_lengths=None, **kw):
    """cudnn_rnn.run for a GRU, as (y, hy, info); checks that a GRU returns no cell state."""
    y, hy, cy, info = run(opaque, shape, x, h0, seq_lengths=seq_lengths, **kw)
    assert cy is None and info["rnn_mode"] == "CUDNN_GRU" and info["cell"] == "gru"
    return y, hy, info


def run_golden(g, key="opaque", **kw):
    dtype = "float64" if key == "opaque_f64" else "float32"
    return gru_forward(g[key], shape_of(g, dtype), g["x"], g["h0"], g["seq_lengths"], **kw)


def maxerr(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def is_large(g) -> bool:
    return g["config"]["H"] >= 64


def test_library_info(cudnn):
    info = library_info()
    print(f"\n{cudnn}\n{info}")
    for key in ("gpu", "cudnn_version", "cuda_runtime_version", "driver_version", "libcudnn", "libcudart"):
        assert key in info and info[key], key
    assert info["cudnn_version"] >= 8000


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_strict_fp32_matches_golden(name):
    g = load_golden(name)
    y, hy, info = run_golden(g)
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
    y, hy, info = run_golden(g, allow_tf32=True)
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
    y, hy, info = run_golden(g, key="opaque_f64")
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
        y, hy, _ = run_golden(g, key=key, **kw)
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
    y, hy, _ = gru_forward(bad, shape_of(g), g["x"], g["h0"], g["seq_lengths"])
    e = max(maxerr(y, g["y"]), maxerr(hy, g["hy"]))
    print(f"\n{name}: swapped r/z gates: max |y - golden| = {e:.3e}")
    assert e > 1e-3


def test_h0_none_means_zeros_and_runs_are_deterministic():
    g = load_golden(GOLDEN_FILES[0])
    shape = shape_of(g)
    a = gru_forward(g["opaque"], shape, g["x"])
    b = gru_forward(g["opaque"], shape, g["x"], np.zeros_like(g["h0"]), np.full(g["x"].shape[1], g["x"].shape[0]))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = run_golden(g)
    d = run_golden(g)
    np.testing.assert_array_equal(c[0], d[0])


def test_float16_runs_close_to_f64():
    name = max(GOLDEN_FILES, key=lambda n: load_golden(n)["config"]["H"])
    g = load_golden(name)
    y, hy, info = gru_forward(g["opaque"].astype(np.float16), shape_of(g, "float16"), g["x"], g["h0"],
                          g["seq_lengths"])
    assert y.dtype == np.float16 and info["data_type"] == "CUDNN_DATA_HALF"
    e = maxerr(y, g["y_f64"])
    print(f"\n{name}: float16 ({info['math_precision']}, {info['math_type']}) |y - y_f64| = {e:.3e}; "
          f"failed attempts: {info['math_attempts_failed']}")
    assert e < 5e-2


def test_wrong_buffer_size_is_a_clear_error():
    g = load_golden(GOLDEN_FILES[0])
    with pytest.raises(InputError, match="another shape or another cuDNN"):
        gru_forward(g["opaque"][:-1], shape_of(g), g["x"], g["h0"], g["seq_lengths"])
    c = g["config"]
    other = StackShape(c["I"], c["H"] + 1, c["L"], c["bidir"], "linear")
    with pytest.raises(InputError, match="another shape"):
        gru_forward(g["opaque"], other, g["x"], None, g["seq_lengths"])


def test_bad_inputs_are_input_errors():
    g = load_golden(GOLDEN_FILES[0])
    shape = shape_of(g)
    T, B, _ = g["x"].shape
    with pytest.raises(InputError, match="seq_lengths"):
        gru_forward(g["opaque"], shape, g["x"], g["h0"], np.full(B, T + 1))
    with pytest.raises(InputError, match="seq_lengths"):
        gru_forward(g["opaque"], shape, g["x"], g["h0"], np.zeros(B, np.int32))
    with pytest.raises(InputError, match="x must be"):
        gru_forward(g["opaque"], shape, g["x"][:, :, :-1], g["h0"])
    with pytest.raises(InputError, match="h0"):
        gru_forward(g["opaque"], shape, g["x"], g["h0"][:, :-1])
    with pytest.raises(GruconvError):
        gru_forward(g["opaque"].astype(np.int32), shape, g["x"])
    with pytest.raises(InputError, match="no cell state"):
        run(g["opaque"], shape, g["x"], g["h0"], g["h0"])


# ----------------------------------------------------------------------------- LSTM against the oracle

LSTM_SHAPES = [  # (input_size, units, layers, bidirectional, input_mode)
    (5, 7, 1, False, "linear"),
    (4, 6, 2, False, "linear"),
    (3, 5, 2, True, "linear"),
    (6, 6, 2, False, "skip"),
    (8, 8, 1, True, "skip"),
    (12, 24, 3, True, "linear"),
    (8, 128, 1, False, "linear"),
]
LSTM_F64_TOL = 1e-12       # cuDNN float64 against the float64 oracle (golden files: <= 3.3e-16)
LSTM_STRICT_TOL = 2e-6     # strict fp32 against the float64 oracle (golden files: <= 2.6e-7)


def lstm_id(c) -> str:
    I, H, L, bi, mode = c
    return f"lstm_{L}l_{'bi' if bi else 'uni'}_{I}x{H}_{mode}"


def random_stack(shape: StackShape, seed: int = 0) -> RNNStack:
    """Canonical weights of any cell, scaled like Glorot/orthogonal so that states stay O(1)."""
    rng = np.random.default_rng(seed)
    G, H = shape.gates, shape.units
    params = []
    for layer in range(shape.num_layers):
        n_in = shape.layer_input_size(layer)
        for _ in range(shape.num_directions):
            w = rng.uniform(-1, 1, (G, H, n_in)) * np.sqrt(3.0 / (n_in + H)) if shape.has_input_weights(layer) else None
            params.append(GateParams(
                None if w is None else w.astype(shape.dtype),
                (rng.uniform(-1, 1, (G, H, H)) * np.sqrt(3.0 / (2 * H))).astype(shape.dtype),
                rng.uniform(-0.3, 0.3, (G, H)).astype(shape.dtype),
                rng.uniform(-0.3, 0.3, (G, H)).astype(shape.dtype)))
    return RNNStack(f"random {shape.describe()}", shape, params)


def lstm_case(c, seed: int = 0, T: int = 9, B: int = 3, varlen: bool = True):
    """(float32 stack, x, h0, c0, seq_lengths) for one LSTM configuration."""
    I, H, L, bi, mode = c
    shape = StackShape(I, H, L, bi, mode, "float32", "lstm")
    stack = random_stack(shape, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.uniform(-1, 1, (T, B, I)).astype(np.float32)
    h0 = rng.uniform(-0.5, 0.5, (shape.num_pseudo_layers, B, H)).astype(np.float32)
    c0 = rng.uniform(-0.5, 0.5, (shape.num_pseudo_layers, B, H)).astype(np.float32)
    lengths = np.array([T, max(1, T - 4), max(1, T // 2)][:B] + [T] * max(0, B - 3), np.int32) if varlen else None
    return stack, x, h0, c0, lengths


def f64_shape(shape: StackShape) -> StackShape:
    return StackShape(shape.input_size, shape.units, shape.num_layers, shape.bidirectional, shape.input_mode,
                      "float64", shape.cell)


@pytest.mark.parametrize("c", LSTM_SHAPES, ids=lstm_id)
def test_lstm_float64_matches_oracle(c):
    stack, x, h0, c0, lengths = lstm_case(c)
    oy, ohy, ocy = run_stack(stack, x, h0, lengths, c0)
    opaque = pack(stack.params, stack.shape, np.float64)
    y, hy, cy, info = run(opaque, f64_shape(stack.shape), x, h0, c0, lengths)
    assert info["rnn_mode"] == "CUDNN_LSTM" and info["cell"] == "lstm" and info["data_type"] == "CUDNN_DATA_DOUBLE"
    assert y.dtype == hy.dtype == cy.dtype == np.float64
    assert y.shape == oy.shape and hy.shape == ohy.shape and cy.shape == ocy.shape
    e = max(maxerr(y, oy), maxerr(hy, ohy), maxerr(cy, ocy))
    print(f"\n{lstm_id(c)}: f64 |y,hy,cy - oracle| = {e:.3e} ({info['math_type']})")
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(hy)) and np.all(np.isfinite(cy))
    assert e <= LSTM_F64_TOL


@pytest.mark.parametrize("c", LSTM_SHAPES, ids=lstm_id)
def test_lstm_strict_fp32_matches_oracle(c):
    stack, x, h0, c0, lengths = lstm_case(c, seed=1)
    oy, ohy, ocy = run_stack(stack, x, h0, lengths, c0)
    y, hy, cy, info = run(pack(stack.params, stack.shape), stack.shape, x, h0, c0, lengths)
    assert info["math_type"] == "CUDNN_FMA_MATH" and info["data_type"] == "CUDNN_DATA_FLOAT"
    assert y.dtype == hy.dtype == cy.dtype == np.float32
    ey, ehy, ecy = maxerr(y, oy), maxerr(hy, ohy), maxerr(cy, ocy)
    print(f"\n{lstm_id(c)}: strict |y - oracle| = {ey:.3e}, |hy| {ehy:.3e}, |cy| {ecy:.3e}")
    assert max(ey, ehy, ecy) <= LSTM_STRICT_TOL
    # Outputs past a sequence's length are the padding fill; the last valid step is not.
    for b, n in enumerate(lengths):
        assert np.all(y[n:, b, :] == 0) and np.any(y[n - 1, b, :] != 0)


def test_lstm_tf32_runs_and_c0_matters():
    c = (12, 24, 3, True, "linear")
    stack, x, h0, c0, lengths = lstm_case(c, seed=2, T=20, B=4)
    opaque = pack(stack.params, stack.shape)
    oy, ohy, ocy = run_stack(stack, x, h0, lengths, c0)
    y, hy, cy, info = run(opaque, stack.shape, x, h0, c0, lengths, allow_tf32=True)
    assert info["math_type"] == "CUDNN_DEFAULT_MATH" and info["allow_tf32"] is True
    e = max(maxerr(y, oy), maxerr(hy, ohy), maxerr(cy, ocy))
    print(f"\nLSTM tf32 |y,hy,cy - oracle| = {e:.3e}")
    assert e <= TF32_MAX
    # c0 None means zeros, and a given c0 is really passed (the first step's output depends on it).
    z = run(opaque, stack.shape, x, h0, None, lengths)
    zz = run(opaque, stack.shape, x, h0, np.zeros_like(c0), lengths)
    for a, b in zip(z[:3], zz[:3]):
        np.testing.assert_array_equal(a, b)
    strict = run(opaque, stack.shape, x, h0, c0, lengths)
    assert maxerr(z[0][0], strict[0][0]) > 1e-2


def test_lstm_planted_gate_swap_is_detected():
    """Swapping the input and forget gates' input matrices must show: cuDNN's gate order is i, f, c, o."""
    c = (5, 7, 1, False, "linear")
    stack, x, h0, c0, lengths = lstm_case(c, seed=3)
    good = pack(stack.params, stack.shape)
    w = stack.params[0].input_weights.copy()
    w[[0, 1]] = w[[1, 0]]
    stack.params[0].input_weights = w
    y_bad, _, cy_bad, _ = run(pack(stack.params, stack.shape), stack.shape, x, h0, c0, lengths)
    y, _, cy, _ = run(good, stack.shape, x, h0, c0, lengths)
    e = max(maxerr(y, y_bad), maxerr(cy, cy_bad))
    print(f"\nLSTM swapped i/f gates: max |y,cy difference| = {e:.3e}")
    assert e > 1e-3


def test_lstm_bad_inputs_are_input_errors():
    stack, x, h0, c0, lengths = lstm_case((5, 7, 1, False, "linear"))
    opaque = pack(stack.params, stack.shape)
    with pytest.raises(InputError, match="c0"):
        run(opaque, stack.shape, x, h0, c0[:, :-1])
    with pytest.raises(InputError, match="another shape or another cuDNN"):
        run(opaque[:-1], stack.shape, x, h0, c0)
    gru = StackShape(5, 7, 1, False, "linear", "float32", "gru")
    with pytest.raises(InputError, match="another shape"):  # an LSTM buffer is not a GRU's
        run(opaque, gru, x, h0)


# LSTM golden files (scripts/make_lstm_golden.py, real cuDNN 9.19), where this checkout has them.
LSTM_GOLDEN_DIR = next((d for d in (Path(__file__).resolve().parents[2] / "fixtures" / "cudnn-golden-lstm",
                                    Path(__file__).resolve().parents[3] / "shared" / "cudnn-golden-lstm")
                        if d.is_dir() and any(d.glob("*.npz"))), None)


def _lstm_golden_config(path: Path) -> dict:
    with np.load(path) as d:
        return json.loads(str(d["config"]))


def _stack_shape(c: dict) -> StackShape:
    return StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", "float32", "lstm")


#: Split by what gruconv reads: a projected LSTM (cuDNN's P < H, no Keras counterpart) must be refused, the
#: rest must match cuDNN exactly.
_LSTM_CONFIGS = {p.name: _lstm_golden_config(p) for p in LSTM_GOLDEN_DIR.glob("*.npz")} if LSTM_GOLDEN_DIR else {}
LSTM_GOLDEN = sorted(n for n, c in _LSTM_CONFIGS.items() if c.get("P", c["H"]) == c["H"])
LSTM_PROJECTED = sorted(n for n, c in _LSTM_CONFIGS.items() if c.get("P", c["H"]) != c["H"])


def load_lstm_golden(name: str):
    with np.load(LSTM_GOLDEN_DIR / name) as d:
        g = {k: d[k] for k in d.files}
    g["config"] = json.loads(str(g["config"]))
    return g, _stack_shape(g["config"])


@pytest.mark.skipif(not LSTM_PROJECTED, reason="no projected LSTM golden file (fixtures/cudnn-golden-lstm)")
@pytest.mark.parametrize("name", LSTM_PROJECTED or ["none"])
def test_a_projected_lstm_buffer_is_refused_as_another_shape(name):
    """cuDNN's projection (``P < H``, real cuDNN 9.19 buffer) has no Keras LSTM counterpart: the buffer read
    as the unprojected stack of the same I/H/L must be an input error, never weights cut to fit."""
    g, shape = load_lstm_golden(name)
    with pytest.raises(InputError, match="needs"):
        unpack(g["opaque"], shape)
    with pytest.raises(InputError, match="another shape"):  # zero states: the golden's h0 is P wide
        run(g["opaque"], shape, g["x"], None, None, g["seq_lengths"])


@pytest.mark.skipif(not LSTM_GOLDEN, reason="no LSTM golden files (fixtures/cudnn-golden-lstm)")
@pytest.mark.parametrize("name", LSTM_GOLDEN or ["none"])
def test_lstm_matches_lstm_golden(name):
    g, shape = load_lstm_golden(name)
    feed = (g["x"], g["h0"], g["c0"], g["seq_lengths"])
    y, hy, cy, info = run(g["opaque"], shape, *feed)
    es = max(maxerr(y, g["y"]), maxerr(hy, g["hy"]), maxerr(cy, g["cy"]))
    y64, hy64, cy64, _ = run(g["opaque"].astype(np.float64), shape, *feed)
    e64 = max(maxerr(y64, g["y_f64"]), maxerr(hy64, g["hy_f64"]), maxerr(cy64, g["cy_f64"]))
    # The layout module against the buffer cuDNN itself filled (canonical arrays W{p}_{k}, b{p}_{k}).
    params = unpack(g["opaque"], shape)
    G = shape.gates
    for p, gp in enumerate(params):
        for k in range(G):
            if gp.input_weights is not None:
                np.testing.assert_array_equal(gp.input_weights[k], g[f"W{p}_{k}"])
            np.testing.assert_array_equal(gp.recurrent_weights[k], g[f"W{p}_{k + G}"])
            np.testing.assert_array_equal(gp.input_bias[k], g[f"b{p}_{k}"])
            np.testing.assert_array_equal(gp.recurrent_bias[k], g[f"b{p}_{k + G}"])
    print(f"\n{name}: strict |y,hy,cy - golden| = {es:.3e}, f64 |y,hy,cy - golden f64| = {e64:.3e}")
    assert es <= STRICT_TOL and e64 <= F64_TOL


# ----------------------------------------------------------------------------- the layout module vs cuDNN

REGION_SHAPES = [  # (input_size, units, layers, bidirectional, input_mode)
    (5, 7, 1, False, "linear"),
    (3, 5, 2, True, "linear"),
    (6, 6, 2, False, "skip"),
    (8, 8, 1, True, "skip"),
    (8, 8, 3, True, "skip"),
    (12, 24, 3, True, "linear"),
    (3, 1, 3, False, "linear"),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("c", REGION_SHAPES, ids=lambda c: f"{c[2]}l_{'bi' if c[3] else 'uni'}_{c[0]}x{c[1]}_{c[4]}")
def test_weight_regions_match_layout_module(c, cell, dtype):
    shape = StackShape(*c, dtype, cell)
    itemsize = np.dtype(dtype).itemsize
    regions = weight_regions(shape)
    got = [(r.pseudo_layer, r.kind, r.lin_layer_id, r.byte_offset, r.shape) for r in regions]
    want = [(p, kind, lin, off * itemsize, tuple(dims)) for p, kind, lin, off, dims in iter_matrix_regions(shape)]
    assert got == want, f"{shape.describe()}: cuDNN's regions differ from cudnn_layout's"
    # Every linLayerID 0..2G-1 of every pseudo-layer has a bias; skip input drops layer 0's input matrices only.
    G = shape.gates
    assert len([r for r in regions if r.kind == "bias"]) == shape.num_pseudo_layers * 2 * G
    missing = {(p, lin) for p in range(shape.num_pseudo_layers) for lin in range(2 * G)} - {
        (r.pseudo_layer, r.lin_layer_id) for r in regions if r.kind == "matrix"}
    assert missing == ({(p, lin) for p in range(shape.num_directions) for lin in range(G)}
                       if shape.input_mode == "skip" else set())
    # The regions tile the weight space: no gap, no padding, nothing past the end.
    end = 0
    for r in regions:
        assert r.byte_offset == end and r.data_type == ("CUDNN_DATA_FLOAT" if dtype == "float32"
                                                        else "CUDNN_DATA_DOUBLE")
        end += r.nbytes
    assert end == weight_space_bytes(shape) == params_size(shape) * itemsize


def test_weight_regions_of_the_gru_golden_shapes():
    for name in GOLDEN_FILES:
        shape = shape_of(load_golden(name))
        got = [(r.pseudo_layer, r.kind, r.lin_layer_id, r.byte_offset // 4, r.shape) for r in weight_regions(shape)]
        assert got == [(p, k, lin, off, tuple(d)) for p, k, lin, off, d in iter_matrix_regions(shape)], name


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-m", "gpu", "-q", "-s", "-p", "no:cacheprovider"]))
