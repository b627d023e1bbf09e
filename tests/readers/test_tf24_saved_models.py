"""tf.keras SavedModels written by TF 2.0-2.4: no ``keras_metadata.pb``, the Keras metadata in the object graph
(``SavedUserObject.metadata``; :mod:`gruconv.readers.tf2.metadata`).

Fixtures: ``fixtures/tf24`` (``fixtures/make_tf24_fixtures.py``: the tf_keras 2.21 SavedModels of
``fixtures/graphs`` rewritten in the TF 2.4 layout with TensorFlow's own protobuf classes).  Each converts with
no ``--config`` exactly like its 2.5+ twin in ``fixtures/graphs``; tf_keras's own pre-2.5 loading path reads
the fixtures (the check that they are laid out as tf_keras expects a TF 2.4 file to be); the plain GRU/LSTM
model's conversion predicts what TensorFlow serves from the original SavedModel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from bundle_proto import _fb, _vint
from conftest import FIXTURES, assert_parity_failure
from gruconv import api, readers
from gruconv.cli import main as cli
from gruconv.readers.tf2 import metadata

pytestmark = pytest.mark.xdist_group("test_tf24_saved_models")

TF24 = FIXTURES / "tf24"
GRAPHS = FIXTURES / "graphs"
NAMES = ("tf_keras_cudnngru", "tf_keras_cudnnlstm", "tf_keras_gru_lstm")
PLAIN = "tf_keras_gru_lstm"   # GRU + Bidirectional(LSTM) + Dense: TensorFlow serves it on a CPU


def _run(args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    escaped = r.exception if not isinstance(r.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return r


def _one_line_error(r, code: int, text: str) -> None:
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gruconv: error: ") and text in lines[0], r.output


def _with_root_metadata(tmp_path, name: str, edit) -> "os.PathLike":
    """A copy of ``fixtures/tf24/<name>`` whose root object's metadata is ``edit(metadata)`` (TensorFlow's classes)."""
    from tensorflow.core.protobuf import saved_model_pb2

    d = tmp_path / name
    shutil.copytree(TF24 / name, d)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((d / "saved_model.pb").read_bytes())
    root = sm.meta_graphs[0].object_graph_def.nodes[0].user_object
    root.metadata = edit(root.metadata)
    (d / "saved_model.pb").write_bytes(sm.SerializeToString(deterministic=True))
    return d


# --------------------------------------------------------------------------- the fixtures are TF 2.4's layout

def test_the_fixtures_have_no_metadata_file_and_their_twins_none_in_the_object_graph():
    """The 2.4 layout is what it says (no keras_metadata.pb, metadata at the root); TF 2.21 itself writes the
    object graph's metadata empty, so nothing is read twice from a 2.5+ file."""
    for name in NAMES:
        assert not (TF24 / name / "keras_metadata.pb").exists()
        assert metadata.model_source(TF24 / name) == TF24 / name / "saved_model.pb"
        assert metadata.object_graph_file(GRAPHS / name) is None
        assert metadata.model_source(GRAPHS / name) == GRAPHS / name / "keras_metadata.pb"


def test_the_graph_file_names_are_the_graph_readers():
    from gruconv.readers import tfgraph

    assert metadata.GRAPH_FILES == tfgraph.SAVED_MODEL_FILES


@pytest.mark.parametrize("name", NAMES)
def test_the_config_is_the_twins(name):
    assert metadata.model_config(TF24 / name / "saved_model.pb") == \
        metadata.model_config(GRAPHS / name / "keras_metadata.pb")


def test_a_savedmodel_with_both_reads_keras_metadata_as_tf_keras_does(tmp_path, monkeypatch):
    """Both places (TF 2.5's writer kept the same string in each): the file is read; the object graph is not
    looked at (its copy planted wrong here, and the conversion still reads the file's)."""
    d = _with_root_metadata(tmp_path, "tf_keras_cudnngru", lambda m: "not JSON")
    shutil.copy(GRAPHS / "tf_keras_cudnngru" / "keras_metadata.pb", d / "keras_metadata.pb")
    assert metadata.model_source(d) == d / "keras_metadata.pb"
    info = api.inspect(d)
    assert info["summary"].startswith("SavedModel variables; architecture from keras_metadata.pb")


