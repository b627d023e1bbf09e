"""cuDNN layers as tf.keras 2.x users saved them (issue 18): generic layer names in HDF5 weights files,
and TF2 object-based checkpoints (``save_weights`` without ``.h5``, ``tf.train.Checkpoint``).

Fixtures: ``fixtures/tf2`` (``fixtures/make_tf2_fixtures.py``, tf_keras 2.21's real writers).

Independent reference (no gruconv code): tf_keras itself, in a subprocess.  It rebuilds the original
cuDNN architecture, restores the checkpoint / weights file into it (a restore runs no cuDNN op, so the
CPU suffices), then rewrites every CuDNNGRU/CuDNNLSTM to GRU(reset_after=True)/LSTM with the cuDNN
settings, saves the cuDNN model's weights as legacy HDF5 and loads them into the plain twin: tf_keras's
``load_weights`` converts cuDNN weights by shape itself (``_convert_rnn_weights`` in
``tf_keras/src/saving/legacy/hdf5_format.py``).  ``predict`` of that twin on fixed inputs is the
reference; gruconv's outputs, loaded by Keras 3 in another subprocess, must agree within 1e-5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure
from gruconv import api
from gruconv.cli import main as cli

TF2 = FIXTURES / "tf2"
MANIFEST = json.loads((TF2 / "manifest.json").read_text())["fixtures"]

# tf_keras: restore the original (cuDNN) model, hand its weights to a plain-layer twin, predict.
REFERENCE = r'''
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import numpy as np, tensorflow as tf, tf_keras as K

def plain(obj):
    if isinstance(obj, dict):
        if obj.get("class_name") in ("CuDNNGRU", "CuDNNLSTM"):
            obj["class_name"] = obj["class_name"][5:]
            obj.pop("module", None); obj.pop("registered_name", None)
            obj["config"].update(activation="tanh", recurrent_activation="sigmoid", use_bias=True)
            if obj["class_name"] == "GRU":
                obj["config"]["reset_after"] = True
        for v in obj.values():
            plain(v)
    elif isinstance(obj, list):
        for v in obj:
            plain(v)
    return obj

job = json.loads(sys.argv[1])
custom = {"CuDNNGRU": tf.compat.v1.keras.layers.CuDNNGRU, "CuDNNLSTM": tf.compat.v1.keras.layers.CuDNNLSTM}
cfg = open(job["config"]).read()

def unmodule(obj):
    """tf_keras's new-style to_json names a module for CuDNN layers it cannot resolve itself."""
    if isinstance(obj, dict):
        if obj.get("class_name") in custom:
            obj.pop("module", None); obj.pop("registered_name", None)
        for v in obj.values():
            unmodule(v)
    elif isinstance(obj, list):
        for v in obj:
            unmodule(v)
    return obj

cudnn = K.models.model_from_json(json.dumps(unmodule(json.loads(cfg))), custom_objects=custom)
if job.get("ckpt"):
    ckpt = tf.train.Checkpoint(model=cudnn) if job.get("wrapped") else cudnn
    if job.get("wrapped"):
        ckpt.restore(job["ckpt"]).expect_partial()
    else:
        cudnn.load_weights(job["ckpt"]).expect_partial()
else:
    cudnn.load_weights(job["weights"])
cudnn.save_weights(job["tmp_h5"])
twin = K.models.model_from_json(json.dumps(plain(json.loads(cfg))))
twin.load_weights(job["tmp_h5"])
x = np.load(job["x"])
np.save(job["y"], twin.predict(x, verbose=0))
'''

# Keras 3: either a .keras file with plain load_model, or a twin architecture + load_weights.
CONVERTED = r'''
import json, os, sys
os.environ.pop("TF_USE_LEGACY_KERAS", None); os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras
job = json.loads(sys.argv[1])
L = keras.layers
if job.get("keras"):
    model = keras.saving.load_model(job["keras"])
