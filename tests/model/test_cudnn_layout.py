"""The cuDNN opaque layout against real cuDNN 9.19 buffers (shared/cudnn-golden), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gruconv.model.canonical import StackShape
from gruconv.model.cudnn_layout import pack, params_size, solve_shapes, unpack
from gruconv.errors import InputError


def golden_shape(g, dtype="float32") -> StackShape:
    c = g["config"]
    return StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", dtype)


def region(params, p, k):
    gp = params[p]
    if k < 3:
        return None if gp.input_weights is None else gp.input_weights[k]
    return gp.recurrent_weights[k - 3]


@pytest.mark.parametrize("key,dtype", [("opaque", "float32"), ("opaque_f64", "float64")])
def test_unpack_equals_golden_canonical_exactly(golden, key, dtype):
    shape = golden_shape(golden, dtype)
    params = unpack(golden[key], shape)
    assert params_size(shape) == golden[key].size
    for p in range(shape.num_pseudo_layers):
        for k in range(6):
            w = golden.get(f"W{p}_{k}")
            got = region(params, p, k)
            if w is None:  # skip input: cuDNN has no layer-0 input matrices
                assert k < 3 and got is None and golden["config"]["skip"]
            else:
                assert got.dtype == np.dtype(dtype)
                np.testing.assert_array_equal(got, w.astype(dtype))
            bias = params[p].input_bias[k] if k < 3 else params[p].recurrent_bias[k - 3]
            np.testing.assert_array_equal(bias, golden[f"b{p}_{k}"].astype(dtype))


@pytest.mark.parametrize("key,dtype", [("opaque", "float32"), ("opaque_f64", "float64")])
def test_pack_reproduces_golden_opaque_bytes(golden, key, dtype):
    shape = golden_shape(golden, dtype)
    params = unpack(golden[key].copy(), shape)
    assert pack(params, shape).tobytes() == golden[key].tobytes()


def test_solver_finds_every_golden_shape(golden):
    shape = golden_shape(golden)
    size = golden["opaque"].size
    assert shape in solve_shapes(size)
    hinted = solve_shapes(size, units=shape.units, num_layers=shape.num_layers,
                          bidirectional=shape.bidirectional)
    assert shape in hinted
    assert all(params_size(s) == size for s in hinted)


def test_solver_with_full_hints_is_unique():
    s = StackShape(32, 64, 3, True)
    assert solve_shapes(params_size(s), units=64, input_size=32) == [s]


def test_solver_respects_contradicting_hints():
    assert solve_shapes(294, units=8) == []


def test_unpack_rejects_wrong_size():
    with pytest.raises(InputError, match="needs 294"):
        unpack(np.zeros(293, np.float32), StackShape(5, 7))


def test_layout_catches_a_planted_swap(golden):
    """The golden comparison can fail: swapping two regions changes the unpacked weights."""
    shape = golden_shape(golden)
    params = unpack(golden["opaque"].copy(), shape)
    params[0].recurrent_weights[[0, 1]] = params[0].recurrent_weights[[1, 0]]
    assert pack(params, shape).tobytes() != golden["opaque"].tobytes()


shapes = st.builds(
    lambda I, H, L, bi, skip, dt: StackShape(H if skip else I, H, L, bi, "skip" if skip else "linear", dt),
    st.integers(1, 9), st.integers(1, 9), st.integers(1, 4), st.booleans(), st.booleans(),
    st.sampled_from(["float16", "float32", "float64"]),
)


@settings(max_examples=150, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**31 - 1))
def test_pack_unpack_roundtrip(shape, seed):
    buf = np.random.default_rng(seed).standard_normal(params_size(shape)).astype(shape.dtype)
    params = unpack(buf, shape)
    assert pack(params, shape).tobytes() == buf.tobytes()
    assert shape in solve_shapes(buf.size, dtype=shape.dtype, num_layers=shape.num_layers)
