"""Models with a user's custom layer beside the cuDNN ones (issue 29): converted, loaded and verified.

Fixtures: ``fixtures/keras_custom/`` (``fixtures/make_custom_layer_fixtures.py``, real tf_keras): a
textgenrnn model (Embedding -> CuDNNLSTM -> CuDNNLSTM -> concatenate -> AttentionWeightedAverage -> Dense,
compiled with RMSprop) and a Sequential Embedding -> Bidirectional(CuDNNGRU) -> AttentionWeightedAverage ->
Dense.  Independent reference: tf_keras's own predictions of each model (its cuDNN layers rewritten to
the CPU layers with cuDNN's function; ``reference_outputs.npz``, written by the generator).  The Keras 3
class a user would write is ``tests/custom_layers.py``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES

from gruconv.cli import main

pytestmark = pytest.mark.xdist_group("test_custom_layers")

CUSTOM = FIXTURES / "keras_custom"
TEXTGEN, BIDIR = CUSTOM / "textgenrnn.h5", CUSTOM / "bidir_attention.h5"
CLASSES = Path(__file__).resolve().parents[1] / "custom_layers.py"
LOAD_LINE = 'keras.saving.load_model(path, custom_objects={"AttentionWeightedAverage": <your Keras 3 class>})'


def run(*args):
    """The CLI in-process.  No exception may escape it: an exit code comes from gruconv's own exit, never
    from CliRunner's report of an uncaught exception (which reads as exit 1)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


def _converted(tmp_path, src, suffix=".keras", *extra):
    out = tmp_path / (src.stem + suffix)
    res = run("convert", src, out, *extra)
    assert res.exit_code == 0, res.output
    return out, res


# --------------------------------------------------------------------------- which classes are custom


def test_builtin_tables_are_keras_own():
    """keras3/builtins.py's Keras 3 list is exactly the Layer classes ``keras.layers`` exports."""
    from gruconv.keras3 import runtime as keras3
    from gruconv.keras3.builtins import KERAS3_LAYERS, is_custom

    k = keras3.keras()
    exported = {n for n in dir(k.layers) if isinstance(getattr(k.layers, n), type)
                and issubclass(getattr(k.layers, n), k.layers.Layer)}
    assert set(KERAS3_LAYERS) == exported
    assert is_custom("AttentionWeightedAverage") and is_custom("Custom>Dense")
    assert not is_custom("Dense") and not is_custom("CuDNNGRU") and not is_custom("Lambda")
    assert not is_custom("TFOpLambda") and not is_custom("ThresholdedReLU")
    assert not is_custom("my layer") and not is_custom("Pkg>") and not is_custom("")  # no Python class


@pytest.mark.slow
def test_legacy_table_covers_tf_keras():
    """Every Layer class tf_keras exports is Keras 3's or in the legacy list (a tf_keras subprocess)."""
    from gruconv.keras3.builtins import KERAS3_LAYERS, LEGACY_LAYERS

    script = ("import json, tensorflow as tf, tf_keras as K\n"
              "mods = (K.layers, tf.compat.v1.keras.layers, K.layers.experimental, K.layers.experimental.preprocessing)\n"
              "print(json.dumps(sorted({n for m in mods for n in dir(m) if isinstance(getattr(m, n), type) "
              "and issubclass(getattr(m, n), K.layers.Layer)})))")
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    names = set(json.loads(res.stdout.strip().splitlines()[-1]))
    assert names - KERAS3_LAYERS - LEGACY_LAYERS == set()


# --------------------------------------------------------------------------- convert