else:
    cudnn = dict(activation="tanh", recurrent_activation="sigmoid", use_bias=True)
    if job["twin"] == "textgen":  # textgenrnn's architecture, written in Keras 3 as a user would
        tok = L.Input((None,), dtype="int32", name="input")
        emb = L.Embedding(20, 6, name="embedding")(tok)
        x1 = L.LSTM(8, return_sequences=True, name="rnn_1", **cudnn)(emb)
        x2 = L.LSTM(8, return_sequences=True, name="rnn_2", **cudnn)(x1)
        cat = L.Concatenate(name="rnn_concat")([emb, x1, x2])
        out = L.Dense(20, activation="softmax", name="output")(L.GlobalAveragePooling1D(name="attention")(cat))
        model = keras.Model(tok, out)
    else:
        inp = L.Input((None, 4), name="input")
        x = L.GRU(7, return_sequences=True, name="rnn_1", reset_after=True, **cudnn)(inp)
        x = L.Bidirectional(L.GRU(5, reset_after=True, **cudnn), name="bi_rnn")(x)
        model = keras.Model(inp, L.Dense(3, name="dense")(x))
    model.load_weights(job["weights"])
if job.get("plant"):  # a 0.05 change of one recurrent weight, which the comparison must see
    v = next(w for w in model.weights if "recurrent_kernel" in w.path)
    a = np.array(v.numpy()); a[0, 0] += 0.05; v.assign(a)
