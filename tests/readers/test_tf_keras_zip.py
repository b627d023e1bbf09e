"""tf_keras ``.keras`` zips holding CuDNNGRU/CuDNNLSTM (issue 31 part 3): read as legacy models and
converted exactly like their HDF5 twins.

Fixtures: ``fixtures/tf_keras_zip`` (``fixtures/make_tf_keras_zip_fixtures.py``): each model saved by
tf_keras 2.21 both as ``NAME.keras`` (its ``saving_lib`` zip, ``metadata.json`` ``keras_version``
2.21.0) and as ``NAME.h5`` (its legacy HDF5 writer).

* Same output: the Keras 3 ``.keras`` gruconv writes from the zip equals the one it writes from the
  HDF5 twin -- ``config.json`` equal, every weight bit for bit (the HDF5 route is tested against
  Keras and the float64 oracle elsewhere: ``tests/readers/test_keras_h5.py``, ``tests/writers/test_streaming_writer.py``).
* Independent reference (no gruconv code): tf_keras itself, in a subprocess, builds the zip's
  ``config.json`` and loads its ``model.weights.h5`` with its own reader (``load_weights`` of a
  ``.weights.h5``; building runs no cuDNN op; tf_keras's ``load_model`` cannot resolve the CuDNN
  classes its own ``.keras`` names), saves the weights as legacy HDF5 and loads them into a
  plain-layer twin (GRU(reset_after=True)/LSTM with the cuDNN settings): tf_keras's ``load_weights``
  converts cuDNN weights itself (``_convert_rnn_weights`` in
  ``tf_keras/src/saving/legacy/hdf5_format.py``).  Keras 3's ``load_model`` of gruconv's output must
  predict what the twin predicts within 1e-5, and a 0.05 change of one recurrent weight must not.
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
from gruconv import api, readers
from gruconv.cli import main as cli

pytestmark = pytest.mark.xdist_group("test_tf_keras_zip")

ZIPS = FIXTURES / "tf_keras_zip"
NAMES = ["gru", "lstm", "bidir", "nested", "compiled"]
#: name -> (input features, CuDNN layers in the file)
EXPECT = {"gru": (3, ["cu_dnngru"]), "lstm": (4, ["cu_dnnlstm"]),
          "bidir": (3, ["bidirectional/cu_dnngru", "bidirectional_1/cu_dnnlstm"]),
          "nested": (3, ["inner/cu_dnngru", "cu_dnngru_1"]), "compiled": (3, ["cu_dnngru"])}
TOL = 1e-5


def _archive(path: Path) -> tuple:
    """(config.json, metadata.json, {weight path: array}) of a ``.keras`` file."""
    with zipfile.ZipFile(path) as z:
        config, meta = json.loads(z.read("config.json")), json.loads(z.read("metadata.json"))
        weights = {}
        with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
            f.visititems(lambda n, o: weights.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return config, meta, weights


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfkzip")
    results = {}
    for name in NAMES:
        for suffix in ("keras", "h5"):
            target = out / f"{name}.from_{suffix}.keras"
            results[name, suffix] = (api.convert(ZIPS / f"{name}.{suffix}", target), target)
    return results


@pytest.mark.parametrize("name", NAMES)
def test_zip_is_read_as_a_legacy_model(name):
    path = ZIPS / f"{name}.keras"
    assert readers.detect(path) == "tf-keras-zip"
    info = api.inspect(path)
    assert info["format"] == "tf-keras-zip" and info["keras_version"].startswith("2.")
    assert [r["name"] for r in info["rnns"]] == EXPECT[name][1]
    twin = api.inspect(ZIPS / f"{name}.h5")
    # what convert writes, said by inspect, is the HDF5 twin's
    assert [(r["name"], r["converts_to"], r["shape"]) for r in info["rnns"]] == \
        [(r["name"], r["converts_to"], r["shape"]) for r in twin["rnns"]]
    assert info["cudnn_eligibility"]["legacy"] is True


@pytest.mark.parametrize("name", NAMES)
def test_same_keras3_file_as_the_hdf5_twin(converted, name):
    res_zip, zip_out = converted[name, "keras"]
    res_h5, h5_out = converted[name, "h5"]
    assert not res_zip.nothing_to_convert and res_zip.outputs == [str(zip_out)]
    assert [r["converts_to"] for r in res_zip.rnns] == [r["converts_to"] for r in res_h5.rnns]
    assert res_zip.warnings == res_h5.warnings
    cz, mz, wz = _archive(zip_out)
    ch, mh, wh = _archive(h5_out)
    assert mz["keras_version"].startswith("3.")
    assert cz == ch
    assert sorted(wz) == sorted(wh) and wz
    for k in wz:
        assert wz[k].dtype == wh[k].dtype and wz[k].shape == wh[k].shape and wz[k].tobytes() == wh[k].tobytes(), k


def test_compiled_model_drops_the_optimizer_with_the_hdf5_note(converted):
    res, out = converted["compiled", "keras"]
    assert any(w.startswith("optimizer state (") and "dropped" in w for w in res.warnings)
    config, _, weights = _archive(out)
    assert config["compile_config"]["optimizer"]["config"]["learning_rate"] == pytest.approx(0.01)
    assert config["compile_config"]["loss"] == "mse"


REFERENCE = r'''
import json, os, sys, zipfile
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import numpy as np, tensorflow as tf, tf_keras as K
custom = {"CuDNNGRU": tf.compat.v1.keras.layers.CuDNNGRU, "CuDNNLSTM": tf.compat.v1.keras.layers.CuDNNLSTM}

def plain(obj):
    if isinstance(obj, dict):
        if obj.get("class_name") in custom:
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

def unmodule(obj):
    """tf_keras's deserializer looks a ``module``-named CuDNN class up in that module and fails."""
    if isinstance(obj, dict):
        if obj.get("class_name") in custom:
            obj.pop("module", None); obj.pop("registered_name", None)
        for v in obj.values():
            unmodule(v)
    elif isinstance(obj, list):
        for v in obj:
            unmodule(v)
    return obj

