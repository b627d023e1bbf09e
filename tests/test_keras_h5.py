"""Legacy Keras CuDNNGRU files -> Keras 3: structure, numbers, and controls that must fail.

The numerical reference here is built independently of the converter: the
CuDNNGRU tensors are read straight from the HDF5 file by the dataset paths in
``fixtures/keras/manifest.json``, packed into the buffer the way tf_keras's
``CuDNNGRU._process_batch`` packs them (written out again below), split by
the golden-tested cuDNN layout, and run through the float64 oracle.
"""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
from gruconv import api
from gruconv.model.canonical import RNNStack, StackShape
from gruconv.model.cudnn_layout import unpack
from gruconv.readers import keras_h5
from gruconv.model.keras_layout import cudnn_opaque, from_cudnn, to_cudnn
from gruconv.verify.reference.oracle import run_stack

KERAS = FIXTURES / "keras"
MANIFEST = json.loads((KERAS / "manifest.json").read_text())["fixtures"]
MODEL_FILES = sorted(n for n, e in MANIFEST.items() if not e["weights_only"])
CONVERTIBLE = [n for n in MODEL_FILES if MANIFEST[n]["cudnngru_layers"]]


def tf_keras_pack(kernel, recurrent_kernel, bias):
    """tf_keras CuDNNGRU._process_batch, restated: r, z, h slices flattened as stored, then biases."""
    H = recurrent_kernel.shape[0]
    k, rk, b = kernel, recurrent_kernel, bias
    parts = [k[:, H:2 * H], k[:, :H], k[:, 2 * H:], rk[:, H:2 * H], rk[:, :H], rk[:, 2 * H:],
             b[H:2 * H], b[:H], b[2 * H:3 * H], b[4 * H:5 * H], b[3 * H:4 * H], b[5 * H:]]
    return np.concatenate([np.ravel(p) for p in parts])


def reference(entry, raw, x):
    """Outputs of the ORIGINAL layer (float64) for batch-major x, per tf_keras CuDNNGRU semantics."""
    H, I = entry["units"], entry["input_size"]
    shape = StackShape(I, H)

    def run(arrays, reverse):
        buf = tf_keras_pack(*arrays).astype(np.float64)
        xi = x[:, ::-1] if reverse else x
        y, hy, _ = run_stack(RNNStack("ref", shape, unpack(buf, shape)), xi.transpose(1, 0, 2))
        return y.transpose(1, 0, 2), hy[0]

    seq = entry["return_sequences"]
    if entry["wrapper"] != "Bidirectional":
        y, h = run(raw["forward"], entry["go_backwards"])
        return [y if seq else h] + ([h] if entry["return_state"] else [])
    (yf, hf), (yb, hb) = run(raw["forward"], False), run(raw["backward"], True)
    fw, bw = (yf, yb[:, ::-1]) if seq else (hf, hb)
    merged = {"concat": [np.concatenate([fw, bw], -1)], "sum": [fw + bw], "mul": [fw * bw],
              "ave": [(fw + bw) / 2], None: [fw, bw]}[entry["merge_mode"]]
    return merged + ([hf, hb] if entry["return_state"] else [])


def raw_weights(path, entry):
    with h5py.File(path, "r") as f:
        return {d: tuple(f[entry["h5_weights"][d][r]][()] for r in ("kernel", "recurrent_kernel", "bias"))
                for d in entry["h5_weights"]}


def find_layer(keras, model, entry):
    parts = entry["path"].split("/")
    layer = model
    for p in parts:
        layer = layer.get_layer(p)
    return layer


@pytest.fixture(scope="module")
def keras():
    from gruconv.keras3.runtime import keras as k

    return k()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("converted")
    return {name: api.convert(KERAS / name, out / name.replace(".h5", ".keras")) for name in CONVERTIBLE}


@pytest.mark.parametrize("name", MODEL_FILES)
def test_inspect_matches_manifest(name):
    info = api.inspect(KERAS / name)
    expected = MANIFEST[name]["cudnngru_layers"]
    assert len(info["rnns"]) == len(expected)
    for got, exp in zip(info["rnns"], expected):
        sh = got["shape"]
        assert (sh["units"], sh["input_size"], sh["dtype"]) == (exp["units"], exp["input_size"], exp["dtype"])
        assert sh["bidirectional"] == (exp["wrapper"] == "Bidirectional") and got["cell"] == "gru"
        for flag in ("return_sequences", "return_state", "go_backwards", "stateful"):
            assert got["options"].get(flag, False) == exp[flag], flag
        if exp["wrapper"] == "Bidirectional":
            assert got["merge_mode"] == exp["merge_mode"]


