"""The float64 oracle reproduces cuDNN's own float64 run on every golden file."""

from __future__ import annotations

import numpy as np

from gruconv.model.canonical import RNNStack
from gruconv.model.cudnn_layout import unpack
from gruconv.verify.reference.oracle import run_stack

from test_cudnn_layout import golden_shape


def test_oracle_matches_cudnn_float64(golden):
    shape = golden_shape(golden)
    stack = RNNStack("golden", shape, unpack(golden["opaque"], shape))
    y, hy, _ = run_stack(stack, golden["x"], golden["h0"], golden["seq_lengths"])
    assert np.abs(y - golden["y_f64"]).max() < 1e-13
    assert np.abs(hy - golden["hy_f64"]).max() < 1e-13
    # strict-fp32 cuDNN sits within 3e-7 of float64 (README of the golden files)
    assert np.abs(y - golden["y"]).max() < 1e-6


def test_oracle_detects_swapped_gates(golden):
    shape = golden_shape(golden)
    params = unpack(golden["opaque"].copy(), shape)
    params[-1].recurrent_bias[[0, 1]] = params[-1].recurrent_bias[[1, 0]]
    y, hy, _ = run_stack(RNNStack("bad", shape, params), golden["x"], golden["h0"], golden["seq_lengths"])
    assert np.abs(hy - golden["hy_f64"]).max() > 1e-4


def test_golden_copy_is_the_shared_ground_truth():
    """fixtures/cudnn-golden must be byte for byte shared/cudnn-golden (where a checkout has it)."""
    import hashlib

    from conftest import FIXTURES, ROOT

    shared = ROOT.parent / "shared" / "cudnn-golden"
    if not shared.is_dir():  # an sdist or a lone clone: the copy is all there is
        return
    names = sorted(p.name for p in shared.iterdir())
    assert names == sorted(p.name for p in (FIXTURES / "cudnn-golden").iterdir())
    for n in names:
        digest = [hashlib.sha256((d / n).read_bytes()).hexdigest() for d in (shared, FIXTURES / "cudnn-golden")]
        assert digest[0] == digest[1], n
