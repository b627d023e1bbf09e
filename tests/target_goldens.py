"""The real-cuDNN golden cases as canonical stacks, for the PyTorch and ONNX target tests.

Every ``.npz`` of ``fixtures/cudnn-golden`` (GRU) and ``fixtures/cudnn-golden-lstm`` (LSTM) is a case,
except those whose shape the canonical model cannot hold: :data:`NOT_CANONICAL` names them with the
reason, and ``test_every_golden_is_a_case`` keeps that list exact, so nothing drops out silently.
The stack is built from the golden's own canonical arrays (``W{p}_{k}``, ``b{p}_{k}``: what cuDNN was
given), not from our unpacking of its buffer, so these tests share no code with the layout module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gruconv.model.canonical import GateParams, RNNStack, StackShape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN_DIRS = (FIXTURES / "cudnn-golden", FIXTURES / "cudnn-golden-lstm")
#: golden file -> why it is not a case: LSTM with a projection (P < H); the canonical model has none.
NOT_CANONICAL = {"lstm_2l_bidir_proj.npz": "projection size 5 < hidden size 8 (canonical model has no projection)"}
ALL_FILES = sorted(p for d in GOLDEN_DIRS for p in d.glob("*.npz"))
CASES = [p for p in ALL_FILES if p.name not in NOT_CANONICAL]
TOLERANCE = 1e-5


def load_case(path: Path) -> dict:
    """``{"stack", "x", "h0", "c0", "lengths" (None unless varlen), "y", "hy", "cy", "config"}``."""
    with np.load(path) as d:
        g = {k: d[k] for k in d.files}
    c = json.loads(str(g["config"]))
    cell = "lstm" if "c0" in g else "gru"
    shape = StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", "float32", cell)
    G = shape.gates
    params = []
    for p in range(shape.num_pseudo_layers):
        w_in = None if f"W{p}_0" not in g else np.stack([g[f"W{p}_{k}"] for k in range(G)])
        params.append(GateParams(
            input_weights=w_in,
            recurrent_weights=np.stack([g[f"W{p}_{k + G}"] for k in range(G)]),
            input_bias=np.stack([g[f"b{p}_{k}"] for k in range(G)]),
            recurrent_bias=np.stack([g[f"b{p}_{k + G}"] for k in range(G)]),
        ).astype(np.float32))
    return {"stack": RNNStack(path.stem, shape, params), "x": g["x"], "h0": g["h0"], "c0": g.get("c0"),
            "lengths": g["seq_lengths"] if c.get("varlen") else None, "y": g["y"], "hy": g["hy"],
            "cy": g.get("cy"), "config": c, "file": path.name}


def max_error(case: dict, y, hy, cy) -> float:
    """Largest |difference| from cuDNN's strict-fp32 outputs over y, every final h and (LSTM) c."""
    errs = [np.abs(np.asarray(y, np.float64) - case["y"]).max(), np.abs(np.asarray(hy, np.float64) - case["hy"]).max()]
    if case["cy"] is not None:
        errs.append(np.abs(np.asarray(cy, np.float64) - case["cy"]).max())
    else:
        assert cy is None
    return float(max(errs))
