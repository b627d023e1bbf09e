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
from make_bad_inputs import _lambda_layer, _tfsm_layer

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


def test_namespace_function_table_is_keras_own():
    """builtins.py's list of ``keras.layers`` entries that are not Layer classes is exactly Keras's, and
    none of them is a user's class (issue 45 item 6: ``deserialize`` was carried over as one)."""
    from gruconv.keras3.builtins import KERAS3_FUNCTIONS, is_custom

    assert set(KERAS3_FUNCTIONS) == set(namespace_functions())
    assert not any(is_custom(n) for n in KERAS3_FUNCTIONS)
    assert is_custom("Pkg>deserialize")  # a registered class of the user's, by its prefix


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


@pytest.mark.slow
def test_legacy_function_table_covers_tf_keras():
    """Every entry of tf_keras's layer namespaces that is not a Layer class is in Keras 3's list of such
    names or in the legacy one (a tf_keras subprocess)."""
    from gruconv.keras3.builtins import KERAS3_FUNCTIONS, LEGACY_FUNCTIONS

    script = ("import json, tensorflow as tf, tf_keras as K\n"
              "mods = (K.layers, tf.compat.v1.keras.layers, K.layers.experimental, K.layers.experimental.preprocessing)\n"
              "print(json.dumps(sorted({n for m in mods for n in dir(m) if not n.startswith('_') and not "
              "(isinstance(getattr(m, n), type) and issubclass(getattr(m, n), K.layers.Layer))})))")
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    names = set(json.loads(res.stdout.strip().splitlines()[-1]))
    assert names == KERAS3_FUNCTIONS | LEGACY_FUNCTIONS


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


# --------------------------------------------------------------------------- what a carried-over layer may carry


def namespace_functions() -> list:
    """Every ``keras.layers`` entry that is not a Layer class, read from the installed Keras itself."""
    from gruconv.keras3 import runtime as keras3

    layers = keras3.keras().layers
    return sorted(n for n in dir(layers) if not n.startswith("_") and not (
        isinstance(getattr(layers, n), type) and issubclass(getattr(layers, n), layers.Layer)))


def _code(marker: Path) -> str:
    import base64
    import marshal

    fn = eval(f"lambda x: (open({str(marker)!r}, 'w').write('code ran'), x)[1]")  # noqa: S307 - the bait
    return base64.b64encode(marshal.dumps(fn.__code__)).decode("ascii")


#: Each kind of code a config can name, as a builder of its JSON (marker: the file the code would write;
#: outside: a path outside the input).  What the search must find is each one's ``what``.
PAYLOADS = {
    # Keras 2 Lambda (marshalled bytecode), the hostile file's
    "keras2_lambda": lambda marker, outside: _lambda_layer(marker),
    # Keras 3 Lambda: the function as a serialized __lambda__ object
    "keras3_lambda": lambda marker, outside: {
        "module": "keras.layers", "class_name": "Lambda", "registered_name": None, "config": {
            "name": "lambda3", "function": {"class_name": "__lambda__", "config": {
                "code": _code(marker), "defaults": None, "closure": None}}, "arguments": {}}},
    # the bare __lambda__ object, under any key
    "lambda_object": lambda marker, outside: {"class_name": "__lambda__", "config": {
        "code": _code(marker), "defaults": None, "closure": None}},
    # a Keras 2 Lambda's keys under another class's name
    "function_type": lambda marker, outside: {"name": "fn", "function": [_code(marker), None, None],
                                              "function_type": "lambda"},
    # a registered-looking Lambda
    "registered_lambda": lambda marker, outside: dict(_lambda_layer(marker), class_name="Pkg>Lambda"),
    # a TFSMLayer loading a SavedModel from outside the input
    "tfsmlayer": lambda marker, outside: _tfsm_layer(outside),
}


def _nest(payload, path: list):
    """``payload`` at ``path`` (keys: dicts; ints: list positions after that many harmless entries)."""
    for step in reversed(path):
        payload = [{"class_name": "Dense", "config": {"name": f"d{i}", "units": 2}} for i in range(step)] + [payload] \
            if isinstance(step, int) else {step: payload}
    return payload


