"""TF 1.x cudnn_rnn checkpoints, GRU and LSTM: stack discovery, weights, conversion and parity.

One module for both cells (issue #28 item 6: it was ``test_tf1_checkpoint.py`` for CudnnGRU and
``test_tf1_lstm.py`` for CudnnLSTM).  Every fixture in ``fixtures/tf1`` (CudnnGRU) and
``fixtures/tf1_lstm`` (CudnnLSTM, real cuDNN 9.19 weights) -- each directory's ``manifest.json``
says what it holds -- is read, checked against the golden cuDNN weights it was made from, converted
to ``.keras``, loaded by plain ``keras.saving.load_model`` and run on the CPU against cuDNN's own
outputs (``y``/``hy``, and ``cy`` for LSTM: strict fp32 and float64) and the float64 oracle.  Those
tests are parametrized by cell (ids ``gru-CASE`` / ``lstm-CASE``); a test that only makes sense for
one cell's checkpoints (crafted GRU checkpoints, the LSTM gate order, ...) is a plain test naming its
directory (``TF1`` / ``TF1_LSTM``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, ROOT, load_golden
from gruconv import api, report
from gruconv.errors import InputError, OutputError, UnsupportedError, UsageError
from gruconv.model.canonical import StackShape
from gruconv.options import Options
from gruconv.readers import tf1 as _t1
from gruconv.readers import tfbundle
from gruconv.readers.tf1 import cells, names
from gruconv.readers.tf1 import reading as _t1_reading
from gruconv.verify.reference.oracle import run_stack
from gruconv.writers import rest_npz


class _Verbs:
    """The TF1 reader's verbs, called from a path as :mod:`gruconv.api` calls them (``convert``: the api's)."""

    def __getattr__(self, name):  # everything else: the package's own function (or a module's helper)
        for m in (_t1, _t1_reading):
            if hasattr(m, name):
                return getattr(m, name)
        raise AttributeError(name)

    read = staticmethod(_t1.read)

    @staticmethod
    def inspect(path, **kw):
        return _t1.inspect(_t1.read(path, **kw))

    @staticmethod
    def convert(path, out, **kw):  # read -> plan -> write, as the CLI does (gruconv.api.convert)
        from gruconv import api

        return api.convert(path, Path(out), Options.of(**kw))


t1 = _Verbs()


TF1 = FIXTURES / "tf1"
TF1_LSTM = FIXTURES / "tf1_lstm"
DIRS = {"gru": TF1, "lstm": TF1_LSTM}
GOLDEN_LSTM = FIXTURES / "cudnn-golden-lstm"
MANIFESTS = {cell: json.loads((d / "manifest.json").read_text())["cases"] for cell, d in DIRS.items()}
MANIFEST = MANIFESTS["gru"]
CASES = sorted(MANIFEST)
#: Gates per cell (cuDNN: matrices W0..W{G-1} input side, W{G}..W{2G-1} recurrent side, biases alike).
GATES = {"gru": 3, "lstm": 4}
#: Where TF 1.5+ stores b_W + b_R summed (on the input side): GRU r and z (the candidate gate's two
#: biases stay apart, ``candidate/*_projection/bias``), every LSTM gate.
SUMMED_GATES = {"gru": (0, 1), "lstm": (0, 1, 2, 3)}
#: The state inputs of layer 0, forward, in a converted model with ``--initial-state``.
STATE_INPUTS = {"gru": ["initial_state_l0_fw"], "lstm": ["initial_state_l0_fw_h", "initial_state_l0_fw_c"]}

#: Hints a user must give where the checkpoint stores no shape (or, LSTM, no cell).
HINTS = {
    "gru": {
        "tf14_opaque_only": {"variable": "encoder/cudnn_params", "num_units": 7, "input_size": 5},
        "opaque_only_skip_uni": {"input_mode": "skip"},
        "opaque_only_skip_bidir": {"input_mode": "skip"},
    },
    "lstm": {
        "tf14_opaque_only": {"variable": "decoder/lstm_params", "cell": "lstm", "num_units": 7, "input_size": 5},
        "opaque_only_skip_uni": {"input_mode": "skip"},
        "opaque_only_skip_bidir": {"input_mode": "skip", "num_units": 8},
    },
}
#: Expected "defined by" text (CheckpointStack.source), by the stack's style.  (The TF 1.3 bias halves
#: are named ``bias_cudnn 0`` for GRU, ``bias_cudnn_0`` for LSTM: TensorFlow's own names.)
SOURCE = {
    "gru": {
        "1.5": "canonical tensors (TF 1.5+ CudnnGRU layer)",
        "1.3": "canonical tensors (TF 1.3 RNNParamsSaveable, unsummed biases from 'bias_cudnn 0/1')",
    },
    "lstm": {
        "1.5": "canonical tensors (TF 1.5+ CudnnLSTM layer)",
        "1.4": "canonical tensors (TF 1.4+ CudnnLSTMSaveable)",
        "1.3": "canonical tensors (TF 1.3 RNNParamsSaveable, unsummed biases from 'bias_cudnn_0/1')",
    },
    "opaque": "opaque buffer (cuDNN 9.19 layout), shape from hints",
}
TOL = 1e-5
#: float16: weights, inputs and every step are rounded to float16 (eps 9.8e-4): a
#: state in [-1, 1] carries ~5e-4 rounding per step, which accumulates over the
#: 6 steps; measured 8.9e-4 (vs float64 of the same float16 weights and inputs) and
#: 8.7e-4 (vs cuDNN's float32 run of the unrounded weights), so 3e-3 leaves ~3x room.
TOL_F16 = 3e-3


def _cases(skip=None) -> list:
    """Every (cell, case) of both fixture directories but ``skip[cell]``, with ids ``cell-case``."""
    skip = skip or {}
    return [pytest.param(cell, case, id=f"{cell}-{case}") for cell in DIRS for case in sorted(MANIFESTS[cell])
            if case not in skip.get(cell, ())]


def _shape(d: dict) -> StackShape:
    return StackShape(**{k: v for k, v in d.items() if k != "tf_input_mode"})


def _read(case, cell="gru", **kw):
    kw.setdefault("hints", HINTS[cell].get(case))
    return t1.read(DIRS[cell] / case, **kw)


def _convert(case, out, cell="gru", **kw):
    kw.setdefault("hints", HINTS[cell].get(case))
    return t1.convert(DIRS[cell] / case, out, **kw)


def _golden(cell, name) -> dict:
    """A golden cuDNN run: ``fixtures/cudnn-golden`` (GRU, conftest's) or ``fixtures/cudnn-golden-lstm``."""
    if cell == "gru":
        return load_golden(name)
    with np.load(GOLDEN_LSTM / name) as z:
        return {k: z[k] for k in z.files}


# --------------------------------------------------------------------------- sniff


def test_sniff(tmp_path):
    d = TF1 / "layer_uni"
    assert t1.sniff(d)
    assert t1.sniff(d / "model.ckpt.index")
    assert t1.sniff(d / "model.ckpt.data-00000-of-00001")
    assert t1.sniff(d / "model.ckpt")
    assert not t1.sniff(FIXTURES / "keras" / "sequential.h5")
    assert not t1.sniff(tmp_path)                          # empty directory
    assert not t1.sniff(tmp_path / "missing")
    fake = tmp_path / "x.index"
    fake.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))  # HDF5 named .index
    assert not t1.sniff(fake)
    (tmp_path / "junk.index").write_bytes(bytes(100))     # no SSTable magic
    assert not t1.sniff(tmp_path / "junk.index")
    assert not t1.sniff("\0bad")


# --------------------------------------------------------------------------- discovery