@pytest.mark.parametrize("name", CONVERTIBLE)
def test_converted_layers_match_float64_reference(name, converted, keras):
    model = keras.saving.load_model(converted[name].outputs[0])  # plain Keras 3: no custom objects
    rng = np.random.default_rng(7)
    for entry in MANIFEST[name]["cudnngru_layers"]:
        raw = raw_weights(KERAS / name, entry)
        layer = find_layer(keras, model, entry)
        batch = 4 if not entry["stateful"] else MANIFEST[name]["inputs"][0]["shape"][0]
        x = rng.uniform(-1, 1, (batch, 9, entry["input_size"]))
        if entry["stateful"]:
            layer.reset_states()
        got = layer(x.astype(entry["dtype"]))
        got = [np.asarray(keras.ops.convert_to_numpy(g), np.float64) for g in (got if isinstance(got, (list, tuple)) else [got])]
        ref = reference(entry, raw, x.astype(entry["dtype"]).astype(np.float64))
        assert len(got) == len(ref)
        tol = 4e-3 if entry["dtype"] == "float16" else 1e-5
        for g, r in zip(got, ref):
            err = np.abs(g - r).max()
            assert err <= tol, f"{name} {entry['path']}: max abs error {err:.3e}"


@pytest.mark.parametrize("name", CONVERTIBLE)
def test_converted_model_keeps_names_and_signature(name, converted, keras):
    import tf_keras  # the original framework, to compare model signatures (never runs a CuDNNGRU)

    from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU  # noqa: F401 - registers the class

    original = tf_keras.models.load_model(KERAS / name, compile=False)
    model = keras.saving.load_model(converted[name].outputs[0])
    assert model.name == original.name
    assert [l.name for l in model.layers] == [l.name for l in original.layers]
    assert [tuple(t.shape) for t in model.inputs] == [tuple(t.shape) for t in original.inputs]
    assert [tuple(t.shape) for t in model.outputs] == [tuple(t.shape) for t in original.outputs]
    for layer in keras_layers_deep(keras, model):
        if isinstance(layer, keras.layers.GRU):
            cfg = layer.get_config()
            assert (cfg["activation"], cfg["recurrent_activation"], cfg["reset_after"], cfg["use_bias"]) == \
                ("tanh", "sigmoid", True, True)


def keras_layers_deep(keras, model):
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from keras_layers_deep(keras, layer)
        for attr in ("forward_layer", "backward_layer", "layer"):
            inner = getattr(layer, attr, None)
            if inner is not None:
                yield inner


def test_non_gru_weights_carried_over_byte_for_byte(converted, keras):
    model = keras.saving.load_model(converted["functional_two_gru.h5"].outputs[0])
    with h5py.File(KERAS / "functional_two_gru.h5", "r") as f:
        for layer in model.layers:
            if isinstance(layer, keras.layers.Dense):
                g = f["model_weights"][layer.name]
                names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
                stored = [g[n][()] for n in names]
                for a, b in zip(layer.get_weights(), stored):
                    assert a.tobytes() == b.tobytes()


def test_reader_and_cudnngru_packing_agree():
    """from_cudnn (converter) equals unpack(cudnn_opaque) (reference), and to_cudnn inverts it (GRU)."""
    rng = np.random.default_rng(3)
    I, H = 5, 4
    k, rk, b = rng.standard_normal((I, 3 * H)), rng.standard_normal((H, 3 * H)), rng.standard_normal(6 * H)
    p = from_cudnn(k, rk, b)
    q = unpack(cudnn_opaque(k, rk, b), StackShape(I, H, dtype="float64"))[0]
    for a, c in zip((p.input_weights, p.recurrent_weights, p.input_bias, p.recurrent_bias),
                    (q.input_weights, q.recurrent_weights, q.input_bias, q.recurrent_bias)):
        np.testing.assert_array_equal(a, c)
    for a, c in zip(to_cudnn(p), (k, rk, b)):
        np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(cudnn_opaque(k, rk, b), tf_keras_pack(k, rk, b))


def test_input_kernel_is_reinterpreted_not_transposed():
    """The trap DESIGN.md names: a CuDNNGRU input kernel block is reshape(H, I), not .T."""
    I, H = 3, 2
    k = np.arange(I * 3 * H, dtype=np.float64).reshape(I, 3 * H)
    p = from_cudnn(k, np.zeros((H, 3 * H)), np.zeros(6 * H))
    r_block = k[:, H:2 * H]
    np.testing.assert_array_equal(p.input_weights[0], r_block.reshape(H, I))
    assert not np.array_equal(p.input_weights[0], r_block.T)