def test_keras_output_carries_the_custom_layer(tmp_path):
    out, res = _converted(tmp_path, TEXTGEN)
    assert LOAD_LINE in res.output and res.output.count("custom layer class AttentionWeightedAverage") == 1
    with zipfile.ZipFile(out) as zf:
        config = json.loads(zf.read("config.json"))
        weights = zf.read("model.weights.h5")
    layer = next(l for l in config["config"]["layers"] if l["class_name"] == "AttentionWeightedAverage")
    with h5py.File(TEXTGEN, "r") as f:
        original = next(l for l in json.loads(f.attrs["model_config"])["config"]["layers"]
                        if l["class_name"] == "AttentionWeightedAverage")
        stored = f["model_weights/attention/attention/attention_W:0"][()]
    # as Keras 3 serializes an unregistered class from __main__ (serialization_lib), config unchanged
    assert (layer["module"], layer["registered_name"]) == (None, "AttentionWeightedAverage")
    assert layer["config"] == original["config"]
    with h5py.File(io.BytesIO(weights), "r") as w:
        assert list(w["layers/attention_weighted_average/vars"]) == ["0"]
        got = w["layers/attention_weighted_average/vars/0"][()]
    assert got.dtype == stored.dtype and got.shape == stored.shape and np.array_equal(got, stored)
    # the recurrent layers are converted as usual
    assert [l["class_name"] for l in config["config"]["layers"]].count("LSTM") == 2


def test_without_classes_keras_refuses_the_output(tmp_path):
    """The contract is "opens with the custom_objects the warning names": without them Keras says so."""
    from gruconv.keras3 import runtime as keras3

    out, _ = _converted(tmp_path, BIDIR)
    with pytest.raises(Exception, match="AttentionWeightedAverage"):
        keras3.keras().saving.load_model(str(out))


_PREDICT = r'''
import json, sys
import numpy as np
import keras
sys.path.insert(0, sys.argv[2])
from custom_layers import AttentionWeightedAverage
objects = {"AttentionWeightedAverage": AttentionWeightedAverage}
out = {}
for path, x, arch in json.loads(sys.argv[1]):
    if arch is None:
        model = keras.saving.load_model(path, custom_objects=objects)
    else:
        model = keras.models.model_from_json(open(arch).read(), custom_objects=objects)
        model.load_weights(path)
    y = model.predict(np.load(x), verbose=0)
    np.save(path + "." + keras.backend.backend() + ".npy", np.asarray(y, dtype=np.float64))
print("done")
'''


@pytest.fixture(scope="module")
def converted_outputs(tmp_path_factory):
    """Both fixtures as .keras and .weights.h5 (the latter's architecture from --check-load's config)."""
    from gruconv.keras3 import config as keras3_config
    from gruconv.readers import keras_h5

    tmp = tmp_path_factory.mktemp("custom")
    jobs = []
    with np.load(CUSTOM / "reference_outputs.npz") as ref:
        for src in (TEXTGEN, BIDIR):
            x = tmp / (src.stem + ".x.npy")
            np.save(x, ref[src.stem + "/x"])
            k = tmp / (src.stem + ".keras")
            w = tmp / (src.stem + ".weights.h5")
            for out in (k, w):
                res = run("convert", src, out, "--check-load", "--custom-objects", CLASSES)
                assert res.exit_code == 0, res.output
            arch = tmp / (src.stem + ".json")
            doc = keras_h5.read(src)
            arch.write_text(json.dumps(keras3_config.translate(doc.model_config)))
            jobs += [(str(k), str(x), None), (str(w), str(x), str(arch))]
    return jobs


# TensorFlow in the quick tier; JAX and torch (a child process each, ~60-80 s on 2 cores) in the slow tier
@pytest.mark.parametrize("backend", ["tensorflow", pytest.param("jax", marks=pytest.mark.slow),
                                     pytest.param("torch", marks=pytest.mark.slow)])
def test_converted_predicts_what_tf_keras_predicts(backend, converted_outputs):
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3",
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", _PREDICT, json.dumps(converted_outputs), str(CLASSES.parent)],
                         env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(CUSTOM / "reference_outputs.npz") as ref:
        for path, _x, _arch in converted_outputs:
            y = np.load(path + f".{backend}.npy")
            want = ref[Path(path).name.split(".")[0] + "/y"]
            assert y.shape == want.shape
            err = float(np.max(np.abs(y - want)))
            assert err <= 1e-5, (path, backend, err)


def test_check_load_without_classes_says_it_did_not_load(tmp_path):
    _out, res = _converted(tmp_path, BIDIR, ".keras", "--check-load")
    assert "--check-load: the output was not loaded with Keras (custom layer class(es) AttentionWeightedAverage " \
           "need --custom-objects FILE.py)" in res.output


