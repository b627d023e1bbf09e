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

from conftest import FIXTURES
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
