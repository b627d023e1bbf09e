"""The ctypes cuDNN binding where no GPU is needed: availability probing, input checks, cell modes.

The numerics need a GPU (``tests/verify/test_cudnn_gpu.py``, marked ``gpu``); everything here runs anywhere,
including on a GPU machine (the failure paths are forced by resetting the loader's cached state).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from gruconv.verify.reference import cudnn_lib, cudnn_rnn
from gruconv.model.canonical import CELLS, StackShape
from gruconv.model.cudnn_layout import params_size
from gruconv.errors import InputError, ReferenceUnavailable

GRU = StackShape(5, 7, 2, True, "linear", "float32", "gru")
LSTM = StackShape(5, 7, 2, True, "linear", "float32", "lstm")
T, B = 4, 3


def feed(shape: StackShape, dtype=np.float32) -> dict:
    states = (shape.num_pseudo_layers, B, shape.units)
    return {"opaque": np.zeros(params_size(shape), dtype), "shape": shape,
            "x": np.zeros((T, B, shape.input_size), dtype), "h0": np.zeros(states, dtype),
            "c0": np.zeros(states, dtype) if shape.cell == "lstm" else None,
            "seq_lengths": np.array([T, 2, 1], np.int32)}


@pytest.fixture
def fresh_loader(monkeypatch):
    """A loader that has not probed yet (restored afterwards, so a real GPU session is untouched)."""
    monkeypatch.setattr(cudnn_lib, "_STATE", None)
    monkeypatch.setattr(cudnn_lib, "_STATE_ERROR", None)
    return monkeypatch


def one_line(text: str) -> bool:
    return bool(text) and "\n" not in text and "Traceback" not in text


# ----------------------------------------------------------------------------- availability

def test_available_returns_a_bool_and_a_clean_reason():
    ok, reason = cudnn_lib.available()
    assert isinstance(ok, bool) and isinstance(reason, str) and one_line(reason)
    assert cudnn_lib.available() == (ok, reason)  # probed once, cached


def test_missing_cudart_is_a_reason_not_an_exception(fresh_loader, tmp_path):
    missing = str(tmp_path / "libcudart.so.99")
    fresh_loader.setenv(cudnn_lib.ENV_LIBCUDART, missing)
    ok, reason = cudnn_lib.available()
    assert ok is False and one_line(reason) and missing in reason
    with pytest.raises(ReferenceUnavailable, match="libcudart.so.99"):
        cudnn_lib.library_info()
    # A valid call then fails for the same reason, as ReferenceUnavailable: never a crash.
    f = feed(LSTM)
    with pytest.raises(ReferenceUnavailable):
        cudnn_rnn.run(f.pop("opaque"), f.pop("shape"), **f)
    with pytest.raises(ReferenceUnavailable):
        cudnn_rnn.weight_regions(LSTM)


def test_not_linux_is_a_reason(fresh_loader):
    fresh_loader.setattr(cudnn_lib.sys, "platform", "darwin")
    ok, reason = cudnn_lib.available()
    assert ok is False and "Linux only" in reason and one_line(reason)


def test_surprises_while_loading_are_a_reason(fresh_loader):
    def boom(self):
        raise OSError("ctypes surprise")

    fresh_loader.setattr(cudnn_lib.Libraries, "load_cudart", boom)
    ok, reason = cudnn_lib.available()
    assert ok is False and reason == "loading cuDNN failed: OSError: ctypes surprise"


def test_empty_library_env_path_is_ignored(fresh_loader):
    fresh_loader.setenv(cudnn_lib.ENV_LIBCUDNN, "")
    assert all(not src.startswith("env") for src, _ in cudnn_lib._cudnn_candidates())


# ----------------------------------------------------------------------------- input checks

@pytest.mark.parametrize("shape", [GRU, LSTM], ids=["gru", "lstm"])
def test_valid_inputs_pass_the_checks(shape):
    f = feed(shape)
    inp = cudnn_rnn.check_inputs(**f)
    assert inp.T == T and inp.B == B and inp.dtype == np.float32
    assert inp.opaque.flags.c_contiguous and inp.lengths.dtype == np.int32
    if shape.cell == "lstm":
        assert inp.c0.shape == f["h0"].shape
        assert cudnn_rnn.check_inputs(f["opaque"], shape, f["x"]).c0.shape == f["h0"].shape  # None -> zeros
    else:
        assert inp.c0 is None


def test_states_take_the_buffer_dtype():
    f = feed(LSTM)
    inp = cudnn_rnn.check_inputs(f["opaque"].astype(np.float64), LSTM, f["x"], f["h0"], f["c0"])
    assert inp.x.dtype == inp.h0.dtype == inp.c0.dtype == np.float64
    assert inp.lengths.tolist() == [T] * B


def _bad(base, **change):
    f = feed(base)
    f.update(change)
    return f


BAD = [
    ("shape", lambda: _bad(GRU, shape=(5, 7)), "shape must be a gruconv.model.canonical.StackShape"),
    ("opaque int", lambda: _bad(GRU, opaque=np.zeros(params_size(GRU), np.int32)), "opaque buffer must be float"),
    ("x rank", lambda: _bad(GRU, x=np.zeros((T, 5))), r"x must be time-major \[T, B, 5\]"),
    ("x width", lambda: _bad(LSTM, x=np.zeros((T, B, 4))), "x must be time-major"),
    ("x empty", lambda: _bad(GRU, x=np.zeros((0, B, 5))), "x must be time-major"),
    ("x ints", lambda: _bad(GRU, x=np.zeros((T, B, 5), np.int64)), "x must be floating point"),
    ("h0 shape", lambda: _bad(GRU, h0=np.zeros((2, B, 7))), r"h0 must have shape \[layers\*dirs, B, H\]"),
    ("c0 shape", lambda: _bad(LSTM, c0=np.zeros((4, B, 6))), r"c0 must have shape \[layers\*dirs, B, H\]"),
    ("c0 for a GRU", lambda: _bad(GRU, c0=np.zeros((4, B, 7))), "a GRU has no cell state"),
    ("lengths count", lambda: _bad(LSTM, seq_lengths=np.array([T, T])), "seq_lengths must be 3 integers"),
    ("lengths floats", lambda: _bad(GRU, seq_lengths=np.array([1.0, 2.0, 3.0])), "seq_lengths must be 3 integers"),
    ("lengths zero", lambda: _bad(GRU, seq_lengths=np.array([T, 0, 1])), r"seq_lengths must lie in 1\.\.T=4"),
    ("lengths long", lambda: _bad(LSTM, seq_lengths=np.array([T + 1, 1, 1])), r"seq_lengths must lie in 1\.\.T=4"),
]


@pytest.mark.parametrize("make,match", [(m, r) for _, m, r in BAD], ids=[n for n, _, _ in BAD])
def test_wrong_inputs_are_one_line_input_errors(make, match):
    f = make()
    with pytest.raises(InputError, match=match) as e:
        cudnn_rnn.check_inputs(**f)
    assert one_line(str(e.value))
    # run() checks before it loads anything: the same error with or without a GPU.
    with pytest.raises(InputError, match=match):
        cudnn_rnn.run(f.pop("opaque"), f.pop("shape"), **f)


def test_seq_lengths_is_keyword_or_sixth_positional():
    """run(opaque, shape, x, h0, c0, seq_lengths): lengths passed where c0 goes are refused, not misread."""
    f = feed(GRU)
    with pytest.raises(InputError, match="no cell state"):
        cudnn_rnn.run(f["opaque"], GRU, f["x"], f["h0"], f["seq_lengths"])


# ----------------------------------------------------------------------------- cell modes

def test_cudnn_mode_enum_values():
    # cudnn_adv.h: CUDNN_RNN_RELU = 0, CUDNN_RNN_TANH = 1, CUDNN_LSTM = 2, CUDNN_GRU = 3
    m = cudnn_rnn
    assert (m.CUDNN_RNN_RELU, m.CUDNN_RNN_TANH, m.CUDNN_LSTM, m.CUDNN_GRU) == (0, 1, 2, 3)


def test_mode_is_chosen_per_cell():
    assert cudnn_rnn.rnn_mode(GRU) == cudnn_rnn.CUDNN_GRU
    assert cudnn_rnn.rnn_mode(LSTM) == cudnn_rnn.CUDNN_LSTM
    assert cudnn_rnn.rnn_mode("lstm") == cudnn_rnn.CUDNN_LSTM
    assert set(cudnn_rnn.MODES) == set(CELLS), "every cell of the cell table needs a cuDNN mode"
    with pytest.raises(InputError, match="no cuDNN RNN mode for cell 'rnn_tanh'"):
        cudnn_rnn.rnn_mode("rnn_tanh")


def test_math_candidates_never_swap_strict_and_tf32():
    strict = cudnn_rnn._math_candidates(np.dtype(np.float32), False)
    tf32 = cudnn_rnn._math_candidates(np.dtype(np.float32), True)
    assert [c[2] for c in strict] == [cudnn_rnn.CUDNN_FMA_MATH]
    assert [c[2] for c in tf32] == [cudnn_rnn.CUDNN_DEFAULT_MATH]
    assert all(c[0] == cudnn_rnn.CUDNN_DATA_DOUBLE for c in cudnn_rnn._math_candidates(np.dtype(np.float64), False))
    assert cudnn_rnn._math_candidates(np.dtype(np.float16), False)[0][:2] == (cudnn_rnn.CUDNN_DATA_HALF,
                                                                               cudnn_rnn.CUDNN_DATA_FLOAT)


def test_weight_region_shape_drops_descriptor_padding():
    m = cudnn_rnn.WeightRegion(0, "matrix", 4, 0, 4 * 7 * 7, (1, 7, 7), (49, 7, 1), "CUDNN_DATA_FLOAT")
    b = cudnn_rnn.WeightRegion(0, "bias", 4, 0, 4 * 7, (1, 7, 1), (7, 1, 1), "CUDNN_DATA_FLOAT")
    one = cudnn_rnn.WeightRegion(0, "matrix", 0, 0, 4 * 3, (1, 1, 3), (3, 3, 1), "CUDNN_DATA_FLOAT")
    assert (m.shape, b.shape, one.shape) == ((7, 7), (7,), (1, 3))


# ----------------------------------------------------------------------------- module hygiene

def test_the_old_module_is_gone():
    assert importlib.util.find_spec("gruconv.cudnn_ctypes") is None


def test_binding_imports_no_framework():
    code = ("import sys; import gruconv.verify.reference.cudnn_rnn, gruconv.verify.reference.cudnn_lib; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