def _refused(tmp_path: Path, cls: str, payload: str, path: list) -> None:
    """A copy of sequential.h5 with a layer of class ``cls`` whose config holds ``payload`` at ``path``:
    ``convert`` to .keras exits 3 in one line, writes nothing, runs no code."""
    from make_bad_inputs import SEQ, _h5_edit, _insert_layer

    case = tmp_path / f"{cls.replace('>', '_')}-{payload}-{len(path)}"
    case.mkdir()
    marker, outside = case / "MARKER", case / "outside_saved_model"
    nested = _nest(PAYLOADS[payload](marker, outside), path)
    config = {"name": "evil_ns", **(nested if isinstance(nested, dict) and path else {"config": nested})}
    model = _h5_edit(SEQ, case / "m.h5", lambda f: _insert_layer(f, {"class_name": cls, "config": config}, 1,
                                                                  "evil_ns"))
    out = case / "out" / "m.keras"
    out.parent.mkdir()
    res = run("convert", model, out)
    errors = [l for l in res.output.splitlines() if l.startswith("gruconv: error:")]
    assert res.exit_code == 3 and len(errors) == 1, (cls, payload, path, res.output)
    assert "holding Python code" in errors[0] or "loading it from outside the file" in errors[0], errors[0]
    assert "custom layer class" not in res.output and "Traceback" not in res.output
    assert list(out.parent.iterdir()) == [] and not marker.exists()


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_every_namespace_function_with_code_is_refused(payload, tmp_path):
    """Issue 45 item 6, over every name Keras's layer namespace holds that is not a Layer class (read from
    Keras itself), a user's class name and a registered one: a config naming it as its class and holding
    ``payload`` exits 3 on convert, nothing written, no code run."""
    for cls in namespace_functions() + ["MyCustomLayer", "Pkg>deserialize"]:
        _refused(tmp_path, cls, payload, [])


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_code_nested_anywhere_in_a_carried_config_is_refused(data, tmp_path_factory):
    """The same, with the payload nested anywhere in the carried config (keys and list positions drawn by
    hypothesis): the search is the whole config, not the keys a class is known to hand on."""
    cls = data.draw(st.sampled_from(namespace_functions() + ["MyCustomLayer", "Pkg>serialize"]), label="class")
    payload = data.draw(st.sampled_from(sorted(PAYLOADS)), label="payload")
    path = data.draw(st.lists(st.one_of(st.sampled_from(["config", "layer", "layers", "cell", "inner", "kwargs"]),
                                        st.integers(0, 2)), min_size=1, max_size=4), label="path")
    _refused(tmp_path_factory.mktemp("nested"), cls, payload, path)


def test_namespace_function_without_code_is_refused_not_carried(tmp_path):
    """Without code inside, a class named after a Keras function is still no user's layer: refused (the
    Keras-built route: ``outside_layer``), never carried over with a custom_objects advice."""
    from gruconv.errors import UnsupportedError
    from gruconv.keras3.config import CARRY, layer_config
    from make_bad_inputs import SEQ, _h5_edit, _insert_layer

    for cls in namespace_functions():
        with pytest.raises(UnsupportedError, match=rf"\({cls}\): {cls} is a function of Keras's layer namespace"):
            layer_config({"class_name": cls, "config": {"name": "f", "config": {"class_name": "Dense"}}}, "m",
                         outside=CARRY)
    model = _h5_edit(SEQ, tmp_path / "m.h5", lambda f: _insert_layer(f, {"class_name": "deserialize", "config": {
        "name": "plain", "config": {"class_name": "Activation", "config": {"name": "a", "activation": "linear"}}}},
        1, "plain"))
    res = run("convert", model, tmp_path / "m.keras")
    assert res.exit_code == 3 and "deserialize is a function of Keras's layer namespace" in res.output
    assert "custom layer class" not in res.output and not (tmp_path / "m.keras").exists()


def test_code_search_finds_each_kind_and_names_its_path():
    """The one search (model/keras_config.code_in) on a legacy model config: each payload found at the
    layer path walk_layers would give it, found things not searched further, nothing found in a clean one."""
    from gruconv.model.keras_config import code_in
    from gruconv.readers import keras_h5

    clean = keras_h5.read(FIXTURES / "keras" / "nested.h5").model_config
    assert code_in(clean) == []
    for name, build in PAYLOADS.items():
        payload = build(Path("/nonexistent/MARKER"), Path("/elsewhere"))
        cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
            {"class_name": "Bidirectional", "config": {"name": "bi", "layer": {
                "class_name": "deserialize", "config": {"name": "inner", "config": payload}}}}]}}
        (found,) = code_in(cfg)
        what = found[1]
        assert what in ("Lambda", "TFSMLayer", "Python code"), found
        assert found[0].startswith("bi/inner"), found


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