def test_inspect_says_the_config_came_from_the_object_graph():
    info = api.inspect(TF24 / "tf_keras_cudnngru")
    twin = api.inspect(GRAPHS / "tf_keras_cudnngru")
    assert info["format"] == "tf2-checkpoint" and info["kind"] == "model"
    assert info["summary"] == ("SavedModel variables; architecture from saved_model.pb's object graph (TF 2.0-2.4); "
                               "4 layer group(s)")
    assert info["rnns"] == twin["rnns"]
    r = _run(["inspect", TF24 / "tf_keras_cudnngru"])
    assert r.exit_code == 0 and "architecture from saved_model.pb's object graph (TF 2.0-2.4)" in r.output


def test_the_graph_reader_leaves_a_tf24_keras_savedmodel_to_the_tf2_reader(tmp_path):
    """Its graph holds CudnnRNN (tf_keras_cudnngru) or GPU variants with twins (tf_keras_gru_lstm): without the
    object-graph metadata the graph reader would take it (a graph to rewrite, or "nothing to convert")."""
    for name in NAMES:
        assert readers.detect(TF24 / name) == "tf2-checkpoint"
    d = tmp_path / "sm"
    shutil.copytree(TF24 / "tf_keras_cudnngru", d)
    shutil.rmtree(d / "variables")
    _one_line_error(_run(["convert", d, tmp_path / "o.keras"]), 3,
                    "is a tf.keras SavedModel without its variables (variables/variables.index is missing)")