for job in json.loads(sys.argv[1]):
    with zipfile.ZipFile(job["zip"]) as z:
        cfg = json.loads(z.read("config.json"))
        open(job["tmp_v3"], "wb").write(z.read("model.weights.h5"))
    cfg.pop("compile_config", None)
    cudnn = K.models.model_from_json(json.dumps(unmodule(cfg)), custom_objects=custom)
    cudnn.load_weights(job["tmp_v3"])  # tf_keras's own reader of its .keras weights layout
    cudnn.save_weights(job["tmp_h5"])
    twin = K.models.model_from_json(json.dumps(plain(json.loads(cudnn.to_json()))))
    twin.load_weights(job["tmp_h5"])
    np.save(job["y"], twin.predict(np.load(job["x"]), verbose=0))
'''

CONVERTED = r'''
import json, os, sys
os.environ.pop("TF_USE_LEGACY_KERAS", None); os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras
for job in json.loads(sys.argv[1]):
    model = keras.saving.load_model(job["keras"])
    if job.get("plant"):  # a 0.05 change of one recurrent weight, which the comparison must see
        v = next(w for w in model.weights if "recurrent_kernel" in w.path)
        a = np.array(v.numpy()); a[0, 0] += 0.05; v.assign(a)
    np.save(job["y"], model.predict(np.load(job["x"]), verbose=0))