@pytest.mark.parametrize("cell, case", _cases())
def test_stacks_found(cell, case):
    m = MANIFESTS[cell][case]
    doc = _read(case, cell)
    assert len(doc.stacks) == len(m["stacks"])
    # natural order of the scopes (creation order: cudnn_lstm before cudnn_lstm_1 before cudnn_lstm_10)
    assert [e.scope for e in doc.stacks] == sorted((s["scope"] for s in m["stacks"]), key=names.natural_key)
    by_scope = {e.scope: e for e in doc.stacks}
    for ms in m["stacks"]:
        e = by_scope[ms["scope"]]
        assert e.shape == _shape(ms["shape"])
        assert {k: v for k, v in ms["shape"].items() if k != "tf_input_mode"}.items() <= e.shape.to_dict().items()
        assert e.shape.cell == cell
        # a user-named buffer (tf14_opaque_only) stores no cell: the stack's is the --cell hint, if any
        assert e.cell == (HINTS[cell][case].get("cell") if case == "tf14_opaque_only" else cell)
        assert e.opaque_key == (ms["opaque"]["name"] if ms["opaque"] else None)
        assert e.opaque_size == (ms["opaque"]["size"] if ms["opaque"] else None)
        assert sorted(e.canonical_keys) == sorted(ms["canonical_tensors"])
        assert e.slots == sorted(ms["optimizer_slots"])
        assert e.cross_check.status == ms["cross_check"]
        if ms["canonical"]:
            assert e.source == SOURCE[cell][e.style]
            assert e.style == ms["style"]
        else:
            assert e.source == SOURCE["opaque"] and e.style == "opaque-only"
        if ms["cross_check"] == "agree":
            assert e.cross_check.max_abs_diff == 0.0
    assert sorted(doc.other_keys) == sorted(m["unrelated_variables"])
    assert doc.tensor_count == len(m["tensors"])
    assert not doc.warnings


@pytest.mark.parametrize("cell, case", _cases())
def test_weights_equal_golden(cell, case):
    """Extracted weights are the golden cuDNN weights bit for bit (canonical: up to the summed gate
    biases, which sit on the input side); an agreeing buffer holds the unsummed biases exactly."""
    doc = _read(case, cell)
    G = GATES[cell]
    by_scope = {e.scope: e for e in doc.stacks}
    for ms in MANIFESTS[cell][case]["stacks"]:
        e = by_scope[ms["scope"]]
        dtype = np.dtype(e.shape.dtype)
        D = e.shape.num_directions
        g = _golden(cell, ms["golden"])
        summed = ms["canonical"] and ms["canonical_style"] != "1.3"
        # golden_layers: which layers of the golden run a stack holds (one-layer modules of a 2-layer run)
        layers = ms.get("golden_layers", range(e.shape.num_layers))
        for i, layer in enumerate(layers):
            for d in range(D):
                p, q = e.stack.params[i * D + d], layer * D + d
                assert p.recurrent_weights.dtype == dtype and p.input_bias.dtype == dtype
                if f"W{q}_0" in g:
                    for k in range(G):
                        np.testing.assert_array_equal(p.input_weights[k], g[f"W{q}_{k}"].astype(dtype))
                else:
                    assert p.input_weights is None  # skip input
                for k in range(G):
                    np.testing.assert_array_equal(p.recurrent_weights[k], g[f"W{q}_{k + G}"].astype(dtype))
                    bw, br = g[f"b{q}_{k}"].astype(dtype), g[f"b{q}_{k + G}"].astype(dtype)
                    if summed and k in SUMMED_GATES[cell]:  # TF stored b_W + b_R (in the tensor's dtype)
                        np.testing.assert_array_equal(p.input_bias[k], bw + br)
                        assert not p.recurrent_bias[k].any()
                    else:
                        np.testing.assert_array_equal(p.input_bias[k], bw)
                        np.testing.assert_array_equal(p.recurrent_bias[k], br)
                if e.opaque_params is not None and ms["cross_check"] == "agree":
                    # the unpacked buffer holds the unsummed biases, exactly
                    o = e.opaque_params[i * D + d]
                    for k in range(G):
                        np.testing.assert_array_equal(o.input_bias[k], g[f"b{q}_{k}"].astype(dtype))
                        np.testing.assert_array_equal(o.recurrent_bias[k], g[f"b{q}_{k + G}"].astype(dtype))


# --------------------------------------------------------------------------- conversion and parity


def _keras():
    from gruconv.keras3.runtime import keras

    return keras()


def _run(path, x_tm, h0, c0=None, mask=None):
    """Load a converted .keras with plain Keras and run it on (x, the states of each pseudo-layer: h, or
    h and c [, the mask as an input]): returns time-major y and the stacked hy, cy (None for a GRU)."""
    model = _keras().saving.load_model(str(path))
    inputs = [np.transpose(x_tm, (1, 0, 2))]
    for p in range(h0.shape[0]):
        inputs += [h0[p]] if c0 is None else [h0[p], c0[p]]
    if mask is not None:
        inputs.append(mask)
    out = model(inputs)
    y = np.transpose(np.asarray(out[0]), (1, 0, 2))
    states = [np.asarray(o) for o in out[1:]]
    if c0 is None:
        return y, np.stack(states), None
    return y, np.stack(states[0::2]), np.stack(states[1::2])