np.save(job["y"], model.predict(np.load(job["x"]), verbose=0))
'''


def _run(script: str, job: dict) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", script, json.dumps(job)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


# --------------------------------------------------------------------------- detection by shape

@pytest.mark.parametrize("name", ["generic_lstm.hdf5", "generic_gru.h5"])
def test_generic_names_are_found_by_shape(name):
    info = api.inspect(TF2 / name)
    expected = MANIFEST[name]["rnns"]
    assert [r["kind"].split("(")[-1].rstrip(")") for r in info["rnns"]] == [e["class"] for e in expected]
    assert [r["shape"]["units"] for r in info["rnns"]] == [e["units"] for e in expected]
    assert [r["shape"]["bidirectional"] for r in info["rnns"]] == [e["bidirectional"] for e in expected]
    for r in info["rnns"]:
        note = next(d for d in r["details"] if d.startswith("class: "))
        g = 6 if r["cell"] == "gru" else 8
        assert f"inferred from bias shape ({g * r['shape']['units']},) = {g} x {r['shape']['units']}" in note


def test_inspect_cli_says_the_inference():
    r = CliRunner().invoke(cli, ["inspect", str(TF2 / "generic_lstm.hdf5")])
    assert r.exit_code == 0, r.output
    assert "class: CuDNNLSTM, inferred from bias shape (64,) = 8 x 8" in r.output


def test_plain_rnn_weights_are_not_taken_for_cudnn(tmp_path):
    """A plain GRU(reset_after=False) has bias (3H,), a reset_after GRU (2, 3H), an LSTM (4H,): none is
    converted (they need no conversion), whatever the layer is called."""
    f = tmp_path / "plain.h5"
    with h5py.File(f, "w") as h:
        h.attrs["layer_names"] = np.array([b"cu_dnngru", b"lstm"], dtype="S")
        for g, shapes in (("cu_dnngru", [(4, 15), (5, 15), (2, 15)]), ("lstm", [(4, 20), (5, 20), (20,)])):
            grp = h.create_group(g)
            names = [f"{g}/{r}:0" for r in ("kernel", "recurrent_kernel", "bias")]
            grp.attrs["weight_names"] = np.array([n.encode() for n in names], dtype="S")
            for n, s in zip(names, shapes):
                grp.create_dataset(n, data=np.zeros(s, "f4"))
    assert api.inspect(f)["rnns"] == []


def test_a_triple_that_fits_no_layer_is_refused_with_the_reason(tmp_path):
    f = tmp_path / "odd.h5"
    with h5py.File(f, "w") as h:
        h.attrs["layer_names"] = np.array([b"rnn_1"], dtype="S")
        grp = h.create_group("rnn_1")
        names = [f"rnn_1/{r}:0" for r in ("kernel", "recurrent_kernel", "bias")]
        grp.attrs["weight_names"] = np.array([n.encode() for n in names], dtype="S")
        for n, s in zip(names, [(4, 15), (5, 15), (35,)]):
            grp.create_dataset(n, data=np.zeros(s, "f4"))
    r = CliRunner().invoke(cli, ["inspect", str(f)])
    assert r.exit_code == 3
    assert "fit no known layer" in r.output and "(30,)" in r.output and "Traceback" not in r.output


@pytest.mark.slow   # two interpreters (tf_keras, Keras 3) per case: ~40-80 s each on a shared 2-core machine
@pytest.mark.parametrize("name,twin,planted", [("generic_lstm.hdf5", "textgen", False),
                                               ("generic_gru.h5", "gru", False), ("generic_gru.h5", "gru", True)])
def test_generic_weights_load_into_the_keras3_twin_like_tf_keras(name, twin, planted, tmp_path):
    """The done-criterion: a generic-named weights file converts to legacy ``.h5`` weights, which Keras 3's
    ``load_weights`` takes into the twin architecture (plain GRU/LSTM), matching tf_keras's own
    conversion within 1e-5.  The array names of every group stay as the file had them."""
    out = tmp_path / "converted.h5"
    api.convert(TF2 / name, out)
    with h5py.File(TF2 / name) as a, h5py.File(out) as b:
        for g in a.attrs["layer_names"]:
            assert list(a[g].attrs["weight_names"]) == list(b[g].attrs["weight_names"])
    if planted:  # the comparison below must see a 0.05 change of one recurrent weight
        with h5py.File(out, "r+") as b:
            ds = b["rnn_1/rnn_1/recurrent_kernel:0"]
            w = ds[...]
            w[0, 0] += 0.05
            ds[...] = w
    cfg = _twin_config(twin)
    (tmp_path / "cudnn.json").write_text(json.dumps(cfg))
    x = _inputs(twin)
    np.save(tmp_path / "x.npy", x)
    _run(REFERENCE, {"config": str(tmp_path / "cudnn.json"), "weights": str(TF2 / name),
                     "tmp_h5": str(tmp_path / "ref.h5"), "x": str(tmp_path / "x.npy"),
                     "y": str(tmp_path / "ref.npy")})
    _run(CONVERTED, {"twin": twin, "weights": str(out), "x": str(tmp_path / "x.npy"),
                     "y": str(tmp_path / "got.npy")})
    ref, got = np.load(tmp_path / "ref.npy"), np.load(tmp_path / "got.npy")
    assert ref.shape == got.shape
    assert (np.max(np.abs(ref - got)) < 1e-5) != planted, np.max(np.abs(ref - got))


def _twin_config(kind: str) -> dict:
    """The fixtures' architectures as a user's code builds them, in tf.keras's ``to_json`` form."""
    code = {
        "textgen": '''
tok = L.Input((None,), dtype="int32", name="input")
emb = L.Embedding(20, 6, name="embedding")(tok)
x1 = G["CuDNNLSTM"](8, return_sequences=True, name="rnn_1")(emb)
x2 = G["CuDNNLSTM"](8, return_sequences=True, name="rnn_2")(x1)
cat = L.Concatenate(name="rnn_concat")([emb, x1, x2])
m = K.Model(tok, L.Dense(20, activation="softmax", name="output")(L.GlobalAveragePooling1D(name="attention")(cat)))
''',
        "gru": '''
