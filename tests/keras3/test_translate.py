"""One translation of a Keras 2 config into Keras 3 (issue 28, item 3): ``keras3.config.translate`` is what
the streamed writer writes, what the Keras-built fallback hands to ``model_from_json`` and what ``verify``
without a converted file builds; ``keras3.config.compile_config`` is the one training-config translation.

A layer class outside the streamed writer's vocabulary that Keras 3 knows (``Attention`` here) goes
through the Keras-built route with the same translated dict, carried in the Keras 3 envelope; a malformed
one is exit 3, one line, no file."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from gruconv import api
from gruconv.cli import main
from gruconv.errors import InputError, UnsupportedError
from gruconv.keras3 import config as keras3_config
from gruconv.verify import verify

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"

ATTENTION = {"class_name": "Attention", "config": {"name": "attention", "trainable": True, "dtype": "float32",
                                                   "use_scale": False, "score_mode": "dot", "dropout": 0.0},
             "name": "attention", "inbound_nodes": [[["cu_dnngru", 0, 0, {}], ["cu_dnngru", 0, 0, {}]]]}


def _with_attention(tmp_path: Path, attention: dict = ATTENTION) -> Path:
    """``fixtures/keras/return_state.h5`` (Input -> CuDNNGRU(return_sequences)) with a Keras ``Attention``
    layer (no weights) over the GRU's sequence as the model's output, as tf_keras writes one."""
    path = tmp_path / "attention.h5"
    shutil.copyfile(FIX / "keras" / "return_state.h5", path)
    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        cfg["config"]["layers"].append(attention)
        cfg["config"]["output_layers"] = [["attention", 0, 0]]
        f.attrs["model_config"] = json.dumps(cfg).encode("utf-8")
        root = f["model_weights"]
        root.create_group("attention").attrs["weight_names"] = np.array([], dtype="S1")
        names = [n if isinstance(n, bytes) else str(n).encode() for n in root.attrs["layer_names"]]
        root.attrs["layer_names"] = np.array([*names, b"attention"])
    return path


def test_translate_refuses_outside_the_vocabulary_unless_carried():
    cfg = json.loads(h5py.File(FIX / "keras" / "return_state.h5", "r").attrs["model_config"])
    cfg["config"]["layers"].append(ATTENTION)
    cfg["config"]["output_layers"] = [["attention", 0, 0]]
    with pytest.raises(UnsupportedError, match=r"'model/attention' \(Attention\)"):
        keras3_config.translate(cfg)
    doc = keras3_config.translate(cfg, outside=keras3_config.CARRY)
    layer = doc["config"]["layers"][-1]
    assert (layer["module"], layer["class_name"], layer["registered_name"]) == ("keras.layers", "Attention", None)
    assert layer["config"]["score_mode"] == "dot"
    assert layer["inbound_nodes"][0]["args"][0][0]["config"]["keras_history"] == ["cu_dnngru", 0, 0]
    # in the vocabulary the two agree, and the CuDNN layer is translated inside
    plain = json.loads(h5py.File(FIX / "keras" / "return_state.h5", "r").attrs["model_config"])
    assert keras3_config.translate(plain) == keras3_config.translate(plain, outside=keras3_config.CARRY)
    assert keras3_config.translate(plain)["config"]["layers"][1]["class_name"] == "GRU"


def test_every_route_calls_the_one_translation(tmp_path, monkeypatch):
    """convert (streamed), the Keras-built fallback, and verify without CONVERTED all call translate."""
    calls = []
    real = keras3_config.translate

    def spy(model_config, **kw):
        calls.append(kw.get("outside"))
        return real(model_config, **kw)

    monkeypatch.setattr(keras3_config, "translate", spy)
    api.convert(FIX / "keras" / "sequential.h5", tmp_path / "a.keras")
    assert calls == [None]
    calls.clear()
    assert verify(FIX / "keras" / "sequential.h5", reference="oracle", device="cpu").passed
    assert calls == [keras3_config.CARRY]
    calls.clear()
    api.convert(_with_attention(tmp_path), tmp_path / "b.keras")
    assert calls == [None, keras3_config.CARRY]  # refused by the streamed writer, then built by Keras


def test_attention_converts_through_keras_and_verify_checks_the_same_model(tmp_path):
    """An ``Attention`` layer (outside the streamed vocabulary, Keras 3's own) converts with exit 0 and one
    ``streaming writer:`` line; the file loads with plain ``load_model`` and says what ``translate`` says;
    ``verify in.h5`` and ``verify in.h5 out.keras`` check the same model."""
    from gruconv.keras3 import runtime

    src = _with_attention(tmp_path)
    out = tmp_path / "out.keras"
    res = CliRunner().invoke(main, ["convert", str(src), str(out)])
    assert res.exit_code == 0, res.output
    assert res.exception is None
    notes = [l for l in res.stderr.splitlines() if "streaming writer:" in l]
    assert len(notes) == 1 and "(Attention)" in notes[0]
    with zipfile.ZipFile(out) as z:
        stored = json.loads(z.read("config.json"))
    want = keras3_config.translate(json.loads(h5py.File(src, "r").attrs["model_config"]),
                                   outside=keras3_config.CARRY)
    assert stored == want
    model = runtime.keras().saving.load_model(str(out))
    assert [l.__class__.__name__ for l in model.layers] == ["InputLayer", "GRU", "Attention"]
    in_memory = verify(src, reference="oracle", device="cpu", seed=1)
    with_file = verify(src, out, reference="oracle", device="cpu", seed=1)
    assert in_memory.passed and with_file.passed
    assert [c.name for c in in_memory.checks] == [c.name for c in with_file.checks]
    assert [c.max_abs for c in in_memory.checks] == [c.max_abs for c in with_file.checks]


@pytest.mark.parametrize("attention,match", [
    (dict(ATTENTION, config=dict(ATTENTION["config"], bogus_argument=1)), "Keras 3 cannot build"),
    (dict(ATTENTION, config="oops"), "config is not an object"),
    (dict(ATTENTION, config=dict(ATTENTION["config"], dropout="high")), "Keras 3 cannot build"),
], ids=["unknown-argument", "config-not-an-object", "dropout-a-string"])
def test_a_malformed_carried_layer_is_exit_3(tmp_path, attention, match):
    src = _with_attention(tmp_path, attention)
    out = tmp_path / "out.keras"
    for args in (["convert", str(src), str(out)], ["verify", str(src), "--reference", "oracle"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 3, res.output
        assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), res.exception
        errors = [l for l in res.stderr.splitlines() if l.startswith("gruconv: error:")]
        assert len(errors) == 1 and match in errors[0], res.output
    assert not out.exists()
    with pytest.raises(InputError, match=match):
        api.convert(src, out)


def test_compile_config_is_the_one_training_translation(tmp_path):
    """The Keras-built route compiles with ``compile_config`` (the streamed writer's): a compiled model
    written through it stores the same ``compile_config`` the streamed file does."""
    from gruconv.options import Options
    from gruconv.readers import keras_h5
    from gruconv.writers import keras_model

    src = FIX / "keras_user" / "compiled_adam_mse.h5"
    streamed, built = tmp_path / "s.keras", tmp_path / "b.keras"
    api.convert(src, streamed)
    doc = keras_h5.read(src)
    keras_model._graph_with_keras(doc.document(), built, Options(), [])
    configs = [json.loads(zipfile.ZipFile(p).read("config.json")) for p in (streamed, built)]
    assert configs[0]["compile_config"] == configs[1]["compile_config"]
    assert configs[0] == configs[1]


# --------------------------------------------------------------------------- damaged configs (make fuzz)

def _functional() -> dict:
    with h5py.File(FIX / "keras" / "bidir_concat.h5", "r") as f:
        return json.loads(f.attrs["model_config"])


def _damage(where: str):
    """Damaged shapes the config fuzz found, each an exit 4 (TypeError/KeyError/AttributeError) before
    ``model/keras_config.malformed``: name -> function that damages a Functional config in place."""
    def layer(cfg, i=1):
        return cfg["config"]["layers"][i]
    return {
        "class_name list": lambda c: layer(c).__setitem__("class_name", ["Bidirectional"]),
        "name list": lambda c: layer(c)["config"].__setitem__("name", [None]),
        "config list": lambda c: layer(c, 0).__setitem__("config", []),
        "wrapped layer a string": lambda c: layer(c)["config"].__setitem__("layer", "CuDNNGRU"),
        "output_layers dict": lambda c: c["config"].__setitem__("output_layers", {"x": 1}),
        "output ref short": lambda c: c["config"].__setitem__("output_layers", [["bidirectional", 0]]),
        "input ref not a name": lambda c: c["config"].__setitem__("input_layers", [[{}, 0, 0]]),
        "inbound node a number": lambda c: layer(c).__setitem__("inbound_nodes", [7]),
        "inbound ref index a string": lambda c: layer(c).__setitem__("inbound_nodes", [[["input_1", "0", 0, {}]]]),
    }[where]


DAMAGES = ["class_name list", "name list", "config list", "wrapped layer a string", "output_layers dict",
           "output ref short", "input ref not a name", "inbound node a number", "inbound ref index a string"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_config_is_named_not_crashed_on(damage):
    from gruconv.model.keras_config import malformed

    cfg = _functional()
    assert malformed(cfg) is None  # the real file is well formed
    _damage(damage)(cfg)
    assert malformed(cfg)
    for outside in (None, keras3_config.CARRY):
        with pytest.raises(InputError, match="model_config not understood"):
            keras3_config.translate(cfg, outside=outside)


@pytest.mark.parametrize("damage", ["class_name list", "inbound ref index a string"])
def test_convert_of_a_damaged_config_is_exit_3_one_line(tmp_path, damage):
    cfg = _functional()
    _damage(damage)(cfg)
    path = tmp_path / "damaged.h5"
    shutil.copyfile(FIX / "keras" / "bidir_concat.h5", path)
    with h5py.File(path, "r+") as f:
        f.attrs["model_config"] = json.dumps(cfg).encode()
    before = path.read_bytes()
    r = CliRunner().invoke(main, ["convert", str(path), str(tmp_path / "out.keras")])
    assert r.exit_code == 3, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert len(r.output.strip().splitlines()) == 1 and "not understood" in r.output
    assert not (tmp_path / "out.keras").exists() and path.read_bytes() == before


def test_code_copied_into_an_any_valued_argument_is_refused():
    """``return_sequences`` takes any value in Keras (truthiness), so the translation copies it; the config
    fuzz found a ``Pkg>Lambda`` object written there. The written config is searched for code last."""
    cfg = _functional()
    inner = cfg["config"]["layers"][1]["config"]["layer"]["config"]
    inner["return_sequences"] = {"x": [{"class_name": "Pkg>Lambda", "config": {"name": "l"}}]}
    with pytest.raises(UnsupportedError, match="Lambda"):
        keras3_config.translate(cfg)