def test_a_text_format_saved_model_reads_the_same(tmp_path):
    """``saved_model.pbtxt`` (TF's text form; TF 2.4's model.save wrote binary, the reader takes both)."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    d = tmp_path / "sm"
    shutil.copytree(TF24 / "tf_keras_cudnngru", d)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((d / "saved_model.pb").read_bytes())
    (d / "saved_model.pbtxt").write_text(text_format.MessageToString(sm))
    (d / "saved_model.pb").unlink()
    assert metadata.model_source(d) == d / "saved_model.pbtxt"
    assert metadata.model_config(d / "saved_model.pbtxt") == \
        metadata.model_config(GRAPHS / "tf_keras_cudnngru" / "keras_metadata.pb")
    assert api.inspect(d)["summary"].startswith(
        "SavedModel variables; architecture from saved_model.pbtxt's object graph (TF 2.0-2.4)")


@pytest.mark.slow   # two conversions through the batch driver: ~20 s
def test_batch_finds_a_tf24_savedmodel_and_converts_it_to_keras(tmp_path, monkeypatch):
    from gruconv import batch

    monkeypatch.chdir(tmp_path)
    os.makedirs("models")
    for name in ("tf_keras_cudnnlstm", PLAIN):
        shutil.copytree(TF24 / name, os.path.join("models", name))
    s = batch.convert_many(["models"], "out", jobs=1, echo=False, keep_going=True)
    assert {r.input: r.status for r in s.records} == {
        "models/tf_keras_cudnnlstm": "ok", f"models/{PLAIN}": "ok"}, [(r.input, r.status, r.error) for r in s.records]
    assert s.exit_code == 0
    assert sorted(n for n in os.listdir("out") if not n.startswith(".")) == [
        "tf_keras_cudnnlstm.keras", f"{PLAIN}.keras"]


# --------------------------------------------------------------------------- converts like its twin

def _arrays(path) -> dict:
    import h5py

    out = {}
    with zipfile.ZipFile(path) as z, z.open("model.weights.h5") as f, h5py.File(f, "r") as h:
        h.visititems(lambda n, o: out.__setitem__(n, o[...]) if isinstance(o, h5py.Dataset) else None)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_converts_with_no_config_exactly_like_its_twin(name, tmp_path):
    got, want = tmp_path / "tf24.keras", tmp_path / "twin.keras"
    r = _run(["convert", TF24 / name, got])
    assert r.exit_code == 0 and f"wrote {got}" in r.output, r.output
    assert _run(["convert", GRAPHS / name, want]).exit_code == 0
    with zipfile.ZipFile(got) as a, zipfile.ZipFile(want) as b:
        assert json.loads(a.read("config.json")) == json.loads(b.read("config.json"))
    ga, wa = _arrays(got), _arrays(want)
    assert sorted(ga) == sorted(wa) and ga
    for k in ga:
        np.testing.assert_array_equal(ga[k], wa[k], err_msg=k)


def _served(directory, x: np.ndarray) -> np.ndarray:
    import tensorflow as tf

    fn = tf.saved_model.load(str(directory)).signatures["serving_default"]
    (key,) = fn.structured_input_signature[1]
    (out,) = fn(**{key: tf.constant(x)}).values()
    return out.numpy()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf24") / "m.keras"
    r = _run(["convert", TF24 / PLAIN, out])
    assert r.exit_code == 0, r.output
    assert "its config from saved_model.pb's object graph (TF 2.0-2.4)" in r.output
    return out


def test_the_plain_model_predicts_what_tensorflow_serves_from_the_original(plain):
    import keras

    x = np.random.default_rng(24).uniform(-1, 1, (3, 7, 3)).astype("float32")
    got = np.asarray(keras.saving.load_model(plain)(x))
    np.testing.assert_allclose(got, _served(TF24 / PLAIN, x), rtol=0, atol=1e-6)


@pytest.mark.slow   # the served SavedModel, tf_keras and Keras 3 on the CPU: ~30 s
def test_verify_passes_and_runs_the_served_original(plain, tmp_path):
    r = _run(["verify", TF24 / PLAIN, plain, "--json", tmp_path / "r.json"])
    assert r.exit_code == 0, r.output
    rows = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert rows["end to end (SavedModel): model output"]["passed"]
    assert rows["end to end (tf_keras): model output"]["passed"]


@pytest.mark.slow   # Keras and the oracle on the CPU: ~20 s
def test_verify_of_a_cudnn_model_passes():
    r = _run(["verify", TF24 / "tf_keras_cudnngru", "--device", "cpu"])
    assert r.exit_code == 0 and "parity: PASS" in r.output, r.output


@pytest.mark.slow   # a conversion and a verify through TensorFlow: ~30 s
def test_a_planted_config_error_in_the_object_graph_is_caught_by_the_served_original(tmp_path):
    """The Dense layer's activation changed in the object graph's metadata (the weights and the shapes still fit,
    so the conversion succeeds): the SavedModel's own serving function computes the original, and verify fails."""
    def plant(meta: str) -> str:
        doc = json.loads(meta)
        dense = doc["model_config"]["config"]["layers"][-1]
        assert dense["class_name"] == "Dense" and dense["config"]["activation"] == "linear"
        dense["config"]["activation"] = "tanh"
        return json.dumps(doc)

    d = _with_root_metadata(tmp_path, PLAIN, plant)
    out = tmp_path / "bad.keras"
    assert _run(["convert", d, out]).exit_code == 0
    with zipfile.ZipFile(out) as z:
        assert json.loads(z.read("config.json"))["config"]["layers"][-1]["config"]["activation"] == "tanh"
    r = _run(["verify", d, out, "--json", tmp_path / "r.json"])
    assert_parity_failure(r)
    rows = {c["name"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert not rows["end to end (SavedModel): model output"]["passed"]


def test_a_planted_size_in_the_object_graph_is_refused_against_the_variables(tmp_path):
    def plant(meta: str) -> str:
        doc = json.loads(meta)
        gru = next(layer for layer in doc["model_config"]["config"]["layers"] if layer["class_name"] == "CuDNNGRU")
        gru["config"]["units"] = 6
        return json.dumps(doc)

    d = _with_root_metadata(tmp_path, "tf_keras_cudnngru", plant)
    _one_line_error(_run(["convert", d, tmp_path / "o.keras"]), 3, "CuDNNGRU cu_dnngru: config says units=6, weights have 5")
    assert not (tmp_path / "o.keras").exists()


# --------------------------------------------------------------------------- hostile object graphs

def _hand_made(tmp_path, user_object: bytes):
    """A SavedModel directory whose ``saved_model.pb`` is one meta graph holding only an object graph whose
    root is ``user_object`` (raw bytes), beside the tf24 GRU fixture's variables."""
    d = tmp_path / "hostile"
    d.mkdir()
    shutil.copytree(TF24 / "tf_keras_cudnngru" / "variables", d / "variables")
    # SavedModel.meta_graphs = 2 -> MetaGraphDef.object_graph_def = 7 -> nodes = 1 -> SavedObject.user_object = 4
    (d / "saved_model.pb").write_bytes(_fb(2, _fb(7, _fb(1, _fb(4, user_object)))))
    return d


_MODEL = _fb(1, b"_tf_keras_sequential")
HOSTILE = {
    "not JSON": (_MODEL + _fb(3, b"{'model_config': nope"), "the object graph root's metadata is not valid JSON"),
    "JSON of the wrong type": (_MODEL + _fb(3, b"[1, 2, 3]"), "the object graph root's metadata is a JSON list, not an object"),
    "model_config of the wrong type": (_MODEL + _fb(3, b'{"model_config": "GRU"}'), "holds no model_config"),
    "class_name of the wrong type": (_MODEL + _fb(3, b'{"model_config": {"class_name": 5, "config": {}}}'),
                                     "holds no model_config"),
    "metadata as a varint": (_MODEL + _vint(3 << 3) + _vint(7), "is not a readable SavedModel graph"),
    "metadata longer than the file": (_MODEL + _vint(3 << 3 | 2) + _vint(2**40) + b"{}",
                                      "is not a readable SavedModel graph"),
    "nested a million deep": (_MODEL + _fb(3, b"[" * 1_000_000), "nested"),
    "huge": (_MODEL + _fb(3, b'{"model_config": "' + b"x" * (17 * 2**20) + b'"}'), "the object graph root's metadata"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_a_hostile_object_graph_is_one_line_exit_3(case, command, tmp_path):
    user_object, text = HOSTILE[case]
    d = _hand_made(tmp_path, user_object)
    out = tmp_path / "o.keras"
    _one_line_error(_run([command, d] + ([out] if command == "convert" else [])), 3, text)
    assert not out.exists()


def test_a_keras_root_without_metadata_is_not_taken_for_a_tf24_model(tmp_path):
    """What ``tf.saved_model.save`` of a Keras model writes on TF 2.5+ (identifier, no metadata): no
    architecture, as tf_keras's loader says too; the variables are read as weights only."""
    d = _hand_made(tmp_path, _MODEL)
    assert metadata.object_graph_file(d) is None and metadata.model_source(d) is None
    assert api.inspect(d)["kind"] == "weights"


# --------------------------------------------------------------------------- tf_keras reads the fixtures

TF_KERAS = r'''
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tf_keras as K
job = json.loads(sys.argv[1])
old, new = K.models.load_model(job["tf24"], compile=False), K.models.load_model(job["twin"], compile=False)
assert old.get_config() == new.get_config(), "configs differ"
assert len(old.weights) == len(new.weights) and all(
    np.array_equal(a.numpy(), b.numpy()) for a, b in zip(old.weights, new.weights)), "weights differ"
print("same")
'''


@pytest.mark.slow   # tf_keras loads six SavedModels: ~60 s
@pytest.mark.parametrize("name", NAMES)
def test_tf_keras_reads_each_fixture_through_its_pre_2_5_path_as_its_twin(name):
    r = subprocess.run([sys.executable, "-c", TF_KERAS, json.dumps({"tf24": str(TF24 / name),
                                                                     "twin": str(GRAPHS / name)})],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0 and r.stdout.strip() == "same", r.stderr[-3000:]
    assert "SavedModel saved prior to TF 2.5 detected" in r.stderr