inp = L.Input((None, 4), name="input")
x = G["CuDNNGRU"](7, return_sequences=True, name="rnn_1")(inp)
x = L.Bidirectional(G["CuDNNGRU"](5), name="bi_rnn")(x)
m = K.Model(inp, L.Dense(3, name="dense")(x))
'''}[kind]
    script = ('import os, sys\nos.environ["TF_USE_LEGACY_KERAS"]="1"; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"\n'
              'import tensorflow as tf, tf_keras as K\nL = K.layers\n'
              'G = {"CuDNNGRU": tf.compat.v1.keras.layers.CuDNNGRU, "CuDNNLSTM": tf.compat.v1.keras.layers.CuDNNLSTM}\n'
              + code + 'print(m.to_json())\n')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _inputs(kind: str) -> np.ndarray:
    rng = np.random.default_rng(18)
    if kind == "textgen":
        return rng.integers(0, 20, (3, 11)).astype("int32")
    return rng.standard_normal((3, 9, 4)).astype("float32")


# --------------------------------------------------------------------------- TF2 object checkpoints

#: fixture -> (path given to gruconv, the prefix tf_keras restores, restored through tf.train.Checkpoint(model=))
CKPTS = {
    "ckpt_seq": (TF2 / "ckpt_seq", TF2 / "ckpt_seq" / "weights", False),
    "ckpt_nested": (TF2 / "ckpt_nested", TF2 / "ckpt_nested" / "ckpt-1", True),
    "saved_model": (TF2 / "saved_model", TF2 / "saved_model" / "variables" / "variables", False),
}


@pytest.mark.parametrize("name", sorted(CKPTS))
def test_checkpoint_layers_are_found_by_shape_with_their_object_paths(name):
    """Without --config: every cuDNN layer is found by its weights' shapes (the optimizer's slots in
    ckpt_nested have the same shapes and are not taken), named by its object path."""
    path = CKPTS[name][0]
    info = api.inspect(path)
    assert info["format"] == "tf2-checkpoint" and info["kind"] == "weights"
    expected = MANIFEST[name]["rnns"]
    assert [r["kind"] for r in info["rnns"]] == [
        f"Bidirectional({e['class']})" if e["bidirectional"] else e["class"] for e in expected]
    assert [(r["shape"]["units"], r["shape"]["input_size"]) for r in info["rnns"]] == [
        (e["units"], e["input_size"]) for e in expected]
    objects = [next(d for d in r["details"] if d.startswith("object: ")) for r in info["rnns"]]
    base = "model/" if name == "ckpt_nested" else ""
    first = f"{base}layer_with_weights-0" + ("/layer_with_weights-0" if name == "ckpt_nested" else "")
    assert objects == [f"object: {first}", f"object: {base}layer_with_weights-1/{{forward_layer,backward_layer}}"]
    assert all(any(d.startswith("class: ") and "inferred from bias shape" in d for d in r["details"])
               for r in info["rnns"])


def test_inspect_cli_on_a_checkpoint_and_a_savedmodel():
    r = CliRunner().invoke(cli, ["inspect", str(TF2 / "ckpt_seq")])
    assert r.exit_code == 0, r.output
    assert "TF2 object-based checkpoint; no architecture (layers found by shape)" in r.output
    assert "object: layer_with_weights-1/{forward_layer,backward_layer}" in r.output
    r = CliRunner().invoke(cli, ["inspect", str(TF2 / "saved_model"), "--config",
                                 str(TF2 / "saved_model" / "model.json")])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"{TF2 / 'saved_model'}: SavedModel variables; architecture from --config")
    assert "bidirectional/cu_dnngru: Bidirectional(CuDNNGRU)" in r.output


def test_config_maps_layer_with_weights_in_order_and_checks_every_shape(tmp_path):
    """--config: layer_with_weights-N is the config's N-th layer with weights; a config whose units
    differ from the checkpoint's is refused naming the layer (exit 3), never guessed."""
    info = api.inspect(TF2 / "ckpt_seq", config=TF2 / "ckpt_seq" / "model.json")
    assert [r["name"] for r in info["rnns"]] == ["cu_dnngru", "bidirectional/cu_dnnlstm"]
    cfg = json.loads((TF2 / "ckpt_seq" / "model.json").read_text())
    cfg["config"]["layers"][1]["config"]["units"] = 9
    (tmp_path / "wrong.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(cli, ["convert", str(TF2 / "ckpt_seq"), str(tmp_path / "o.keras"),
                                 "--config", str(tmp_path / "wrong.json")])
    assert r.exit_code == 3 and "Traceback" not in r.output
    assert r.output.strip().splitlines() == [
        f"gruconv: error: {TF2 / 'ckpt_seq'}: CuDNNGRU cu_dnngru: config says units=9, weights have 8"]
    assert not (tmp_path / "o.keras").exists()
    # an architecture with one layer with weights too few: the checkpoint's extra object is named
    cfg = json.loads((TF2 / "ckpt_seq" / "model.json").read_text())
    del cfg["config"]["layers"][-1]
    (tmp_path / "short.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(cli, ["inspect", str(TF2 / "ckpt_seq"), "--config", str(tmp_path / "short.json")])
    assert r.exit_code == 3
    assert "weights at layer_with_weights-2, beyond the 2 layer(s) with weights the architecture has" in r.output
    # another model's architecture
    r = CliRunner().invoke(cli, ["inspect", str(TF2 / "ckpt_seq"), "--config", str(TF2 / "ckpt_nested" / "model.json")])
    assert r.exit_code == 3 and "the checkpoint has no variables at layer_with_weights-0/layer_with_weights-0" in r.output


def test_options_the_input_cannot_use_are_usage_errors(tmp_path):
    """--config with a TF1 (name-based) checkpoint, TF1-only options with a TF2 one: exit 2, one line."""
    arch = str(TF2 / "ckpt_seq" / "model.json")
    for argv in (["inspect", str(FIXTURES / "tf1" / "layer_uni"), "--config", arch],
                 ["convert", str(FIXTURES / "tf1" / "layer_uni"), str(tmp_path / "a.keras"), "--config", arch],
                 ["convert", str(TF2 / "ckpt_seq"), str(tmp_path / "b.keras"), "--config", arch, "--rnn", "x"],
                 ["inspect", str(TF2 / "ckpt_seq"), "--prefer", "opaque"]):
        r = CliRunner().invoke(cli, argv)
        assert r.exit_code == 2, (argv, r.output)
        assert len(r.output.strip().splitlines()) == 1 and "refusing to ignore" in r.output
    assert list(tmp_path.iterdir()) == []


def test_without_config_a_model_output_is_refused_and_h5_weights_are_written(tmp_path):
    """No architecture: a .keras model or Keras 3 .weights.h5 (both need the layers' names and order)
    is a usage error naming --config; legacy .h5 weights of the converted layers are written, each
    group named by its object path, the checkpoint untouched."""
    before = {p: p.read_bytes() for p in (TF2 / "ckpt_nested").iterdir()}
    for out in ("m.keras", "m.weights.h5"):
        r = CliRunner().invoke(cli, ["convert", str(TF2 / "ckpt_nested"), str(tmp_path / out)])
        assert r.exit_code == 2 and "--config" in r.output and not (tmp_path / out).exists()
    res = api.convert(TF2 / "ckpt_nested", tmp_path / "w.h5")
    with h5py.File(tmp_path / "w.h5") as f:
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["layer_names"]]
        assert names == ["model.layer_with_weights-0", "model.layer_with_weights-1"]
        assert f["model.layer_with_weights-1"]["forward_layer"]["bias:0"].shape == (12,)  # LSTM: 4 x 3, summed
    assert any("other checkpoint tensor(s)" in w for w in res.warnings)
    assert before == {p: p.read_bytes() for p in (TF2 / "ckpt_nested").iterdir()}


def test_a_savedmodel_with_tf1_names_is_the_tf1_readers(tmp_path):
    """A SavedModel's variables bundle is read by whichever reader its names call for: object names
    (``saved_model``) this one, TF1 ``cudnn_rnn`` names (``saved_model_tf1``, layer_uni's tensors saved
    by TF's SavedModelBuilder) the TF1 reader, converting to exactly what the checkpoint itself gives."""
    from gruconv import readers
    from gruconv.readers import tf2 as tf2_checkpoint

    assert tf2_checkpoint.sniff(TF2 / "saved_model")
    assert tf2_checkpoint.sniff(TF2 / "ckpt_seq" / "weights.index")
    assert not tf2_checkpoint.sniff(FIXTURES / "tf1" / "layer_uni")
    assert not tf2_checkpoint.sniff(TF2 / "saved_model_tf1")
    assert not tf2_checkpoint.sniff(TF2 / "generic_gru.h5")
    assert readers.detect(TF2 / "saved_model") == "tf2-checkpoint"
    assert readers.detect(TF2 / "saved_model_tf1") == "tf1-checkpoint"
    a, b = api.inspect(TF2 / "saved_model_tf1"), api.inspect(FIXTURES / "tf1" / "layer_uni")
    assert [r["shape"] for r in a["rnns"]] == [r["shape"] for r in b["rnns"]] and len(a["rnns"]) == 1
    api.convert(TF2 / "saved_model_tf1", tmp_path / "sm.h5")
    api.convert(FIXTURES / "tf1" / "layer_uni", tmp_path / "ck.h5")
    with h5py.File(tmp_path / "sm.h5") as x, h5py.File(tmp_path / "ck.h5") as y:
        arrays = []
        x.visititems(lambda n, o: arrays.append(n) if isinstance(o, h5py.Dataset) else None)
        assert len(arrays) == 6   # 2 layers x kernel, recurrent_kernel, bias
        for n in arrays:
            np.testing.assert_array_equal(x[n][...], y[n][...])


@pytest.mark.slow
@pytest.mark.parametrize("name,planted", [("ckpt_seq", False), ("ckpt_nested", False), ("saved_model", False),
                                          ("ckpt_seq", True)])
def test_checkpoint_with_config_converts_to_a_keras_file_matching_tf_keras(name, planted, tmp_path):
    """The done-criterion: with --config the checkpoint becomes a .keras file that Keras 3's plain
    load_model opens, computing what tf_keras computes after restoring the same checkpoint into the
    original cuDNN model and converting it itself, within 1e-5; a planted 0.05 change is caught."""
    path, prefix, wrapped = CKPTS[name]
    out = tmp_path / "m.keras"
    res = api.convert(path, out, config=path / "model.json")
    assert res.outputs == [str(out)] and len(res.rnns) == 2
    cfg = json.loads((path / "model.json").read_text())
    in_dim = MANIFEST[name]["rnns"][0]["input_size"]
    x = np.random.default_rng(181).standard_normal((3, 7, in_dim)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    del cfg
    _run(REFERENCE, {"config": str(path / "model.json"), "ckpt": str(prefix), "wrapped": wrapped,
                     "tmp_h5": str(tmp_path / "ref.h5"), "x": str(tmp_path / "x.npy"), "y": str(tmp_path / "ref.npy")})
    _run(CONVERTED, {"keras": str(out), "x": str(tmp_path / "x.npy"), "y": str(tmp_path / "got.npy"),
                     "plant": planted})
    ref, got = np.load(tmp_path / "ref.npy"), np.load(tmp_path / "got.npy")
    assert ref.shape == got.shape
    assert (np.max(np.abs(ref - got)) < 1e-5) != planted, np.max(np.abs(ref - got))


@pytest.mark.slow
def test_verify_with_and_without_config_catches_a_planted_error(tmp_path):
    """verify: with --config the whole converted model; without, each layer alone, from the
    legacy .h5 convert wrote.  A 0.05 change of one recurrent weight in that .h5 fails (exit 1)."""
    path = TF2 / "ckpt_seq"
    api.convert(path, tmp_path / "m.keras", config=path / "model.json")
    api.convert(path, tmp_path / "w.h5")
    run = CliRunner().invoke
    r = run(cli, ["verify", str(path), str(tmp_path / "m.keras"), "--config", str(path / "model.json"),
                  "--device", "cpu"])
    # the layers, the Sequential end to end, the original in tf_keras (weights laid out from the checkpoint; issue 40)
    assert r.exit_code == 0 and "parity: PASS (4/4" in r.output, r.output
    assert "end to end (tf_keras): model output" in r.output and "as laid out from the checkpoint" in r.output
    r = run(cli, ["verify", str(path), str(tmp_path / "w.h5"), "--device", "cpu"])
    # without --config: each layer alone, as for a weights-only HDF5 file (sequences and final states)
    assert r.exit_code == 0 and "parity: PASS (8/8" in r.output, r.output
    assert "layer_with_weights-1: forward sequence" in r.output and "weights-only file" in r.output
    r = run(cli, ["verify", str(path), str(tmp_path / "m.keras"), "--device", "cpu"])
    assert r.exit_code == 2 and "pass --config ARCH.json" in r.output, r.output
    with h5py.File(tmp_path / "w.h5", "r+") as f:
        ds = f["layer_with_weights-1"]["backward_layer"]["recurrent_kernel:0"]
        a = ds[...]
        a[0, 0] += 0.05
        ds[...] = a
    r = run(cli, ["verify", str(path), str(tmp_path / "w.h5"), "--device", "cpu"])
    assert_parity_failure(r)
    assert "parity: FAIL" in r.output, r.output


def test_a_checkpoint_converted_to_safetensors_verifies_and_a_planted_error_fails(tmp_path):
    """Issue 28's bug: convert wrote the .safetensors (asking the writers) while verify refused the pair
    with exit 2 (the reader's own old list), and ``convert --verify`` named the private staging path.
    Now both check every stack as the torch target runs it; a 0.05 change of one weight fails (exit 1)."""
    from safetensors.numpy import load_file, save_file

    path = TF2 / "ckpt_seq"
    run = CliRunner().invoke
    r = run(cli, ["convert", str(path), str(tmp_path / "v.safetensors"), "--verify"])
    assert r.exit_code == 0 and "parity: PASS" in r.output and ".gruconv-" not in r.output, r.output
    api.convert(path, tmp_path / "m.safetensors")
    r = run(cli, ["verify", str(path), str(tmp_path / "m.safetensors"), "--device", "cpu"])
    assert r.exit_code == 0 and "parity: PASS" in r.output, r.output
    tensors = load_file(tmp_path / "m.safetensors")
    key = sorted(k for k in tensors if "weight_hh" in k)[0]
    tensors[key] = tensors[key].copy()
    tensors[key][0, 0] += 0.05
    import safetensors

    with safetensors.safe_open(tmp_path / "m.safetensors", "np") as f:
        meta = f.metadata()  # the header's module arguments stay
    save_file(tensors, tmp_path / "bad.safetensors", metadata=meta)
    r = run(cli, ["verify", str(path), str(tmp_path / "bad.safetensors"), "--device", "cpu"])
    assert r.exit_code == 1 and isinstance(r.exception, (SystemExit, type(None))) and "parity: FAIL" in r.output, r.output


def test_batch_takes_checkpoint_and_savedmodel_directories_as_one_input_each(tmp_path, monkeypatch):
    """Batch: a checkpoint directory and a SavedModel directory are one input each (never descended
    into: the SavedModel's variables/ is not a second input), converted to legacy .h5 weights."""
    import shutil

    from gruconv import batch

    monkeypatch.chdir(tmp_path)
    for name in ("ckpt_seq", "ckpt_nested", "saved_model"):
        shutil.copytree(TF2 / name, Path("models") / name)
    s = batch.convert_many(["models", "models/saved_model/variables"], "out", jobs=1, echo=False)
    assert [(r.input, r.status, r.outputs) for r in s.records] == [
        ("models/ckpt_nested", "ok", ["out/ckpt_nested.h5"]), ("models/ckpt_seq", "ok", ["out/ckpt_seq.h5"]),
        ("models/saved_model", "ok", ["out/saved_model.h5"])]
    assert s.exit_code == 0 and s.nothing_found is None


def test_a_damaged_checkpoint_is_one_line_and_nothing_is_written(tmp_path, monkeypatch):
    """A truncated or bit-flipped data file: exit 3, one line naming the file and the tensor, no output,
    no staging file left behind, the input unchanged."""
    import shutil
    import tempfile

    ck = tmp_path / "ck"
    shutil.copytree(TF2 / "ckpt_seq", ck)
    data = ck / "weights.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    # a private temporary directory: other xdist workers stage their own gruconv-tf2-* in the shared one
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    r = CliRunner().invoke(cli, ["convert", str(ck), str(tmp_path / "o.keras"), "--config", str(ck / "model.json")])
    assert r.exit_code == 3 and "Traceback" not in r.output
    assert r.output.strip().splitlines() == [r.output.strip()] and "checksum mismatch" in r.output
    assert "layer_with_weights-0/kernel" in r.output
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw[: len(raw) // 2]))
    r = CliRunner().invoke(cli, ["inspect", str(ck)])
    assert r.exit_code == 3 and "truncated data file" in r.output
    assert not (tmp_path / "o.keras").exists()
    assert list(private_tmp.iterdir()) == []


@pytest.mark.slow   # a TensorFlow interpreter writes the checkpoint: ~30 s on the shared machine
def test_a_checkpoint_triple_that_fits_no_layer_is_refused_with_the_reason(tmp_path):
    """Without --config, a kernel/recurrent_kernel/bias owner whose bias fits neither the cuDNN nor the
    plain layer is refused naming the object and the shapes, never skipped.  The checkpoint is written
    by TensorFlow's own saver (tf.train.Checkpoint), in a subprocess."""
    script = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"; os.environ["CUDA_VISIBLE_DEVICES"] = ""
import numpy as np, tensorflow as tf
layer = tf.Module()
layer.kernel = tf.Variable(np.zeros((4, 15), "f4"))
layer.recurrent_kernel = tf.Variable(np.zeros((5, 15), "f4"))
layer.bias = tf.Variable(np.zeros((35,), "f4"))
root = tf.train.Checkpoint()
setattr(root, "layer_with_weights-0", layer)
root.write(sys.argv[1])
'''
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "odd")], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-2000:]
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / "odd")])
    assert res.exit_code == 3 and "Traceback" not in res.output
    assert "weights at layer_with_weights-0 look recurrent but fit no known layer: bias has shape (35,)" in res.output