@pytest.mark.parametrize("control", ["hard_sigmoid", "reshape_only_bias"])
def test_controls_fail_the_numerical_check(control, converted, keras, tmp_path):
    """Conversions that Keras 2-era recipes produce must fail the same check the real one passes."""
    name = "sequential.h5"
    entry = MANIFEST[name]["cudnngru_layers"][0]
    raw = raw_weights(KERAS / name, entry)
    model = keras.saving.load_model(converted[name].outputs[0])
    layer = find_layer(keras, model, entry)
    if control == "hard_sigmoid":
        cfg = layer.get_config()
        cfg["recurrent_activation"] = "hard_sigmoid"
        bad = keras.layers.GRU.from_config(cfg)
        bad.build((None, None, entry["input_size"]))
        bad.set_weights(layer.get_weights())
        layer = bad
    else:  # kernels loaded as stored, bias merely reshaped to (2, 3H)
        k, rk, b = raw["forward"]
        layer.set_weights([k, rk, b.reshape(2, -1)])
    x = np.random.default_rng(1).uniform(-1, 1, (4, 9, entry["input_size"]))
    got = np.asarray(keras.ops.convert_to_numpy(layer(x.astype("float32"))), np.float64)
    err = np.abs(got - reference(entry, raw, x.astype("float32").astype(np.float64))[0]).max()
    assert err > 1e-2, f"{control}: error {err:.3e} should be far outside 1e-5"


def test_weights_only_to_h5_loads_into_rebuilt_keras3_model(tmp_path, keras):
    out = tmp_path / "w.h5"
    result = api.convert(KERAS / "weights_only.h5", out)
    assert result.outputs == [str(out)]
    # Rebuild the architecture by hand in Keras 3, as a user would: GRU where the JSON has CuDNNGRU.
    arch = json.loads((KERAS / "weights_only.json").read_text())
    layers = arch["config"]["layers"]
    model = keras.Sequential(name=arch["config"]["name"])
    model.add(keras.Input(tuple(layers[0]["config"]["batch_input_shape"][1:])))
    for l in layers[1:]:
        c = l["config"]
        if l["class_name"] == "CuDNNGRU":
            model.add(keras.layers.GRU(c["units"], return_sequences=c["return_sequences"], reset_after=True,
                                       recurrent_activation="sigmoid", name=c["name"]))
        else:
            assert l["class_name"] == "Dense"
            model.add(keras.layers.Dense(c["units"], activation=c["activation"], name=c["name"]))
    model.load_weights(str(out))
    entry = MANIFEST["weights_only.h5"]["cudnngru_layers"][0]
    raw = raw_weights(KERAS / "weights_only.h5", entry)
    x = np.random.default_rng(2).uniform(-1, 1, (3, 7, entry["input_size"])).astype("float32")
    got = keras.ops.convert_to_numpy(model.get_layer(entry["path"])(x))
    err = np.abs(got - reference(entry, raw, x.astype(np.float64))[0]).max()
    assert err <= 1e-5


def test_weights_only_with_config_gives_keras_model(tmp_path, keras):
    out = tmp_path / "w.keras"
    api.convert(KERAS / "weights_only.h5", out, config=KERAS / "weights_only.json")
    model = keras.saving.load_model(out)
    assert any(isinstance(l, keras.layers.GRU) for l in model.layers)


def test_weights_only_without_config_refuses_keras_output(tmp_path):
    from gruconv.errors import UsageError

    with pytest.raises(UsageError, match="--config"):
        api.convert(KERAS / "weights_only.h5", tmp_path / "w.keras")
    assert not (tmp_path / "w.keras").exists()


def test_nothing_to_convert_writes_nothing_unless_forced(tmp_path, keras):
    out = tmp_path / "plain.keras"
    r = api.convert(KERAS / "plain_gru.h5", out)
    assert r.nothing_to_convert and not out.exists()
    r = api.convert(KERAS / "plain_gru.h5", out, force=True)
    assert out.exists()
    keras.saving.load_model(out)


def test_optimizer_state_dropped_with_warning(converted):
    warnings = converted["options.h5"].warnings
    assert any("optimizer state" in w and "dropped" in w for w in warnings)


def test_attributes_stored_as_bytes_also_read(tmp_path):
    """Keras 2.0-era writers stored attributes as fixed-length bytes; both spellings read the same."""
    src = KERAS / "sequential.h5"
    copy = tmp_path / "bytes.h5"
    shutil.copy(src, copy)
    with h5py.File(copy, "r+") as f:
        cfg = f.attrs["model_config"]
        f.attrs["model_config"] = np.bytes_(cfg.encode() if isinstance(cfg, str) else cfg)
        g = f["model_weights"]
        g.attrs["layer_names"] = np.array([n.encode() if isinstance(n, str) else n for n in g.attrs["layer_names"]],
                                          dtype="S")
    a, b = api.inspect(src), api.inspect(copy)
    assert [r["shape"]["units"] for r in a["rnns"]] == [r["shape"]["units"] for r in b["rnns"]]