def test_weights_output_warning_names_load_weights(tmp_path):
    _out, res = _converted(tmp_path, BIDIR, ".weights.h5")
    assert "model.load_weights(path)" in res.output and "custom_objects={\"AttentionWeightedAverage\"" in res.output


@pytest.mark.parametrize("body, code, message", [
    ("raise RuntimeError('boom')\n", 3, r"--custom-objects: the file does not import \(RuntimeError: boom\)"),
    ("class SomethingElse:\n    pass\n", 3, r"--custom-objects defines no class AttentionWeightedAverage"),
    ("import sys\nsys.exit(5)\n", 3, r"--custom-objects: the file does not import \(SystemExit: 5\)"),
])
def test_bad_custom_objects_file_is_one_line(tmp_path, body, code, message):
    import re

    bad = tmp_path / "mine.py"
    bad.write_text(body)
    out = tmp_path / "o.keras"
    res = run("convert", BIDIR, out, "--check-load", "--custom-objects", bad)
    assert res.exit_code == code
    lines = [l for l in res.output.splitlines() if l.startswith("gruconv: error:")]
    assert len(lines) == 1 and re.search(message, lines[0]), res.output
    assert not out.exists() and "Traceback" not in res.output


def test_custom_objects_must_be_a_python_file(tmp_path):
    txt = tmp_path / "classes.txt"
    txt.write_text("x = 1\n")
    res = run("convert", BIDIR, tmp_path / "o.keras", "--check-load", "--custom-objects", txt)
    assert res.exit_code == 2 and "--custom-objects takes a Python file (.py)" in res.output


def test_custom_objects_file_runs_only_when_named(tmp_path):
    """The user's file is the only code gruconv loads, and only when given: a marker it would write
    appears with --custom-objects and not without (the classes file sits next to the model)."""
    marker = tmp_path / "MARKER"
    classes = tmp_path / "custom_layers.py"
    classes.write_text(CLASSES.read_text() + f"\nopen({str(marker)!r}, 'w').close()\n")
    model = tmp_path / "m.h5"
    model.write_bytes(BIDIR.read_bytes())
    assert run("convert", model, tmp_path / "a.keras", "--check-load").exit_code == 0
    assert run("verify", model, tmp_path / "a.keras").exit_code == 0
    assert not marker.exists()
    assert run("convert", model, tmp_path / "b.keras", "--check-load", "--custom-objects", classes).exit_code == 0
    assert marker.exists()


def test_custom_objects_not_imported_for_a_model_without_custom_layers(tmp_path):
    marker = tmp_path / "MARKER"
    classes = tmp_path / "mine.py"
    classes.write_text(f"open({str(marker)!r}, 'w').close()\n")
    res = run("convert", FIXTURES / "keras" / "sequential.h5", tmp_path / "s.keras", "--check-load",
              "--custom-objects", classes)
    assert res.exit_code == 0 and "the model has no custom layers; the file was not imported" in res.output
    assert not marker.exists()


def test_custom_objects_refused_where_nothing_reads_it(tmp_path):
    res = run("convert", BIDIR, tmp_path / "o.h5", "--custom-objects", CLASSES)
    assert res.exit_code == 2 and "--custom-objects does not apply" in res.output


def test_lambda_stays_refused_and_points_at_h5(tmp_path):
    from make_bad_inputs import _lambda_layer  # noqa: F401  (the hostile Lambda config of the bad-input suite)
    from gruconv.errors import UnsupportedError
    from gruconv.readers import keras_h5
    from gruconv.writers.planning import plan

    doc = keras_h5.read(BIDIR)
    doc.lambdas = ["evil_lambda"]
    for name in ("o.keras", "o.weights.h5"):
        with pytest.raises(UnsupportedError) as e:
            plan(doc.document(), tmp_path / name, keras_h5.Options())
        assert "stored in the model file" in e.value.message and "OUT.h5 (--format h5-weights)" in e.value.message


# --------------------------------------------------------------------------- verify