def test_a_checkpoint_is_read_in_place_nothing_staged(monkeypatch):
    """Issue 38: the TF2 reader reads the bundle through its weight store; nothing is written to read it (no
    scratch file or directory), and every weight reads the same whole, by gate block and by byte-bounded blocks."""
    from gruconv.files import outputs
    from gruconv.readers import tf2

    def refused(*a, **k):
        raise AssertionError("the TF2 reader made a scratch file")

    monkeypatch.setattr(outputs, "scratch_dir", refused)
    monkeypatch.setattr(outputs, "scratch_file", refused)
    for path, config in ((TF2 / "ckpt_seq", None), (TF2 / "ckpt_seq", TF2 / "ckpt_seq" / "model.json")):
        doc = tf2.read(path, config=config)
        assert doc.content == ("graph" if config else "weights") and Path(doc.path) == path
        tf2.inspect(doc)
        with doc.store.open() as store:
            for rnn in doc.rnns:
                for d in range(len(rnn.datasets)):
                    for ref in store.rnn(rnn, d).values():
                        whole = ref.read()
                        cols = whole.shape[-1] // 3 if whole.ndim == 2 else None
                        if cols:
                            assert np.array_equal(ref.block(np.s_[:, cols:2 * cols]), whole[:, cols:2 * cols])
                        got = np.empty_like(whole)
                        for where, block in ref.blocks(64):
                            got[where] = block
                        assert np.array_equal(got, whole)
