"""Legacy Keras CuDNNLSTM files (and files mixing CuDNNLSTM and CuDNNGRU) -> Keras 3 LSTM.

As in ``test_keras_h5.py``, the numerical reference is built independently of the
converter: the tensors are read straight from the HDF5 file by the dataset paths in
``fixtures/keras_lstm/manifest.json``, packed into the buffer the way tf_keras's
``CuDNNLSTM._process_batch`` / ``CuDNNGRU._process_batch`` pack them (restated below),
split by the golden-tested cuDNN layout, and run through the float64 oracle.  The Keras
layout itself is checked against real cuDNN buffers (``fixtures/cudnn-golden-lstm``).
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
from gruconv import api
from gruconv.model.canonical import GateParams, RNNStack, StackShape
from gruconv.model.cudnn_layout import pack, unpack
from gruconv.model.keras_layout import cudnn_opaque, from_cudnn, to_cudnn, to_keras_lstm
from gruconv.verify.reference.oracle import run_stack

KERAS = FIXTURES / "keras_lstm"
GOLDEN = FIXTURES / "cudnn-golden-lstm"
MANIFEST = json.loads((KERAS / "manifest.json").read_text())["fixtures"]
MODEL_FILES = sorted(n for n, e in MANIFEST.items() if not e["weights_only"])
GOLDEN_FILES = sorted(p.name for p in GOLDEN.glob("*.npz") if "proj" not in p.name)  # Keras LSTM: no projection
CELL = {"CuDNNLSTM": "lstm", "CuDNNGRU": "gru"}


# --------------------------------------------------------------------------- independent reference

def tf_keras_pack(cls, kernel, recurrent_kernel, bias):
    """tf_keras ``_process_batch``, restated from the layers' literal slices.

    CuDNNLSTM: kernel[:, :H], [H:2H], [2H:3H], [3H:], the same of recurrent_kernel, then
    bias[:H], [H:2H], ..., [7H:]; CuDNNGRU: r, z, h = blocks 1, 0, 2 (see test_keras_h5.py).
    """
    H = recurrent_kernel.shape[0]
    k, rk, b = kernel, recurrent_kernel, bias
    if cls == "CuDNNLSTM":
        parts = [k[:, :H], k[:, H:2 * H], k[:, 2 * H:3 * H], k[:, 3 * H:],
                 rk[:, :H], rk[:, H:2 * H], rk[:, 2 * H:3 * H], rk[:, 3 * H:]] + \
                [b[j * H:(j + 1) * H] for j in range(8)]
    else:
        parts = [k[:, H:2 * H], k[:, :H], k[:, 2 * H:], rk[:, H:2 * H], rk[:, :H], rk[:, 2 * H:],
                 b[H:2 * H], b[:H], b[2 * H:3 * H], b[4 * H:5 * H], b[3 * H:4 * H], b[5 * H:]]
    return np.concatenate([np.ravel(p) for p in parts])


def reference(entry, raw, x):
    """Outputs of the ORIGINAL layer (float64) for batch-major x, per tf_keras semantics:
    ``output, [h, c]`` (LSTM) or ``output, [h]`` (GRU); Bidirectional: merged outputs, then the
    forward layer's states, then the backward layer's."""
    H, I, cls = entry["units"], entry["input_size"], entry["class"]
    shape = StackShape(I, H, cell=CELL[cls])
    lead = x.shape[:-2]
    x = x.reshape((-1,) + x.shape[-2:])  # TimeDistributed: the extra axis folds into the batch

    def run(arrays, reverse):
        buf = tf_keras_pack(cls, *arrays).astype(np.float64)
        xi = x[:, ::-1] if reverse else x
        y, hy, cy = run_stack(RNNStack("ref", shape, unpack(buf, shape)), xi.transpose(1, 0, 2))
        return y.transpose(1, 0, 2), [hy[0]] + ([] if cy is None else [cy[0]])

    seq = entry["return_sequences"]
    if entry["wrapper"] != "Bidirectional":
        y, st = run(raw["forward"], entry["go_backwards"])
        outs = [y if seq else st[0]] + (st if entry["return_state"] else [])
    else:
        (yf, stf), (yb, stb) = run(raw["forward"], False), run(raw["backward"], True)
        fw, bw = (yf, yb[:, ::-1]) if seq else (stf[0], stb[0])
        outs = {"concat": [np.concatenate([fw, bw], -1)], "sum": [fw + bw], "mul": [fw * bw],
                "ave": [(fw + bw) / 2], None: [fw, bw]}[entry["merge_mode"]]
        outs += stf + stb if entry["return_state"] else []
    return [o.reshape(lead + o.shape[1:]) for o in outs]


def raw_weights(path, entry):
    with h5py.File(path, "r") as f:
        return {d: tuple(f[entry["h5_weights"][d][r]][()] for r in ("kernel", "recurrent_kernel", "bias"))
                for d in entry["h5_weights"]}


def find_layer(model, entry):
    parts = entry["path"].split("/")
    if entry["wrapper"]:
        parts = parts[:-1]  # the wrapper is the layer that is called
    layer = model
    for p in parts:
        layer = layer.get_layer(p)
    return layer


def as_list(keras, out):
    return [np.asarray(keras.ops.convert_to_numpy(o), np.float64) for o in (out if isinstance(out, (list, tuple))
                                                                            else [out])]


def sample_input(entry, batch, rng):
    shape = (batch, 3, 9, entry["input_size"]) if entry["wrapper"] == "TimeDistributed" else \
        (batch, 9, entry["input_size"])
    return rng.uniform(-1, 1, shape)


@pytest.fixture(scope="module")
def keras():
    from gruconv.keras3.runtime import keras as k

    return k()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("converted_lstm")
    return {name: api.convert(KERAS / name, out / name.replace(".h5", ".keras")) for name in MODEL_FILES}


# --------------------------------------------------------------------------- inspect

@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_inspect_matches_manifest(name):
    info = api.inspect(KERAS / name)
    expected = MANIFEST[name]["cudnn_layers"]
    assert [r["name"] for r in info["rnns"]] == [e["path"] for e in expected]
    for got, exp in zip(info["rnns"], expected):
        sh = got["shape"]
        assert (sh["units"], sh["input_size"], sh["dtype"]) == (exp["units"], exp["input_size"], exp["dtype"])
        assert got["cell"] == CELL[exp["class"]] == sh["cell"]
        assert got["kind"] == (exp["class"] if exp["wrapper"] is None else f"{exp['wrapper']}({exp['class']})")
        assert sh["bidirectional"] == (exp["wrapper"] == "Bidirectional")
        assert got["converts_to"].startswith(
            {None: "", "Bidirectional": "Bidirectional(", "TimeDistributed": "TimeDistributed("}[exp["wrapper"]]
            + ("LSTM(" if exp["class"] == "CuDNNLSTM" else "GRU("))
        if not MANIFEST[name]["weights_only"]:
            for flag in ("return_sequences", "return_state", "go_backwards", "stateful"):
                assert got["options"].get(flag, False) == exp[flag], flag
            if exp["wrapper"] == "Bidirectional":
                assert got["merge_mode"] == exp["merge_mode"]


def test_inspect_lists_gru_and_lstm_of_a_mixed_model():
    from click.testing import CliRunner

    from gruconv.cli import main

    r = CliRunner().invoke(main, ["inspect", str(KERAS / "mixed.h5")])
    assert r.exit_code == 0, r.output
    targets = [l for l in r.output.splitlines() if l.startswith(("    -> torch: ", "    -> onnx: "))]
    assert len(targets) == 6  # per RNN what the torch and onnx targets get (issue 21)
    lines = [l for l in r.output.splitlines() if l not in targets]
    eligibility = next(i for i, l in enumerate(lines) if l.startswith("cuDNN eligibility"))
    lines, eligibility = lines[:eligibility], lines[eligibility:]  # what the converted layers run on (issue 22)
    assert eligibility[-1].startswith("  summary: tensorflow 4 cudnn;"), eligibility
    assert lines[1] == ("  cu_dnngru: CuDNNGRU, input 5, units 6, 1 layer(s), uni, linear input, float32, "
                        "234 params")
    assert lines[3] == ("  bidirectional/cu_dnnlstm: Bidirectional(CuDNNLSTM), input 6, units 4, 1 layer(s), bi, "
                        "linear input, float32, 384 params")
    assert lines[4] == ("    -> Bidirectional(LSTM(units=4, activation='tanh', recurrent_activation='sigmoid', "
                        "return_sequences=True), merge_mode='concat')")
    assert lines[5] == ("    bias: cuDNN's input and recurrent biases summed in float64, rounded once to float32 "
                        "(LSTM has one bias; at most half an ulp per bias value)")
    assert lines[6].startswith("  cu_dnnlstm_1: CuDNNLSTM, input 8, units 3,")
    assert len(lines) == 9


# --------------------------------------------------------------------------- numbers

@pytest.mark.parametrize("name", MODEL_FILES)
def test_converted_layers_match_float64_reference(name, converted, keras):
    model = keras.saving.load_model(converted[name].outputs[0])  # plain Keras 3: no custom objects
    rng = np.random.default_rng(7)
    for entry in MANIFEST[name]["cudnn_layers"]:
        raw = raw_weights(KERAS / name, entry)
        layer = find_layer(model, entry)
        batch = MANIFEST[name]["inputs"][0]["shape"][0] if entry["stateful"] else 4
        x = sample_input(entry, batch, rng).astype(entry["dtype"])
        if entry["stateful"]:
            layer.reset_states()
        got = as_list(keras, layer(x))
        ref = reference(entry, raw, x.astype(np.float64))
        assert len(got) == len(ref)
        tol = 4e-3 if entry["dtype"] == "float16" else 1e-5
        for g, r in zip(got, ref):
            assert g.shape == r.shape
            err = np.abs(g - r).max()
            assert err <= tol, f"{name} {entry['path']}: max abs error {err:.3e}"


@pytest.mark.parametrize("name", MODEL_FILES)
def test_verify_passes(name, converted):
    from gruconv.verify import verify

    rep = verify(KERAS / name, converted[name].outputs[0], reference="oracle")
    assert rep.passed, [(c.name, c.max_abs) for c in rep.checks]
    entries = MANIFEST[name]["cudnn_layers"]
    assert {c.name.split(":")[0] for c in rep.checks} >= {e["path"] for e in entries}
    if any(e["return_state"] and e["class"] == "CuDNNLSTM" for e in entries):
        assert any(c.name.endswith("state c") for c in rep.checks)


def test_converted_config_is_cudnn_compatible_lstm(converted, keras):
    for name in MODEL_FILES:
        model = keras.saving.load_model(converted[name].outputs[0])
        entries = MANIFEST[name]["cudnn_layers"]
        for entry in entries:
            layer = find_layer(model, entry)
            inner = getattr(layer, "forward_layer", None) or getattr(layer, "layer", None) or layer
            if entry["class"] == "CuDNNGRU":
                assert isinstance(inner, keras.layers.GRU)
                continue
            assert type(inner) is keras.layers.LSTM, (name, entry["path"])
            cfg = inner.get_config()
            assert (cfg["activation"], cfg["recurrent_activation"], cfg["use_bias"], cfg["unroll"],
                    cfg["dropout"], cfg["recurrent_dropout"]) == ("tanh", "sigmoid", True, False, 0.0, 0.0)
            assert cfg["unit_forget_bias"] == entry["unit_forget_bias"]
            assert [tuple(w.shape) for w in inner.weights] == [
                (entry["input_size"], 4 * entry["units"]), (entry["units"], 4 * entry["units"]),
                (4 * entry["units"],)]


def test_options_carried(converted, keras):
    model = keras.saving.load_model(converted["options.h5"].outputs[0])
    cfg = model.get_layer("regularized_lstm").get_config()
    assert cfg["unit_forget_bias"] is False
    assert cfg["kernel_initializer"]["class_name"] == "HeNormal"
    assert cfg["recurrent_initializer"]["config"]["gain"] == 0.5
    assert cfg["bias_initializer"]["config"]["value"] == 0.1
    assert cfg["kernel_regularizer"]["class_name"] == "L2"
    assert cfg["bias_constraint"]["class_name"] == "MaxNorm"
    assert any("bias_constraint" in w and "(4*units,)" in w and "(8*units,)" in w
               for w in converted["options.h5"].warnings)


@pytest.mark.parametrize("control", ["hard_sigmoid", "bias_not_summed", "kernel_transposed_not_reshaped"])
def test_controls_fail_the_numerical_check(control, converted, keras):
    """Plausible wrong conversions must fail the check that the real one passes."""
    name = "sequential.h5"
    entry = MANIFEST[name]["cudnn_layers"][0]  # I=6, H=8: reshape and transpose differ
    raw = raw_weights(KERAS / name, entry)
    model = keras.saving.load_model(converted[name].outputs[0])
    layer = find_layer(model, entry)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 9, entry["input_size"])).astype("float32")
    ref = reference(entry, raw, x.astype(np.float64))[0]
    good = np.abs(as_list(keras, layer(x))[0] - ref).max()
    assert good <= 1e-5
    k, rk, b = layer.get_weights()
    H, I = entry["units"], entry["input_size"]
    if control == "hard_sigmoid":
        cfg = layer.get_config()
        cfg["recurrent_activation"] = "hard_sigmoid"
        bad = keras.layers.LSTM.from_config(cfg)
        bad.build((None, None, I))
        bad.set_weights([k, rk, b])
        layer = bad
    elif control == "bias_not_summed":  # only the input-side half kept (a (8H,) -> (4H,) "fix")
        layer.set_weights([k, rk, raw["forward"][2][:4 * H].astype("float32")])
    else:  # per gate W = block.T instead of block.reshape(H, I): the Keras block becomes the stored one
        layer.set_weights([raw["forward"][0].astype("float32"), rk, b])
    err = np.abs(as_list(keras, layer(x))[0] - ref).max()
    assert err > 1e-2, f"{control}: error {err:.3e} should be far outside 1e-5"


# --------------------------------------------------------------------------- weights-only files

def test_weights_only_to_h5_loads_into_rebuilt_keras3_model(tmp_path, keras):
    out = tmp_path / "w.h5"
    result = api.convert(KERAS / "weights_only.h5", out)
    assert [r["cell"] for r in result.rnns] == ["gru", "lstm", "lstm"]
    # The architecture rebuilt by hand in Keras 3, as a user would (GRU / LSTM for the cuDNN layers).
    model = keras.Sequential([
        keras.Input((None, 5)),
        keras.layers.GRU(6, return_sequences=True, reset_after=True, name="cu_dnngru"),
        keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True), name="bidirectional"),
        keras.layers.LSTM(3, name="cu_dnnlstm_1"),
        keras.layers.Dense(2, name="dense"),
    ])
    model.load_weights(str(out))
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (3, 7, 5))
    act = x
    for entry in MANIFEST["weights_only.h5"]["cudnn_layers"]:
        raw = raw_weights(KERAS / "weights_only.h5", entry)
        got = as_list(keras, find_layer(model, entry)(act.astype("float32")))[0]
        ref = reference(entry, raw, act.astype("float32").astype(np.float64))[0]
        assert np.abs(got - ref).max() <= 1e-5, entry["path"]
        act = ref


def test_weights_only_with_config_gives_keras_model(tmp_path, keras):
    out = tmp_path / "w.keras"
    api.convert(KERAS / "weights_only.h5", out, config=KERAS / "weights_only.json")
    model = keras.saving.load_model(out)
    assert [type(l).__name__ for l in model.layers] == ["GRU", "Bidirectional", "LSTM", "Dense"]


# --------------------------------------------------------------------------- layout, against real cuDNN

def _golden(name):
    with np.load(GOLDEN / name) as d:
        g = {k: d[k] for k in d.files}
    g["config"] = json.loads(str(g["config"]))
    return g


def _golden_shape(g):
    c = g["config"]
    return StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", "float32", "lstm")


def _golden_params(g, shape):
    out = []
    for p in range(shape.num_pseudo_layers):
        has_w = f"W{p}_0" in g
        out.append(GateParams(
            np.stack([g[f"W{p}_{k}"] for k in range(4)]) if has_w else None,
            np.stack([g[f"W{p}_{k}"] for k in range(4, 8)]),
            np.stack([g[f"b{p}_{k}"] for k in range(4)]),
            np.stack([g[f"b{p}_{k}"] for k in range(4, 8)])))
    return out


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_layout_round_trip_against_real_cudnn(name):
    """Every golden LSTM buffer: unpack/pack bit for bit; and each pseudo-layer stored as a CuDNNLSTM
    (to_cudnn) packs, the way the layer packs, to exactly that pseudo-layer's regions of cuDNN's
    own weight space, and reads back (from_cudnn) bit for bit."""
    g = _golden(name)
    shape = _golden_shape(g)
    params = _golden_params(g, shape)
    np.testing.assert_array_equal(pack(params, shape), g["opaque"])
    for p, q in zip(unpack(g["opaque"], shape), params):
        for key, arr in q.arrays().items():
            np.testing.assert_array_equal(getattr(p, key), arr)
    layout = g["layout"]
    for p, q in enumerate(params):
        if q.input_weights is None:
            continue  # skip input: a CuDNNLSTM is always linear input
        rows = layout[layout[:, 0] == p]
        rows = rows[np.lexsort((rows[:, 1], rows[:, 2]))]  # matrices (k 0..7), then biases
        regions = np.concatenate([g["opaque"][off:off + n] for off, n in rows[:, 3:5]])
        k, rk, b = to_cudnn(q, 'lstm')
        I, H = q.input_weights.shape[2], q.recurrent_weights.shape[1]
        assert (k.shape, rk.shape, b.shape) == ((I, 4 * H), (H, 4 * H), (8 * H,))
        np.testing.assert_array_equal(cudnn_opaque(k, rk, b, 'lstm'), regions)
        np.testing.assert_array_equal(tf_keras_pack("CuDNNLSTM", k, rk, b), regions)
        back = from_cudnn(k, rk, b, cell='lstm')
        for key, arr in q.arrays().items():
            np.testing.assert_array_equal(getattr(back, key), arr)


@pytest.mark.parametrize("name", [n for n in GOLDEN_FILES if "varlen" not in n])
def test_keras_lstm_weights_reproduce_cudnn(name, keras):
    """to_keras_lstm's arrays in Keras 3 LSTMs (float64; skip input = identity kernels) reproduce cuDNN's
    own float64 outputs: y, hy and cy of every golden file (stacked, bidirectional, skip input)."""
    g = _golden(name)
    shape = _golden_shape(g)
    params = _golden_params(g, shape)
    x = g["x"].astype(np.float64).transpose(1, 0, 2)  # batch-major
    hy, cy = [], []
    for layer in range(shape.num_layers):
        outs = []
        for d in range(shape.num_directions):
            p = shape.pseudo_layer(layer, d)
            lstm = keras.layers.LSTM(shape.units, return_sequences=True, return_state=True, go_backwards=d == 1,
                                     dtype="float64")
            lstm.build((None, None, x.shape[-1]))
            lstm.set_weights([w.astype(np.float64) for w in
                              to_keras_lstm(params[p].astype(np.float64), shape.layer_input_size(layer))])
            y, h, c = as_list(keras, lstm(x, initial_state=[g["h0"][p].astype(np.float64),
                                                            g["c0"][p].astype(np.float64)]))
            outs.append(y[:, ::-1] if d == 1 else y)
            hy.append(h)
            cy.append(c)
        x = np.concatenate(outs, -1)
    assert np.abs(x.transpose(1, 0, 2) - g["y_f64"]).max() <= 1e-12
    assert np.abs(np.stack(hy) - g["hy_f64"]).max() <= 1e-12
    assert np.abs(np.stack(cy) - g["cy_f64"]).max() <= 1e-12


def test_lstm_bias_is_summed_in_float64_and_rounded_once():
    rng = np.random.default_rng(5)
    H, I = 16, 3
    k = rng.standard_normal((I, 4 * H)).astype(np.float32)
    rk = rng.standard_normal((H, 4 * H)).astype(np.float32)
    b = (rng.standard_normal(8 * H) * 10).astype(np.float32)
    bias = to_keras_lstm(from_cudnn(k, rk, b, cell='lstm'))[2]
    assert bias.dtype == np.float32 and bias.shape == (4 * H,)
    np.testing.assert_array_equal(bias, (b[:4 * H].astype(np.float64) + b[4 * H:].astype(np.float64))
                                  .astype(np.float32))


def test_input_kernel_is_reinterpreted_not_transposed():
    I, H = 3, 2
    k = np.arange(I * 4 * H, dtype=np.float64).reshape(I, 4 * H)
    p = from_cudnn(k, np.zeros((H, 4 * H)), np.zeros(8 * H), cell="lstm")
    for g in range(4):
        np.testing.assert_array_equal(p.input_weights[g], k[:, g * H:(g + 1) * H].reshape(H, I))
    assert not np.array_equal(p.input_weights[0], k[:, :H].T)
    # the cell-parameterised functions are the same as the LSTM-named ones
    np.testing.assert_array_equal(cudnn_opaque(k, np.zeros((H, 4 * H)), np.zeros(8 * H), "lstm"),
                                  cudnn_opaque(k, np.zeros((H, 4 * H)), np.zeros(8 * H), "lstm"))
    q = from_cudnn(k, np.zeros((H, 4 * H)), np.zeros(8 * H), cell="lstm")
    np.testing.assert_array_equal(q.input_weights, p.input_weights)