def _err(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def _errors(y, hy, ref_y, ref_hy, cy=None, ref_cy=None) -> float:
    return max(_err(y, ref_y), _err(hy, ref_hy), 0.0 if cy is None else _err(cy, ref_cy))


@pytest.mark.parametrize("cell, case", _cases({"gru": ("layer_varlen", "float16"),
                                               "lstm": ("float16", "layer_varlen", "canonical_only_stacked",
                                                        "disagree")}))
def test_convert_matches_cudnn(cell, case, tmp_path):
    m = MANIFESTS[cell][case]
    multi = len(m["stacks"]) > 1
    out = tmp_path / ("out" if multi else "model.keras")
    res = _convert(case, out, cell, initial_state=True, return_state=True)
    by_scope = {e.scope: e for e in _read(case, cell).stacks}
    assert len(res.rnns) == len(m["stacks"])
    for ms in m["stacks"]:
        entry = next(s for s in res.rnns if s["name"] == ms["scope"])
        path = Path(entry["output"])
        assert path == (out / (ms["scope"].replace("/", "__") + ".keras") if multi else out)
        assert entry["kind"] == f"cuDNN {cell.upper()}" and entry["cell"] == cell
        assert entry["shape"] == _shape(ms["shape"]).to_dict()
        sh = ms["shape"]
        rnn = f"{cell.upper()}({sh['units']})"
        layer = f"Bidirectional({rnn}, merge_mode='concat')" if sh["bidirectional"] else rnn
        assert entry["converts_to"].startswith(f"{sh['num_layers']} x {layer}")
        model = _keras().saving.load_model(str(path))
        n_bias = len([w for w in model.weights if "bias" in w.path])
        assert n_bias == sh["num_layers"] * (2 if sh["bidirectional"] else 1)
        states = STATE_INPUTS[cell]
        assert [t.name.split(":")[0] for t in model.inputs][1:1 + len(states)] == states
        g = _golden(cell, ms["golden"])
        c0 = g["c0"] if cell == "lstm" else None
        y, hy, cy = _run(path, g["x"], g["h0"], c0)
        err_cudnn = _errors(y, hy, g["y"], g["hy"], cy, g.get("cy"))
        err_f64 = _errors(y, hy, g["y_f64"], g["hy_f64"], cy, g.get("cy_f64"))
        oy, ohy, ocy = run_stack(by_scope[ms["scope"]].stack, g["x"], g["h0"], c0=c0)
        err_oracle = _errors(y, hy, oy, ohy, cy, ocy)
        print(f"{cell} {case} {ms['scope']}: vs cuDNN fp32 {err_cudnn:.2e}, vs cuDNN f64 {err_f64:.2e}, "
              f"vs oracle {err_oracle:.2e}")
        assert err_cudnn <= TOL and err_f64 <= TOL and err_oracle <= TOL


@pytest.mark.parametrize("cell", list(DIRS))
def test_float16(cell, tmp_path):
    ms = MANIFESTS[cell]["float16"]["stacks"][0]
    out = tmp_path / "f16.keras"
    _convert("float16", out, cell, initial_state=True, return_state=True)
    model = _keras().saving.load_model(str(out))
    assert all(w.dtype == "float16" for w in model.weights)
    g = _golden(cell, ms["golden"])
    x16, h16 = g["x"].astype(np.float16), g["h0"].astype(np.float16)
    c16 = g["c0"].astype(np.float16) if cell == "lstm" else None
    y, hy, cy = _run(out, x16, h16, c16)
    assert y.dtype == np.float16
    stack = _read("float16", cell).stacks[0].stack
    oy, ohy, ocy = run_stack(stack, x16, h16, c0=c16)  # float64 run of the float16 weights and inputs
    err_oracle = _errors(y, hy, oy, ohy, cy, ocy)
    err_cudnn = _errors(y, hy, g["y"], g["hy"], cy, g.get("cy"))  # cuDNN fp32 on the unrounded weights
    print(f"{cell} float16: vs oracle(f16 weights) {err_oracle:.2e}, vs cuDNN fp32 {err_cudnn:.2e}")
    assert err_oracle <= TOL_F16 and err_cudnn <= TOL_F16


def _varlen(cell="gru"):
    g = _golden(cell, MANIFESTS[cell]["layer_varlen"]["stacks"][0]["golden"])
    T = g["x"].shape[0]
    mask = np.arange(T)[None, :] < g["seq_lengths"][:, None]  # (batch, time), right-padded
    return g, mask


@pytest.mark.filterwarnings("ignore:Layer 'cudnn_gru' .of type Functional. was passed an input with a mask")
def test_varlen_model_call_with_mask(tmp_path):
    """Keras 3: model(x, mask=...) reaches the GRUs when the model has no initial-state inputs."""
    g, mask = _varlen()
    out = tmp_path / "v.keras"
    t1.convert(TF1 / "layer_varlen", out, return_state=True)
    model = _keras().saving.load_model(str(out))
    res = model(np.transpose(g["x"], (1, 0, 2)), mask=mask)
    y = np.transpose(np.asarray(res[0]), (1, 0, 2))
    hy = np.stack([np.asarray(o) for o in res[1:]])
    stack = _read("layer_varlen").stacks[0].stack
    oy, ohy, _ = run_stack(stack, g["x"], None, g["seq_lengths"])  # zero initial state
    valid = mask.T[:, :, None]
    err = max(np.abs(np.where(valid, y - oy, 0)).max(), np.abs(hy - ohy).max())
    print(f"layer_varlen (h0 = 0, model(x, mask=)): vs oracle {err:.2e}")
    assert err <= TOL
    assert not y[~mask.T].any()  # Keras zeroes masked outputs, as cuDNN's padded I/O does


def test_varlen_with_initial_state_matches_cudnn(tmp_path):
    """With initial states the GRU call has two tensor arguments and Keras 3 does not pass the
    model's mask on to it, so the converted layers are called one by one with ``mask=``."""
    g, mask = _varlen()
    out = tmp_path / "v.keras"
    t1.convert(TF1 / "layer_varlen", out, initial_state=True, return_state=True)
    keras = _keras()
    model = keras.saving.load_model(str(out))
    layers = [lyr for lyr in model.layers if isinstance(lyr, (keras.layers.Bidirectional, keras.layers.GRU))]
    assert len(layers) == 2
    x = np.transpose(g["x"], (1, 0, 2))
    finals = []
    for i, lyr in enumerate(layers):
        res = lyr(x, initial_state=[g["h0"][2 * i], g["h0"][2 * i + 1]], mask=mask)
        x = res[0]
        finals += [np.asarray(s) for s in res[1:]]
    y = np.transpose(np.asarray(x), (1, 0, 2))
    hy = np.stack(finals)
    valid = mask.T[:, :, None]
    err_cudnn = max(np.abs(np.where(valid, y - g["y"], 0)).max(), np.abs(hy - g["hy"]).max())
    err_f64 = max(np.abs(np.where(valid, y - g["y_f64"], 0)).max(), np.abs(hy - g["hy_f64"]).max())
    print(f"layer_varlen (per-layer mask): vs cuDNN fp32 {err_cudnn:.2e}, vs cuDNN f64 {err_f64:.2e}")
    assert err_cudnn <= TOL and err_f64 <= TOL


@pytest.mark.parametrize("cell", list(DIRS))
def test_varlen_mask_input_with_initial_state(cell, tmp_path):
    """--mask-input: an explicit (batch, time) mask input reaches every layer, initial states too.

    (Keras 3 drops a model-level ``mask=`` once a layer also gets initial states: that is why
    the converted model takes the mask as an input.)"""
    g, mask = _varlen(cell)
    out = tmp_path / "v.keras"
    _convert("layer_varlen", out, cell, initial_state=True, return_state=True, mask_input=True)
    y, hy, cy = _run(out, g["x"], g["h0"], g["c0"] if cell == "lstm" else None, mask=mask)
    valid = np.transpose(mask)[:, :, None]
    assert _err(hy, g["hy"]) <= TOL
    assert _err(np.where(valid, y, 0), np.where(valid, g["y"], 0)) <= TOL
    if cell == "lstm":
        assert _err(cy, g["cy"]) <= TOL


def test_canonical_only_stacked_modules_chain(tmp_path):
    """Two one-layer modules ('cudnn_lstm', 'cudnn_lstm_1', cell_0 only, no buffer): two models that,
    chained, are cuDNN's 2-layer stack."""
    out = tmp_path / "out"
    res = _convert("canonical_only_stacked", out, "lstm", initial_state=True, return_state=True)
    assert sorted(p.name for p in out.iterdir()) == ["cudnn_lstm.keras", "cudnn_lstm_1.keras", "rest.npz"]
    assert [r["name"] for r in res.rnns] == ["cudnn_lstm", "cudnn_lstm_1"]
    assert all(r["cross_check"] == "not checked (no opaque buffer found)" for r in res.rnns)
    assert any("--forget-bias 1" in d for d in res.rnns[0]["details"])
    g = _golden("lstm", "lstm_2l_uni.npz")
    y0, h0, c0 = _run(out / "cudnn_lstm.keras", g["x"], g["h0"][:1], g["c0"][:1])
    y1, h1, c1 = _run(out / "cudnn_lstm_1.keras", y0, g["h0"][1:], g["c0"][1:])
    assert max(_err(y1, g["y"]), _err(np.concatenate([h0, h1]), g["hy"]),
               _err(np.concatenate([c0, c1]), g["cy"])) <= TOL


def test_return_state_only_and_plain(tmp_path):
    """Without --initial-state the model takes x alone; --return-state adds h, c per pseudo-layer."""
    out = tmp_path / "b.keras"
    _convert("layer_bidir", out, "lstm", return_state=True)
    model = _keras().saving.load_model(str(out))
    assert len(model.inputs) == 1 and len(model.outputs) == 1 + 2 * 4
    g = _golden("lstm", "lstm_2l_bidir.npz")
    from gruconv.verify.reference.oracle import run_stack

    (e,) = _read("layer_bidir", "lstm").stacks
    res = model(np.transpose(g["x"], (1, 0, 2)))
    oy, ohy, ocy = run_stack(e.stack, g["x"])  # zero initial states
    assert _err(np.transpose(np.asarray(res[0]), (1, 0, 2)), oy) <= TOL
    assert _err(np.stack([np.asarray(o) for o in res[1::2]]), ohy) <= TOL
    assert _err(np.stack([np.asarray(o) for o in res[2::2]]), ocy) <= TOL


def test_verify_reports_h_and_c():
    from gruconv.verify import verify

    rep = verify(TF1_LSTM / "layer_bidir", reference="oracle", initial_state=True, return_state=True)
    names = [c.name for c in rep.checks]
    assert "encoder/cudnn_lstm: final state l0 fw h" in names and "encoder/cudnn_lstm: final state l1 bw c" in names
    assert len(names) == 1 + 2 * 4 and rep.passed, [(c.name, c.max_abs) for c in rep.checks]


# --------------------------------------------------------------------------- outputs


def _npz(path) -> dict:
    """rest.npz by tensor name: member names are made safe, its __manifest__.json maps them back."""
    with np.load(path) as z:
        names = json.loads(z["__manifest__.json"])["tensors"]
        return {names[k]: z[k] for k in z.files if k != "__manifest__.json"}


def _assert_rest(rest: dict, case: str, extra=()):
    bundle = tfbundle.open_bundle(TF1 / case)
    assert sorted(rest) == sorted(list(MANIFEST[case]["unrelated_variables"]) + list(extra))
    for k, v in rest.items():
        ref = bundle.read(k)
        assert v.dtype == ref.dtype and v.shape == ref.shape and v.tobytes() == ref.tobytes(), k


def test_rest_npz_and_dropped_slots(tmp_path):
    out = tmp_path / "m.keras"
    res = t1.convert(TF1 / "layer_uni", out)
    rest_path = tmp_path / "m.keras.rest.npz"
    assert res.outputs == [str(out), str(rest_path)]
    _assert_rest(_npz(rest_path), "layer_uni")  # dense/*/Adam slots stay: they are not the GRU's
    slots = MANIFEST["layer_uni"]["stacks"][0]["optimizer_slots"]
    (warning,) = [w for w in res.warnings if "optimizer slots" in w]
    assert all(s in warning for s in slots)
    assert not any(s in _npz(rest_path) for s in slots)


def test_multi_stack_directory(tmp_path):
    out = tmp_path / "converted"
    res = t1.convert(TF1 / "multi_stack", out)
    assert sorted(p.name for p in out.iterdir()) == ["decoder__cudnn_gru.keras", "encoder__cudnn_gru.keras",
                                                      "rest.npz"]
    _assert_rest(_npz(out / "rest.npz"), "multi_stack")
    assert len([w for w in res.warnings if "optimizer slots" in w]) == 2
    keras = _keras()
    enc = keras.saving.load_model(str(out / "encoder__cudnn_gru.keras"))
    assert enc.output.shape == (None, None, 14)
    # refuses to write into it again without force; with force it overwrites
    with pytest.raises(OutputError, match="not empty"):
        t1.convert(TF1 / "multi_stack", out)
    t1.convert(TF1 / "multi_stack", out, force=True)
    # a .keras name for two stacks is refused, naming them
    with pytest.raises(UsageError, match="2 GRU stacks.*--rnn"):
        t1.convert(TF1 / "multi_stack", tmp_path / "x.keras")
    assert not (tmp_path / "x.keras").exists()


def test_multi_stack_one_rnn(tmp_path):
    out = tmp_path / "dec.keras"
    res = t1.convert(TF1 / "multi_stack", out, rnn="decoder/cudnn_gru")
    assert [s["name"] for s in res.rnns] == ["decoder/cudnn_gru"]
    enc = [e for e in _read("multi_stack").stacks if e.scope == "encoder/cudnn_gru"][0]
    # the stack not converted is kept whole (buffer, canonical tensors, slots) with the other tensors
    _assert_rest(_npz(tmp_path / "dec.keras.rest.npz"), "multi_stack", extra=enc.keys)
    with pytest.raises(UsageError, match="no cuDNN GRU stack with scope 'nope'.*decoder/cudnn_gru"):
        t1.read(TF1 / "multi_stack", rnn="nope")


def test_existing_output_refused(tmp_path):
    out = tmp_path / "m.keras"
    out.write_bytes(b"old")
    with pytest.raises(OutputError, match="exists"):
        t1.convert(TF1 / "layer_uni_1l", out)
    assert out.read_bytes() == b"old"
    with pytest.raises(UsageError, match=r"\.keras"):
        t1.convert(TF1 / "layer_uni_1l", tmp_path / "m.npz")


# --------------------------------------------------------------------------- cross-check


@pytest.mark.parametrize("cell", list(DIRS))
def test_disagree(cell, tmp_path):
    ms = MANIFESTS[cell]["disagree"]["stacks"][0]
    (e,) = _read("disagree", cell).stacks
    assert e.cross_check.status == "disagree" and e.cross_check.max_abs_diff > 0.1
    assert e.cross_check.where.startswith(f"rnn/cudnn_{cell}/rnn/multi_rnn_cell/")
    res = _convert("disagree", tmp_path / "c.keras", cell, initial_state=True, return_state=True)
    (w,) = [w for w in res.warnings if "disagrees" in w]
    assert f"max abs diff {e.cross_check.max_abs_diff:.6g}" in w and "canonical tensors" in w
    g = _golden(cell, ms["golden"])
    c0 = g["c0"] if cell == "lstm" else None
    y, hy, cy = _run(tmp_path / "c.keras", g["x"], g["h0"], c0)
    assert _errors(y, hy, g["y"], g["hy"], cy, g.get("cy")) <= TOL  # the canonical tensors are right

    (o,) = _read("disagree", cell, prefer="opaque").stacks
    assert o.source.startswith("opaque buffer")
    assert not np.array_equal(o.stack.params[0].recurrent_weights, e.stack.params[0].recurrent_weights)
    res = _convert("disagree", tmp_path / "o.keras", cell, prefer="opaque", initial_state=True,
                   return_state=True)
    assert any("Weights taken from the opaque buffer" in w for w in res.warnings)
    y, hy, cy = _run(tmp_path / "o.keras", g["x"], g["h0"], c0)
    assert _err(y, g["y"]) > 0.01


def test_prefer_opaque_agrees_when_layouts_agree():
    (c,) = _read("layer_uni").stacks
    (o,) = _read("layer_uni", prefer="opaque").stacks
    for a, b in zip(c.stack.params, o.stack.params):
        np.testing.assert_array_equal(a.input_weights, b.input_weights)
        np.testing.assert_array_equal(a.recurrent_weights, b.recurrent_weights)
        np.testing.assert_array_equal(a.input_bias[2], b.input_bias[2])


def test_prefer_invalid():
    with pytest.raises(UsageError, match="prefer"):
        t1.read(TF1 / "layer_uni", prefer="both")


# --------------------------------------------------------------------------- opaque-only buffers


def test_ambiguous_opaque_only():
    (e,) = t1.read(TF1 / "opaque_only_skip_uni").stacks
    assert e.stack is None and len(e.candidates) == 13
    assert _shape(MANIFEST["opaque_only_skip_uni"]["stacks"][0]["shape"]) in e.candidates
    with pytest.raises(UsageError) as ei:
        t1.convert(TF1 / "opaque_only_skip_uni", Path("/nonexistent/never.keras"))
    msg = str(ei.value)
    assert "525 values" in msg and "13 shapes fit" in msg and "input 7/units 7/2 layer(s)/uni/skip" in msg
    assert "... 3 more" in msg and "--num-units" in msg and "--input-mode" in msg
    # one hint is not always enough: the message names only what still varies
    with pytest.raises(UsageError, match=r"2 shapes fit.*Pass --input-size, --num-layers, --input-mode \("):
        t1.convert(TF1 / "opaque_only_skip_uni", Path("/nonexistent/never.keras"), hints={"num_units": 7})
    info = t1.inspect(TF1 / "opaque_only_skip_uni")
    assert info["rnns"][0]["shape"] is None and info["rnns"][0]["candidate_count"] == 13
    assert "shape ambiguous" in report.inspect_text(info)


def test_contradicting_hints():
    with pytest.raises(UsageError, match=r"525 float32 values; no cuDNN GRU with num_units=8"):
        t1.read(TF1 / "opaque_only_skip_uni", hints={"num_units": 8})
    with pytest.raises(UsageError, match=r"num_units=7, direction=bi"):
        t1.read(TF1 / "opaque_only_skip_uni", hints={"num_units": 7, "direction": "bi"})
    with pytest.raises(UsageError, match="num_units=8 .stored: 7.*contradict"):
        t1.read(TF1 / "layer_uni", hints={"num_units": 8})
    with pytest.raises(UsageError, match="direction"):
        t1.read(TF1 / "layer_uni", hints={"direction": "sideways"})


def test_tf14_needs_variable():
    doc = t1.read(TF1 / "tf14_opaque_only")
    assert doc.stacks == [] and doc.possible_buffers == [{"key": "encoder/cudnn_params", "size": 294,
                                                          "dtype": "float32"}]
    with pytest.raises(UsageError, match="--variable"):
        t1.convert(TF1 / "tf14_opaque_only", Path("/nonexistent/x.keras"))
    with pytest.raises(InputError, match="variable 'encoder/nope' is not in the checkpoint"):
        t1.read(TF1 / "tf14_opaque_only", hints={"variable": "encoder/nope"})
    with pytest.raises(InputError, match="1-D float"):
        t1.read(TF1 / "tf14_opaque_only", hints={"variable": "global_step"})


def test_variable_selects_stack():
    doc = t1.read(TF1 / "multi_stack", hints={"variable": "decoder/cudnn_gru/opaque_kernel"})
    assert [e.scope for e in doc.stacks] == ["decoder/cudnn_gru"]


# --------------------------------------------------------------------------- inspect


@pytest.mark.parametrize("case", CASES)
def test_inspect_json_and_text(case):
    info = t1.inspect(TF1 / case, hints=HINTS["gru"].get(case) or {})
    json.dumps(info)
    m = MANIFEST[case]
    assert info["format"] == "tf1-checkpoint" and info["tensor_count"] == len(m["tensors"])
    assert info["other_tensors"]["count"] == len(m["unrelated_variables"])
    assert info["total_bytes"] == sum(f["bytes"] for n, f in m["files"].items() if ".data-" in n)
    for s, ms in zip(sorted(info["rnns"], key=lambda s: s["name"]),
                     sorted(m["stacks"], key=lambda s: s["scope"])):
        assert s["name"] == ms["scope"] and s["shape"] == _shape(ms["shape"]).to_dict()
        assert s["cross_check"].lower().startswith(ms["cross_check"])
        assert s["buffer_size"] == ms["opaque"]["size"] and s["params"] == ms["opaque"]["size"]
    text = report.inspect_text(info)
    assert all(s["name"] in text for s in info["rnns"])


def test_inspect_imports_no_framework():
    """Nor ml_dtypes (bfloat16's NumPy dtype, 0.5-0.7 s to import: imported when a bfloat16 tensor is read, and
    these checkpoints hold none), through the reader and through ``api.inspect``'s choice of reader."""
    code = (
        "import sys; from gruconv.readers import tf1 as t; import gruconv.api as api; "
        f"t.inspect(t.read({str(TF1 / 'layer_3l_bidir')!r})); "
        f"t.inspect(t.read({str(TF1 / 'opaque_only_skip_uni')!r}, hints={{'input_mode': 'skip'}})); "
        f"api.inspect({str(TF1 / 'layer_3l_bidir')!r}); "
        "print([m for m in ('tensorflow', 'keras', 'ml_dtypes') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- crafted checkpoints


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, quiet while it starts; the environment is restored after the module (no test
    leaves process-wide state behind for the tests after it)."""
    with pytest.MonkeyPatch.context() as mp:
        if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
            mp.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
        yield pytest.importorskip("tensorflow")


def _save(tf, prefix: Path, tensors: dict) -> Path:
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return prefix


def _tensors(case: str, cell="gru") -> dict:
    b = tfbundle.open_bundle(DIRS[cell] / case)
    return {k: np.array(b.read(k)) for k in b.keys()}


def test_inspect_big_checkpoint_reads_only_the_gru_tensors(tf, tmp_path, monkeypatch):
    """150 MB of other tensors: inspect reads the index and the GRU tensors only.  (Its speed is a
    benchmark number, ``docs/benchmarks.md``, not a timed assertion here.)"""
    tensors = _tensors("layer_80x256")
    tensors["embedding/embeddings"] = np.ones((150 * 2**20 // 4 // 1024, 1024), np.float32)
    prefix = _save(tf, tmp_path / "big.ckpt", tensors)
    assert Path(str(prefix) + ".data-00000-of-00001").stat().st_size > 150 * 2**20
    read_keys = []

    def spy(real):
        def read(self, key, verify=True):
            read_keys.append(key)
            return real(self, key, verify)
        return read

    monkeypatch.setattr(tfbundle.Bundle, "read", spy(tfbundle.Bundle.read))
    monkeypatch.setattr(tfbundle.Bundle, "view", spy(tfbundle.Bundle.view))
    info = t1.inspect(prefix)
    assert "embedding/embeddings" not in read_keys and read_keys
    assert info["rnns"] and info["other_tensors"]["count"] >= 1


def test_inconsistent_canonical_shapes(tf, tmp_path):
    base = "rnn/cudnn_gru/rnn/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/"
    tensors = _tensors("layer_uni")
    tensors[base + "gates/kernel"] = np.zeros((13, 14), np.float32)
    prefix = _save(tf, tmp_path / "bad.ckpt", tensors)
    with pytest.raises(InputError, match=r"bad\.ckpt\.index: tensor '.*cell_1/.*gates/kernel' has shape "
                                         r"\[13, 14\], expected \[14, 14\]"):
        t1.read(prefix)
    tensors = _tensors("layer_uni")
    del tensors[base + "candidate/hidden_projection/bias"]
    prefix = _save(tf, tmp_path / "missing.ckpt", tensors)
    with pytest.raises(InputError, match="candidate/hidden_projection/bias.* is missing"):
        t1.read(prefix)
    tensors = _tensors("layer_uni")
    tensors[base + "gates/bias"] = tensors[base + "gates/bias"].astype(np.float64)
    prefix = _save(tf, tmp_path / "dtype.ckpt", tensors)
    with pytest.raises(InputError, match="dtype float64.*share a dtype"):
        t1.read(prefix)


def test_nonfinite_weights_warned(tf, tmp_path):
    tensors = _tensors("layer_uni_1l")
    key = "rnn/cudnn_gru/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/candidate/input_projection/bias"
    tensors[key] = tensors[key].copy()
    tensors[key][[1, 3]] = [np.nan, np.inf]
    prefix = _save(tf, tmp_path / "nan.ckpt", tensors)
    doc = t1.read(prefix)
    assert any("2 NaN/Inf" in w for w in doc.warnings)
    assert doc.stacks[0].cross_check.status == "disagree"  # the buffer still holds finite values
    assert doc.stacks[0].stack.nonfinite_count() == 2
    assert t1.inspect(prefix)["rnns"][0]["nonfinite_weights"] == 2
    assert t1.inspect(prefix, prefer="opaque")["rnns"][0]["nonfinite_weights"] == 0


def test_lstm_buffer_is_not_a_gru(tf, tmp_path):
    tensors = _tensors("layer_uni_1l")
    tensors["lm/cudnn_lstm/opaque_kernel"] = np.ones(1234, np.float32)
    doc = t1.read(_save(tf, tmp_path / "lstm.ckpt", tensors))
    assert [e.scope for e in doc.stacks] == ["rnn/cudnn_gru"]
    assert "lm/cudnn_lstm/opaque_kernel" in doc.other_keys
    assert any("cudnn_lstm layer, not a GRU" in w for w in doc.warnings)


def test_tf14_saveable_with_user_named_buffer(tf, tmp_path):
    """TF 1.4: canonical names under the user's scope, buffer named by the user elsewhere."""
    src = _tensors("layer_uni")
    tensors = {}
    for k, v in src.items():
        if "/cudnn_compatible_gru_cell/" in k:
            tensors["decoder/" + k.split("/", 2)[2]] = v  # decoder/rnn/multi_rnn_cell/...
        elif k == "rnn/cudnn_gru/opaque_kernel":
            tensors["gru_params"] = v
        elif k.startswith("rnn/cudnn_gru/opaque_kernel/"):
            tensors["gru_params/" + k.rsplit("/", 1)[1]] = v
    doc = t1.read(_save(tf, tmp_path / "tf14.ckpt", tensors))
    (e,) = doc.stacks
    assert e.scope == "decoder" and e.style == "1.4" and e.opaque_key == "gru_params"
    assert e.cross_check.status == "agree" and e.slots == ["gru_params/Adam", "gru_params/Adam_1"]
    assert doc.other_keys == []


# --------------------------------------------------------------------------- through the API


def test_api_plumbing(tmp_path):
    from gruconv import api

    info = api.inspect(TF1 / "opaque_only_skip_bidir", hints={"input_mode": "skip"}, rnn=None, prefer=None,
                       config=None)
    assert info["rnns"][0]["shape"]["input_mode"] == "skip"
    res = api.convert(TF1 / "opaque_only_skip_bidir", tmp_path / "s.keras", hints={"input_mode": "skip"},
                      initial_state=False, return_state=False)
    assert res.rnns[0]["converts_to"] == ("1 x Bidirectional(GRU(7), merge_mode='concat') "
                                            "(skip input: layer 0 input kernel = identity)")
    with zipfile.ZipFile(tmp_path / "s.keras") as z:
        assert {"config.json", "metadata.json", "model.weights.h5"} <= set(z.namelist())


def test_broken_stack_not_selected(tf, tmp_path):
    """A malformed stack is reported when selected, and does not block converting another one."""
    tensors = _tensors("multi_stack")
    bad = "encoder/cudnn_gru/stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_gru_cell/gates/bias"
    tensors[bad] = np.zeros(5, np.float32)
    prefix = _save(tf, tmp_path / "half.ckpt", tensors)
    with pytest.raises(InputError, match="cell_1/bidirectional_rnn/bw/.*gates/bias' has shape \\[5\\]"):
        t1.read(prefix)
    with pytest.raises(InputError, match="gates/bias"):
        t1.read(prefix, rnn="encoder/cudnn_gru")
    doc = t1.read(prefix, rnn="decoder/cudnn_gru")
    assert [e.scope for e in doc.stacks] == ["decoder/cudnn_gru"]
    assert "encoder/cudnn_gru/opaque_kernel" in doc.other_keys and bad in doc.other_keys


def test_rest_npz_keeps_every_dtype(tf, tmp_path):
    """Strings, bools, ints, scalars and bfloat16 (as raw bits, with a warning) reach rest.npz unchanged."""
    tensors = {k: tf.constant(v) for k, v in _tensors("layer_uni_1l").items()}
    tensors.update({
        "vocab": tf.constant(np.array([b"a", b"bc", b""], dtype=object)),
        "flags": tf.constant(np.array([True, False])),
        "counts": tf.constant(np.arange(6, dtype=np.int16).reshape(2, 3)),
        "scale": tf.constant(np.float64(2.5)),
        "half": tf.constant([1.5, -2.0], dtype=tf.bfloat16),
    })
    prefix = tmp_path / "mixed.ckpt"
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tensors[n] for n in names])
    res = t1.convert(prefix, tmp_path / "m.keras")
    rest = _npz(tmp_path / "m.keras.rest.npz")
    assert sorted(rest) == sorted(["beta1_power", "beta2_power", "global_step", "vocab", "flags", "counts",
                                   "scale", "half"])
    assert rest["vocab"].tolist() == [b"a", b"bc", b""]
    assert rest["flags"].dtype == bool and rest["flags"].tolist() == [True, False]
    assert rest["counts"].dtype == np.int16 and rest["counts"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert rest["scale"].dtype == np.float64 and rest["scale"] == 2.5
    raw = tfbundle.open_bundle(prefix).read("half")
    assert rest["half"].dtype == np.uint16 and rest["half"].tobytes() == raw.tobytes()
    assert any("bfloat16 tensor 'half' stored as its raw uint16 bit patterns" in w for w in res.warnings)


# --------------------------------------------------------------------------- mapped reads, lean convert


def _big(tf, path: Path, I=96, H=256, L=2, bidir=True, seed=3, edit=None, scale=1.0):
    """A TF 1.5 layer checkpoint large enough for the tiled comparison (blocks of >= 64K values),
    written with the fixture generator's own packing and canonical transform."""
    sys.path.insert(0, str(FIXTURES))
    import make_tf1_fixtures as mk

    g = object.__new__(mk.Golden)
    g.name, g.I, g.H, g.L, g.bidir, g.skip = "big", I, H, L, bidir, False
    g.D = 2 if bidir else 1
    g.P = g.L * g.D
    rng = np.random.default_rng(seed)
    g.W = {(p, k): (scale * rng.standard_normal((H, g.layer_input_size(p // g.D) if k < 3 else H)))
           .astype(np.float32) for p in range(g.P) for k in range(6)}
    g.b = {(p, k): (scale * rng.standard_normal(H)).astype(np.float32) for p in range(g.P) for k in range(6)}
    tensors = {"rnn/cudnn_gru/opaque_kernel": mk.pack_cudnn919(g)}
    tensors.update(mk.canonical_tf15(g, "rnn/cudnn_gru"))
    if edit:
        edit(tensors)
    return _save(tf, path, tensors)


BIG_CELL = "rnn/cudnn_gru/stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_gru_cell/"


@pytest.mark.parametrize("row, col", [(512 + 200, 256 + 77), (300, 5), (511, 511), (512 + 255, 0)])
def test_cross_check_finds_one_changed_value_anywhere(tf, tmp_path, row, col):
    """Every value is compared (tiled path: 512 x 256 input and 256 x 256 recurrent blocks)."""
    def edit(t):
        t[BIG_CELL + "gates/kernel"] = t[BIG_CELL + "gates/kernel"].copy()
        t[BIG_CELL + "gates/kernel"][row, col] += np.float32(0.25)

    (e,) = t1.read(_big(tf, tmp_path / "big.ckpt", edit=edit)).stacks
    assert e.cross_check.status == "disagree"
    assert e.cross_check.where == f"{BIG_CELL}gates/kernel[{row}, {col}]"
    assert e.cross_check.max_abs_diff == pytest.approx(0.25, rel=1e-5)
    # the canonical tensors define the weights: the changed cell is a copy of them, the rest are the buffer
    p = e.stack.params[3]
    gate, unit = divmod(col, 256)
    mats = p.input_weights if row < 512 else p.recurrent_weights
    assert mats[gate][unit, row % 512] == e.opaque_params[3].__dict__[
        "input_weights" if row < 512 else "recurrent_weights"][gate][unit, row % 512] + np.float32(0.25)
    assert not np.shares_memory(p.recurrent_weights, e.opaque_params[3].recurrent_weights)
    for q in (0, 1, 2):
        assert np.shares_memory(e.stack.params[q].recurrent_weights, e.opaque_params[q].recurrent_weights)


def test_params_are_views_of_an_identical_buffer_and_signed_zeros_count(tf, tmp_path):
    """Matrices come from the buffer only where they are bit for bit the canonical ones: a -0.0
    in a canonical tensor where the buffer holds +0.0 agrees (diff 0) but the weight stays -0.0."""
    from gruconv.model.cudnn_layout import iter_matrix_regions

    shape = StackShape(96, 256, 2, True)
    (off,) = [o for p, kind, lin, o, dims in iter_matrix_regions(shape) if (p, kind, lin) == (3, "matrix", 4)]

    def edit(t):
        t["rnn/cudnn_gru/opaque_kernel"] = t["rnn/cudnn_gru/opaque_kernel"].copy()
        t["rnn/cudnn_gru/opaque_kernel"][off + 77 * 256 + 200] = 0.0  # R[1][77, 200] of pseudo-layer 3
        t[BIG_CELL + "gates/kernel"] = t[BIG_CELL + "gates/kernel"].copy()
        t[BIG_CELL + "gates/kernel"][512 + 200, 256 + 77] = -0.0

    doc = t1.read(_big(tf, tmp_path / "z.ckpt", edit=edit))
    (e,) = doc.stacks
    assert e.cross_check.status == "agree" and e.cross_check.max_abs_diff == 0.0
    assert np.signbit(e.stack.params[3].recurrent_weights[1][77, 200])
    assert not np.signbit(e.opaque_params[3].recurrent_weights[1][77, 200])
    for q, p in enumerate(e.stack.params):
        for name in ("input_weights", "recurrent_weights"):
            a = getattr(p, name)
            assert np.shares_memory(a, getattr(e.opaque_params[q], name)) == (q != 3)
            assert a.flags.owndata == (q == 3) and a.flags.c_contiguous
    # what inspect and convert see
    info = t1.inspect(tmp_path / "z.ckpt")
    assert info["rnns"][0]["cross_check_detail"]["status"] == "agree"
    assert info["rnns"][0]["nonfinite_weights"] == 0


def _all_stacks():
    for case in CASES:
        for prefer in (None, "opaque"):
            try:
                doc = _read(case, prefer=prefer)
            except UsageError:  # prefer='opaque' without a usable buffer
                continue
            for e in doc.stacks:
                if e.stack is not None:
                    yield f"{case}/{prefer}/{e.scope}", doc, e


def test_keras_arrays_equal_to_keras_gru():
    """The lean convert path (the stream of Keras arrays straight from the canonical tensors, one at a
    time: ``archive.stack_arrays``, what both the streamed and the Keras-built route write) gives exactly
    the arrays to_keras_gru gives from the stack's params."""
    from gruconv.keras3 import archive
    from gruconv.keras3.config import saveable_plan, stack_model_config
    from gruconv.model.keras_layout import to_keras_gru

    seen = 0
    for name, doc, e in _all_stacks():
        s = e.stack.shape
        _groups, tops = saveable_plan(stack_model_config(s, "m"))
        got = archive.stack_arrays(e.stack, tops, doc.reader.release)
        for layer in range(s.num_layers):
            for d in range(s.num_directions):
                ref = to_keras_gru(e.stack.params[s.pseudo_layer(layer, d)], s.layer_input_size(layer))
                for i in range(3):
                    _g, _i, value = next(got)
                    value = archive.assembled(value)
                    assert value.dtype == ref[i].dtype and value.shape == ref[i].shape, name
                    assert value.tobytes() == ref[i].tobytes(), (name, layer, d, i)
        assert next(got, None) is None
        seen += 1
    assert seen > 20


def test_unpack_views_equal_unpack():
    from gruconv.model.cudnn_layout import pack, unpack

    rng = np.random.default_rng(5)
    for shape in (StackShape(5, 7, 2, True), StackShape(7, 7, 3, False, "skip"), StackShape(7, 7, 1, True, "skip"),
                  StackShape(3, 4, 1, False, dtype="float16"), StackShape(9, 2, 4, True, dtype="float64")):
        from gruconv.model.cudnn_layout import params_size

        buf = rng.standard_normal(params_size(shape)).astype(shape.dtype)
        views, ref = t1._unpack_views(buf, shape), unpack(buf, shape)
        for a, b in zip(views, ref):
            for k in ("input_weights", "recurrent_weights", "input_bias", "recurrent_bias"):
                x, y = getattr(a, k), getattr(b, k)
                assert (x is None) == (y is None)
                if x is not None:
                    assert x.shape == y.shape and x.tobytes() == y.tobytes() and np.shares_memory(x, buf)
        np.testing.assert_array_equal(pack(views, shape), buf)
    with pytest.raises(InputError, match="needs"):
        t1._unpack_views(np.zeros(10, np.float32), StackShape(5, 7))


def test_nonfinite_fast_path_is_exact():
    from gruconv.model.canonical import GateParams

    def params(v, dtype):
        a = np.full((3, 4, 4), v, dtype)
        return GateParams(a.copy(), a.copy(), np.zeros((3, 4), dtype), np.zeros((3, 4), dtype))

    assert t1._nonfinite(params(3e38, np.float32)) == 0      # the sum overflows; no value is Inf
    assert t1._nonfinite(params(60000, np.float16)) == 0
    p = params(1.0, np.float32)
    p.recurrent_weights[1, 2, 3] = np.nan
    p.input_bias[0, 0] = -np.inf
    assert t1._nonfinite(p) == 2
    p = params(np.inf, np.float64)
    assert t1._nonfinite(p) == 96


def test_same_bits():
    a = np.arange(300 * 400, dtype=np.float32).reshape(300, 400)
    b = np.ascontiguousarray(a.T).T
    assert t1._same_bits(a, b)
    b = b.copy()
    b[299, 399] = -b[299, 399]
    assert not t1._same_bits(a, b)
    z = np.zeros((300, 400), np.float32)
    assert not t1._same_bits(z, -z)              # -0.0 is not +0.0 bit for bit
    assert not t1._same_bits(a, a[:, :399])       # shapes differ


@pytest.mark.parametrize("kw", [{}, {"initial_state": True, "return_state": True}, {"mask_input": True}])
@pytest.mark.parametrize("case", ["layer_bidir", "layer_uni", "opaque_only_skip_bidir"])
def test_stack_model_built_from_the_one_description(case, kw, tmp_path):
    """``build_stack_model(stack, stack_model_config(...))`` (zero initializers, the streamed arrays
    assigned) saved with that config loads back as exactly the model of a default Keras build of the same
    config followed by set_weights: same config (the default initializers, not the Zeros it was built
    with), same weights."""
    from gruconv.keras3 import runtime as keras3
    from gruconv.keras3.build import build_stack_model
    from gruconv.keras3.config import stack_model_config

    keras = _keras()
    (e,) = _read(case).stacks
    config = stack_model_config(e.stack.shape, "m", **kw)
    fast = build_stack_model(e.stack, config)
    ref = keras.saving.deserialize_keras_object(json.loads(json.dumps(config)))  # default initializers (a copy:
    # Keras pops the keys of the dict it deserializes)
    ref.set_weights(fast.get_weights())
    assert [w.path for w in fast.weights] == [w.path for w in ref.weights]
    keras3.save(fast, tmp_path / "f.keras", config=config)
    keras3.save(ref, tmp_path / "r.keras")
    f, r = (keras.saving.load_model(str(tmp_path / n)) for n in ("f.keras", "r.keras"))
    assert json.dumps(f.get_config(), sort_keys=True) == json.dumps(r.get_config(), sort_keys=True)
    for a, b in zip(f.weights, r.weights):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), a.path
    inits = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("class_name") == "GRU":
                c = node["config"]
                inits.add(tuple(c[k]["class_name"] for k in ("kernel_initializer", "recurrent_initializer",
                                                             "bias_initializer")))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    with zipfile.ZipFile(tmp_path / "f.keras") as z:
        walk(json.loads(z.read("config.json")))
    assert inits == {("GlorotUniform", "Orthogonal", "Zeros")}


def test_convert_big_stack_matches_oracle(tf, tmp_path):
    """A stack large enough for the tiled and mapped paths converts to the same function."""
    prefix = _big(tf, tmp_path / "big.ckpt", I=24, H=96, L=2, scale=0.1)
    (e,) = t1.read(prefix).stacks
    assert e.cross_check.status == "agree"
    t1.convert(prefix, tmp_path / "b.keras", initial_state=True, return_state=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, 24)).astype(np.float32)
    h0 = rng.standard_normal((4, 3, 96)).astype(np.float32)
    y, hy, _ = _run(tmp_path / "b.keras", x, h0)
    oy, ohy, _ = run_stack(e.stack, x, h0)
    assert _errors(y, hy, oy, ohy) <= TOL


# --------------------------------------------------------------------------- declared options (issue 16)


def test_config_with_a_checkpoint_is_refused(tmp_path):
    """``--config`` is read by no TF1 reader or writer: one usage line, exit 2, nothing written (it
    was ignored with exit 0)."""
    from click.testing import CliRunner

    from gruconv.cli import main

    out = tmp_path / "o.keras"
    res = CliRunner().invoke(main, ["convert", str(TF1 / "layer_uni"), str(out),
                                    "--config", str(FIXTURES / "keras" / "weights_only.json")])
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert lines == ["gruconv: error: --config does not apply to a TensorFlow checkpoint converted to .keras: "
                     "refusing to ignore it"], res.output
    assert not out.exists() and not (tmp_path / "o.keras.rest.npz").exists()


def test_model_interface_options_only_for_a_model_writer(tmp_path):
    """``--return-state`` shapes a ``.keras`` model's outputs; legacy ``.h5`` weights have no outputs,
    so it is refused there and accepted for ``.keras``."""
    with pytest.raises(UsageError, match="--return-state does not apply to a TensorFlow checkpoint converted to .h5"):
        api.convert(TF1 / "layer_uni", tmp_path / "o.h5", return_state=True)
    assert not (tmp_path / "o.h5").exists()
    res = api.convert(TF1 / "layer_uni", tmp_path / "o.keras", return_state=True)
    assert str(tmp_path / "o.keras") in res.outputs


def test_batch_refuses_an_option_no_input_reads_and_hands_each_input_its_own(tmp_path):
    """Batch: ``--config`` over checkpoints only is refused before any work (exit 2); ``--rnn`` over a
    mixed run is the checkpoint's and does not fail the Keras file."""
    from gruconv import batch

    with pytest.raises(UsageError, match="--config does not apply to any input of this run"):
        batch.convert_many([TF1 / "layer_uni"], tmp_path / "a", jobs=1, echo=False,
                           config=str(FIXTURES / "keras" / "weights_only.json"))
    assert not (tmp_path / "a").exists()
    summary = batch.convert_many([TF1 / "layer_uni", FIXTURES / "keras" / "sequential.h5"], tmp_path / "b",
                                 jobs=1, echo=False, rnn="rnn/cudnn_gru")
    assert summary.exit_code == 0, [r.error for r in summary.records]
    assert {r.status for r in summary.records} == {"ok"}


def test_inspect_and_verify_refuse_options_their_reader_does_not_read(tmp_path):
    """``inspect``/``verify`` of a checkpoint with ``--config`` are refused as ``convert`` is (exit 2),
    and a Keras HDF5 file with ``--rnn``; the reader's own options still pass."""
    from gruconv.verify import verify

    cfg = FIXTURES / "keras" / "weights_only.json"
    with pytest.raises(UsageError, match="--config does not apply to a TensorFlow checkpoint"):
        api.inspect(TF1 / "layer_uni", config=cfg)
    with pytest.raises(UsageError, match="--config does not apply to a TensorFlow checkpoint"):
        verify(TF1 / "layer_uni", config=cfg, reference="oracle")
    with pytest.raises(UsageError, match="--rnn does not apply to a Keras HDF5 file"):
        api.inspect(FIXTURES / "keras" / "sequential.h5", rnn="x")
    assert api.inspect(TF1 / "layer_uni", rnn="rnn/cudnn_gru")["rnns"]


# --------------------------------------------------------------------------- LSTM: cross-check, planted errors


CELL0 = "rnn/cudnn_lstm/rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/"


def test_planted_gate_order_swap_is_caught(tf, tmp_path):
    """A kernel written in cuDNN's i, f, c, o order instead of TF's i, c, f, o: the cross-check
    points at the kernel; the converted model is off."""
    t = _tensors("layer_uni", "lstm")
    k = t[CELL0 + "kernel"].copy()
    H = k.shape[1] // 4
    k[:, H:2 * H], k[:, 2 * H:3 * H] = t[CELL0 + "kernel"][:, 2 * H:3 * H], t[CELL0 + "kernel"][:, H:2 * H]
    t[CELL0 + "kernel"] = k
    (e,) = _t1.read(_save(tf, tmp_path / "swap.ckpt", t)).stacks
    assert e.cross_check.status == "disagree" and e.cross_check.where.startswith(CELL0 + "kernel[")
    b = t[CELL0 + "bias"].copy()
    b[H:2 * H], b[2 * H:3 * H] = t[CELL0 + "bias"][2 * H:3 * H], t[CELL0 + "bias"][H:2 * H]
    t[CELL0 + "bias"] = b
    (e,) = _t1.read(_save(tf, tmp_path / "swap2.ckpt", t)).stacks
    assert e.cross_check.status == "disagree"


def test_planted_unsummed_bias_is_caught(tf, tmp_path):
    """A bias holding only the input-side half (not b_W + b_R): the cross-check points at it."""
    t = _tensors("layer_uni", "lstm")
    g = _golden("lstm", "lstm_2l_uni.npz")
    t[CELL0 + "bias"] = np.concatenate([g[f"b1_{k}"] for k in cells.TF_LSTM_GATE_ORDER]).astype(np.float32)
    (e,) = _t1.read(_save(tf, tmp_path / "b.ckpt", t)).stacks
    assert e.cross_check.status == "disagree" and e.cross_check.where.startswith(CELL0 + "bias[")
    assert e.cross_check.max_abs_diff > 0.01


def test_tf13_halves_that_do_not_sum_warn(tf, tmp_path):
    t = _tensors("tf13", "lstm")
    key = "encoder/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias_cudnn_1"
    t[key] = t[key] + np.float32(0.5)
    doc = _t1.read(_save(tf, tmp_path / "h.ckpt", t))
    assert any("'bias_cudnn_0' + 'bias_cudnn_1' differs from bias by up to 0.5" in w for w in doc.warnings)


def test_table_round_trip():
    """cells.from_params is the inverse of cells.to_params, for both cells and TF 1.3 halves."""
    from gruconv.model.canonical import GateParams

    rng = np.random.default_rng(1)
    for spec, G in ((cells.GRU, 3), (cells.LSTM, 4)):
        n_in, H = 5, 3
        p = GateParams(rng.standard_normal((G, H, n_in)), rng.standard_normal((G, H, H)),
                       rng.standard_normal((G, H)), rng.standard_normal((G, H)))
        t = cells.from_params(spec, p, n_in, H, tf13=True)
        assert {k: v.shape for k, v in t.items()} == spec.expected_shapes(n_in, H)
        q, diff = cells.to_params(spec, t, n_in, H)
        assert diff is None
        for a in ("input_weights", "recurrent_weights", "input_bias", "recurrent_bias"):
            np.testing.assert_array_equal(getattr(q, a), getattr(p, a))


# --------------------------------------------------------------------------- LSTM: hints, refusals


def test_opaque_only_cell_unknown_lists_both_cells(tf, tmp_path):
    """A user-named buffer stores no cell: without --cell every cell's shapes are listed."""
    t = _tensors("layer_uni_1l_h1", "lstm")
    prefix = _save(tf, tmp_path / "u.ckpt", {"params": t["cudnn_lstm/opaque_kernel"]})  # 24 values
    info = _t1.inspect(_t1.read(prefix, Options(hints={"variable": "params"})))
    (r,) = info["rnns"]
    assert r["cell"] is None and {c["cell"] for c in r["candidates"]} == {"gru", "lstm"}
    text = report.inspect_text(info)
    assert "GRU, input 5, units 1" in text and "LSTM, input 3, units 1" in text
    with pytest.raises(UsageError, match="Pass --cell"):
        from gruconv.writers.planning import plan

        plan(_t1.read(prefix, Options(hints={"variable": "params"})).document(), tmp_path / "x.keras", Options())
    doc = _t1.read(prefix, Options(hints={"variable": "params", "cell": "lstm", "num_layers": 1,
                                         "direction": "uni"}))
    assert doc.stacks[0].shape.to_dict() == MANIFESTS["lstm"]["layer_uni_1l_h1"]["stacks"][0]["shape"]


def test_hint_cell_contradicts_canonical():
    with pytest.raises(UsageError, match=r"cell=gru \(stored: lstm\)"):
        _read("layer_uni", "lstm", hints={"cell": "gru"})
    with pytest.raises(UsageError, match="hint cell must be one of gru, lstm"):
        _read("layer_uni", "lstm", hints={"cell": "rnn"})


def test_projection_refused(tf, tmp_path):
    t = _tensors("layer_uni", "lstm")
    t[CELL0 + "projection/kernel"] = np.zeros((6, 3), np.float32)
    with pytest.raises(UnsupportedError, match="projection.*Keras 3 LSTM has no projection"):
        _t1.read(_save(tf, tmp_path / "p.ckpt", t))


def test_forget_bias_hint(tmp_path):
    plain = _read("canonical_only_stacked", "lstm").stacks
    fb = _read("canonical_only_stacked", "lstm", hints={"forget_bias": 1.0})
    for a, b in zip(plain, fb.stacks):
        np.testing.assert_array_equal(b.stack.params[0].input_bias[1],
                                      (a.stack.params[0].input_bias[1].astype(np.float64) + 1).astype(np.float32))
        np.testing.assert_array_equal(b.stack.params[0].input_bias[0], a.stack.params[0].input_bias[0])
        assert "forget_bias 1" in b.source
    assert sum("forget_bias 1 added" in w for w in fb.warnings) == 2
    with pytest.raises(UsageError, match="forget_bias applies to LSTM stacks only"):
        _t1.read(FIXTURES / "tf1" / "layer_uni_1l", Options(hints={"forget_bias": 1.0}))
    assert _read("canonical_only_stacked", "lstm", hints={"forget_bias": 0}).warnings == []


def test_mis_sized_lstm_buffer_left_alone(tf, tmp_path):
    t = _tensors("layer_uni_1l_h1", "lstm")
    t["lm/cudnn_lstm/opaque_kernel"] = np.ones(1234, np.float32)
    doc = _t1.read(_save(tf, tmp_path / "m.ckpt", t))
    assert [e.scope for e in doc.stacks] == ["cudnn_lstm"]
    assert "lm/cudnn_lstm/opaque_kernel" in doc.other_keys


def test_natural_scope_order():
    scopes = ["cudnn_lstm_10", "cudnn_lstm_9", "cudnn_lstm", "cudnn_lstm_1"]
    assert sorted(scopes, key=names.natural_key) == ["cudnn_lstm", "cudnn_lstm_1", "cudnn_lstm_9", "cudnn_lstm_10"]


# --------------------------------------------------------------------------- rest.npz member names


CRAFTED = ["../../x", "/etc/x", "a\x1bb", "line\nbreak", "dense/kernel", "dense__kernel", "Dense/Kernel",
           "back\\slash", ".hidden", "ünïcode", "", "__manifest__", "x" * 400]


def test_npz_member_names_are_safe_and_unique():
    got = rest_npz.npz_member_names(CRAFTED)
    assert len({n.lower() for n in got}) == len(got)
    for n in got:
        assert n and n.isascii() and n.isprintable() and "/" not in n and "\\" not in n and ".." not in n
        assert not n.startswith(".") and len(n) <= 180 and n.lower() != "__manifest__"
    assert got[4] == "dense__kernel" and got[5] == "dense__kernel_2"


def test_rest_npz_with_crafted_names(tf, tmp_path):
    t = _tensors("layer_uni_1l_h1", "lstm")
    extra = {name: np.full(2, i, np.float32) for i, name in enumerate(CRAFTED) if name}
    prefix = _save(tf, tmp_path / "c.ckpt", {**t, **extra})
    from gruconv import api

    api.convert(prefix, tmp_path / "m.keras", Options())
    rest = tmp_path / "m.keras.rest.npz"
    with zipfile.ZipFile(rest) as z:
        members = z.namelist()
        manifest = json.loads(z.read(rest_npz.REST_MANIFEST))["tensors"]
    assert rest_npz.REST_MANIFEST in members
    for m in members:
        assert "/" not in m and "\\" not in m and ".." not in m and m.isascii() and m.isprintable()
    with np.load(rest) as z:
        arrays = {manifest[k]: z[k] for k in z.files if k != rest_npz.REST_MANIFEST}
    assert sorted(arrays) == sorted(list(extra) + ["global_step"])
    for name, v in extra.items():
        np.testing.assert_array_equal(arrays[name], v)