def test_training_config_carried_over(converted, keras):
    """tf.keras wrote optimizer 'Custom>Adam' and loss 'mse'; the converted model is compiled with both."""
    assert not any("training config" in w for w in converted["options.h5"].warnings)
    model = keras.saving.load_model(converted["options.h5"].outputs[0])
    assert type(model.optimizer).__name__ == "Adam"
    assert abs(float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)) - 1e-3) < 1e-9
    assert model.loss == "mse"


def test_keras_2_2_style_config_converts(tmp_path):
    """A Keras <= 2.2.2-style file (derived from sequential.h5: no "module" keys, the Sequential config a
    bare layer list, no InputLayer, attributes as bytes) converts and matches the reference."""
    from gruconv.verify import verify

    path = tmp_path / "k22.h5"
    shutil.copy(KERAS / "sequential.h5", path)

    def strip(o):
        if isinstance(o, dict):
            o.pop("module", None)
            o.pop("registered_name", None)
            for v in o.values():
                strip(v)
        elif isinstance(o, list):
            for v in o:
                strip(v)

    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        strip(cfg)
        layers = cfg["config"]["layers"]
        layers[1]["config"]["batch_input_shape"] = layers[0]["config"]["batch_input_shape"]
        for layer in layers:
            layer["config"].pop("time_major", None)
        cfg["config"] = layers[1:]
        f.attrs["model_config"] = np.bytes_(json.dumps(cfg).encode())
        f.attrs["keras_version"] = np.bytes_(b"2.2.2")
    out = tmp_path / "k22.keras"
    api.convert(path, out)
    rep = verify(path, out, reference="oracle")
    assert rep.passed and len(rep.checks) == 3


def test_regularizers_constraints_initializers_carried(converted, keras):
    model = keras.saving.load_model(converted["options.h5"].outputs[0])
    cfg = model.get_layer("regularized_gru").get_config()
    with h5py.File(KERAS / "options.h5", "r") as f:
        original = next(l for l in json.loads(f.attrs["model_config"])["config"]["layers"]
                        if l["class_name"] == "CuDNNGRU")["config"]
    for key in ("kernel_initializer", "recurrent_initializer", "bias_initializer", "kernel_regularizer",
                "recurrent_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                "recurrent_constraint", "bias_constraint"):
        assert cfg[key]["class_name"] == original[key]["class_name"], key
        # Keras 3 may add arguments with their defaults (HeNormal: input_axes/output_axes = None)
        assert {k: v for k, v in cfg[key]["config"].items() if k in original[key]["config"]} == \
            original[key]["config"], key
    assert any("bias_constraint" in w for w in converted["options.h5"].warnings)


# --------------------------------------------------------------------------- the writers registry (issue 16)

def test_batch_keras_weights_output_is_named_weights_h5(tmp_path):
    """``--format keras-weights`` is Keras 3's weights file, named ``.weights.h5`` for every input
    (it was ``sequential.keras`` holding HDF5 bytes for a Keras HDF5 input), and loads back."""
    from gruconv import batch

    summary = batch.convert_many([KERAS / "sequential.h5"], tmp_path / "o", jobs=1, echo=False,
                                 format="keras-weights")
    assert summary.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if not p.name.startswith(".")) == \
        ["sequential.weights.h5"]
    assert (tmp_path / "o" / "sequential.weights.h5").read_bytes()[:4] == b"\x89HDF"


@pytest.mark.parametrize("flags, named", [
    (["--return-state"], "--return-state"),
    (["--mask-input", "--initial-state"], "--initial-state, --mask-input"),
    (["--rnn", "x", "--num-units", "3"], "--num-units, --rnn"),
])
def test_options_no_reader_or_writer_reads_are_refused(tmp_path, flags, named):
    """An option neither the Keras HDF5 reader nor the writer reads is a usage error naming it, in
    one line, exit 2, nothing written (it was silently ignored, exit 0)."""
    from click.testing import CliRunner

    from gruconv.cli import main

    out = tmp_path / "o.keras"
    res = CliRunner().invoke(main, ["convert", str(KERAS / "sequential.h5"), str(out)] + flags)
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("gruconv: error: ") and named in lines[0], res.output
    assert "a Keras HDF5 file converted to .keras" in lines[0]
    assert not out.exists()


def test_options_the_writer_reads_still_pass(tmp_path):
    """``--config`` is the Keras HDF5 reader's: a weights-only file with it converts (control for
    the refusal above)."""
    res = api.convert(KERAS / "weights_only.h5", tmp_path / "o.keras", config=KERAS / "weights_only.json")
    assert res.outputs == [str(tmp_path / "o.keras")]