'''


def _run(script: str, jobs: list) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", script, json.dumps(jobs)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow  # two interpreters (tf_keras, Keras 3): ~60 s on the shared 2-core machine
def test_keras3_predicts_what_tf_keras_predicts(converted, tmp_path):
    rng = np.random.default_rng(31)
    ref_jobs, conv_jobs = [], []
    for name in NAMES:
        x = tmp_path / f"{name}.x.npy"
        np.save(x, rng.uniform(-1, 1, size=(3, 7, EXPECT[name][0])).astype(np.float32))
        ref_jobs.append({"zip": str(ZIPS / f"{name}.keras"), "tmp_h5": str(tmp_path / f"{name}.tmp.h5"),
                         "tmp_v3": str(tmp_path / f"{name}.tmp.weights.h5"),
                         "x": str(x), "y": str(tmp_path / f"{name}.ref.npy")})
        conv_jobs.append({"keras": str(converted[name, "keras"][1]), "x": str(x),
                          "y": str(tmp_path / f"{name}.got.npy")})
    conv_jobs.append(dict(conv_jobs[0], plant=True, y=str(tmp_path / "planted.npy")))
    _run(REFERENCE, ref_jobs)
    _run(CONVERTED, conv_jobs)
    for name in NAMES:
        ref, got = np.load(tmp_path / f"{name}.ref.npy"), np.load(tmp_path / f"{name}.got.npy")
        assert ref.shape == got.shape
        assert np.abs(ref - got).max() <= TOL, name
        assert np.abs(ref).max() > 0.05, name  # a real signal, not zeros
    planted = np.load(tmp_path / "planted.npy")
    assert np.abs(planted - np.load(tmp_path / f"{NAMES[0]}.ref.npy")).max() > TOL


def _plant(src: Path, dst: Path) -> None:
    """``src`` with one value of its first GRU's recurrent kernel moved by 0.05 (rewritten as Keras
    writes it: stored members, same names)."""
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    buf = io.BytesIO(members["model.weights.h5"])
    with h5py.File(buf, "r+") as f:
        name = next(n for n in ("layers/gru/cell/vars/1",) if n in f)
        a = f[name][()]
        a[0, 0] += 0.05
        f[name][...] = a
    members["model.weights.h5"] = buf.getvalue()
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


@pytest.mark.slow  # three verify runs, each builds or loads the model in Keras: ~40 s
def test_verify_cli_zip_alone_and_against_its_conversion(converted, tmp_path):
    runner = CliRunner()
    src = str(ZIPS / "gru.keras")
    out = converted["gru", "keras"][1]
    r = runner.invoke(cli, ["verify", src, "--reference", "oracle"])
    assert r.exit_code == 0, r.output
    assert "parity: PASS" in r.output
    r = runner.invoke(cli, ["verify", src, str(out), "--reference", "oracle"])
    assert r.exit_code == 0, r.output
    bad = tmp_path / "planted.keras"
    _plant(out, bad)
    r = runner.invoke(cli, ["verify", src, str(bad), "--reference", "oracle"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output  # an exit, not a crash
    assert "FAIL" in r.output


def test_cli_convert_says_what_it_wrote(tmp_path):
    out = tmp_path / "m.keras"
    r = CliRunner().invoke(cli, ["convert", str(ZIPS / "lstm.keras"), str(out)])
    assert r.exit_code == 0, r.output
    assert "nothing to convert" not in r.output
    assert "cu_dnnlstm: CuDNNLSTM -> LSTM(" in r.output
    assert _archive(out)[1]["keras_version"].startswith("3.")


def test_batch_picks_up_zips_and_names_outputs_apart(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for n in ("gru.keras", "lstm.keras", "bidir.h5"):
        (src / n).write_bytes((ZIPS / n).read_bytes())
    r = CliRunner().invoke(cli, ["convert", str(src), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")) == \
        ["bidir.keras", "gru.keras", "lstm.keras"]
    assert _archive(tmp_path / "out" / "gru.keras")[1]["keras_version"].startswith("3.")
    # the input's own name: converting in place would overwrite it, and is refused
    before = (src / "gru.keras").read_bytes()
    r = CliRunner().invoke(cli, ["convert", str(src), "--out-dir", str(src)])
    assert r.exit_code == 3 and isinstance(r.exception, SystemExit), r.output
    assert (src / "gru.keras").read_bytes() == before


def _rewrite(src: Path, dst: Path, edit) -> None:
    with zipfile.ZipFile(src) as z:
        members = [(i, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(dst, "w") as z:
        for info, data in members:
            edit(z, info, data)


def test_compressed_weights_member_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "deflated.keras"
    _rewrite(ZIPS / "gru.keras", bad, lambda z, i, d: z.writestr(i.filename, d, compress_type=zipfile.ZIP_DEFLATED))
    r = CliRunner().invoke(cli, ["convert", str(bad), str(tmp_path / "o.keras")])
    assert r.exit_code == 3 and isinstance(r.exception, SystemExit), r.output
    assert "compressed" in r.output and not (tmp_path / "o.keras").exists()


def test_weight_with_no_place_in_keras3_is_refused(tmp_path):
    bad = tmp_path / "extra.keras"

    def edit(z, info, data):
        if info.filename == "model.weights.h5":
            buf = io.BytesIO(data)
            with h5py.File(buf, "r+") as f:
                f["layers/dense/vars"].create_dataset("2", data=np.zeros(3, np.float32))
            data = buf.getvalue()
        z.writestr(info.filename, data)

    _rewrite(ZIPS / "gru.keras", bad, edit)
    r = CliRunner().invoke(cli, ["convert", str(bad), str(tmp_path / "o.keras")])
    assert r.exit_code == 3 and isinstance(r.exception, SystemExit), r.output
    assert "layers/dense/vars/2" in r.output and not (tmp_path / "o.keras").exists()


def test_traversal_member_name_is_refused(tmp_path):
    bad = tmp_path / "evil.keras"

    def edit(z, info, data):
        z.writestr(info.filename, data)
        if info.filename == "config.json":
            z.writestr("../evil.txt", b"x")

    _rewrite(ZIPS / "gru.keras", bad, edit)
    r = CliRunner().invoke(cli, ["convert", str(bad), str(tmp_path / "o.keras")])
    assert r.exit_code == 3 and isinstance(r.exception, SystemExit), r.output
    assert "not one Keras writes" in r.output


def test_other_outputs_as_for_the_twin(tmp_path):
    """torch: the cuDNN layers' modules equal the twin's bit for bit (the other weights keep this
    layout's names); legacy .h5 weights, whose writer copies the legacy groups, are refused before
    anything is written; ONNX refuses a full model as for the twin."""
    from safetensors.numpy import load_file

    zip_out, h5_out = tmp_path / "z.safetensors", tmp_path / "h.safetensors"
    api.convert(ZIPS / "bidir.keras", zip_out)
    api.convert(ZIPS / "bidir.h5", h5_out)
    z, h = load_file(str(zip_out)), load_file(str(h5_out))
    rnn_keys = sorted(k for k in h if "cu_dnn" in k)
    assert rnn_keys and rnn_keys == sorted(k for k in z if "cu_dnn" in k)
    assert all(z[k].tobytes() == h[k].tobytes() for k in rnn_keys)
    assert len(z) == len(h)
    for target in ("w.h5", "o.onnx"):
        r = CliRunner().invoke(cli, ["convert", str(ZIPS / "bidir.keras"), str(tmp_path / target)])
        twin = CliRunner().invoke(cli, ["convert", str(ZIPS / "bidir.h5"), str(tmp_path / ("t" + target))])
        assert r.exit_code in (2, 3) and isinstance(r.exception, SystemExit), r.output
        assert not (tmp_path / target).exists()
        if target.endswith(".onnx"):
            assert r.exit_code == twin.exit_code


def test_inspect_and_convert_import_no_ml_framework(tmp_path):
    """The streamed route: a tf_keras zip is inspected and converted with h5py and NumPy only."""
    code = ("import sys\nfrom gruconv import api\n"
            f"api.inspect({str(ZIPS / 'nested.keras')!r})\n"
            f"api.convert({str(ZIPS / 'nested.keras')!r}, {str(tmp_path / 'o.keras')!r})\n"
            "print([m for m in ('tensorflow', 'keras', 'tf_keras', 'torch', 'jax') if m in sys.modules])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(Path(api.__file__).parents[1])})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
    assert (tmp_path / "o.keras").exists()