@pytest.mark.parametrize("src", [TEXTGEN, BIDIR], ids=["textgenrnn", "bidir"])
def test_verify_without_classes_checks_each_layer(src, tmp_path):
    out, _ = _converted(tmp_path, src)
    for args in ((src,), (src, out)):
        res = run("verify", *args)
        assert res.exit_code == 0, res.output
        assert "cannot be rebuilt without their code" in res.output
        assert "end-to-end check needs --custom-objects FILE.py" in res.output
    if src == TEXTGEN:
        assert "rnn_1: fed the rows of Embedding 'embedding' for random token ids" in res.output
        assert "rnn_2: fed the output of the converted layer 'rnn_1'" in res.output
        assert res.output.count(": state c") == 2


@pytest.mark.parametrize("src", [TEXTGEN, BIDIR], ids=["textgenrnn", "bidir"])
def test_verify_with_classes_runs_the_model(src, tmp_path):
    out, _ = _converted(tmp_path, src)
    res = run("verify", src, out, "--custom-objects", CLASSES)
    assert res.exit_code == 0, res.output
    assert "cannot be rebuilt" not in res.output
    if src == BIDIR:  # a Sequential: end to end through the user's attention layer too
        assert "end to end: model output" in res.output


def test_convert_verify_without_and_with_classes(tmp_path):
    res = run("convert", TEXTGEN, tmp_path / "a.keras", "--verify")
    assert res.exit_code == 0 and "parity: PASS" in res.output, res.output
    res = run("convert", TEXTGEN, tmp_path / "b.keras", "--verify", "--custom-objects", CLASSES)
    assert res.exit_code == 0 and "parity: PASS" in res.output, res.output


def _planted(src: Path, dst: Path, dataset: str) -> None:
    """``src`` (a converted .keras) with one recurrent weight moved by 0.05 in ``model.weights.h5``."""
    with zipfile.ZipFile(src) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    buf = io.BytesIO(members["model.weights.h5"])
    with h5py.File(buf, "r+") as f:
        v = f[dataset][()]
        v.flat[0] += 0.05
        f[dataset][...] = v
    members["model.weights.h5"] = buf.getvalue()
    with zipfile.ZipFile(dst, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)


@pytest.mark.parametrize("src, dataset", [(TEXTGEN, "layers/lstm_1/cell/vars/1"),
                                          (BIDIR, "layers/bidirectional/backward_layer/cell/vars/0")],
                         ids=["textgenrnn", "bidir"])
def test_planted_error_fails_verify(src, dataset, tmp_path):
    out, _ = _converted(tmp_path, src)
    bad = tmp_path / "planted.keras"
    _planted(out, bad, dataset)
    for extra in ((), ("--custom-objects", CLASSES)):
        res = run("verify", src, bad, *extra)
        assert res.exit_code == 1, res.output  # and no exception escaped: run()
        assert "parity FAIL" in res.output


# --------------------------------------------------------------------------- inspect and batch


def test_inspect_lists_custom_layers():
    res = run("inspect", TEXTGEN, "--json")
    assert res.exit_code == 0
    info = json.loads(res.output)
    (entry,) = info["custom_layers"]
    assert entry["path"] == "attention" and entry["class"] == "AttentionWeightedAverage"
    assert entry["weights"] == [{"name": "attention/attention_W:0", "shape": [32, 1], "dtype": "float32"}]
    assert "carries it over" in entry["convert"]
    text = run("inspect", TEXTGEN).output
    assert "custom layer attention (AttentionWeightedAverage): attention/attention_W:0 (32, 1) float32" in text


def test_batch_converts_custom_models_with_warnings(tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    for src in (TEXTGEN, BIDIR):
        (tree / "sub" / src.name).write_bytes(src.read_bytes())
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    res = run("convert", tree, "--out-dir", tmp_path / "out", "--jobs", "1", "--report", report, "--junit", junit)
    assert res.exit_code == 0, res.output
    records = json.loads(report.read_text())["inputs"]
    assert [r["status"] for r in records] == ["ok", "ok"]
    assert all(any("custom layer class AttentionWeightedAverage" in w for w in r["warnings"]) for r in records)
    xml = junit.read_text()
    assert "<failure" not in xml and "custom layer class AttentionWeightedAverage" in xml
    assert (tmp_path / "out" / "sub" / "textgenrnn.keras").is_file()
