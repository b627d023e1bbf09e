"""gruconv.keras_portable: config rewrites for older Keras 3 releases (no framework needed)."""

import json
import zipfile

import pytest

from gruconv.keras_portable import non_portable, portable_config, rewrite_keras_zip


def _init(cls="GlorotUniform", **cfg):
    return {"module": "keras.initializers", "class_name": cls, "config": cfg, "registered_name": None}


def _doc():
    gru = {"module": "keras.layers", "class_name": "GRU", "config": {
        "name": "g", "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float16"}},
        "kernel_initializer": _init(seed=None, input_axes=None, output_axes=None),
        "recurrent_initializer": _init("Orthogonal", seed=None, gain=0.5)}}
    emb = {"module": "keras.layers", "class_name": "Embedding",
           "config": {"name": "e", "input_dim": 3, "output_dim": 2, "quantization_config": None}}
    opt = {"module": "keras.src.backend.torch.optimizers.torch_adam", "class_name": "Adam",
           "config": {"learning_rate": 0.001}, "registered_name": "Adam"}
    return {"module": "keras", "class_name": "Functional", "config": {"layers": [emb, gru]},
            "compile_config": {"optimizer": opt, "loss": "mse"}}


def test_portable_config_drops_default_keys_only():
    doc = _doc()
    before = json.dumps(doc)
    out = portable_config(doc)
    assert json.dumps(doc) == before  # input untouched
    emb, gru = out["config"]["layers"]
    assert gru["config"]["kernel_initializer"]["config"] == {"seed": None}
    assert "quantization_config" not in emb["config"]
    assert gru["config"]["recurrent_initializer"]["class_name"] == "Orthogonal"  # off by default
    opt = out["compile_config"]["optimizer"]
    assert (opt["module"], opt["class_name"], opt["registered_name"]) == ("keras.optimizers", "Adam", None)


def test_non_default_value_is_kept_and_reported():
    doc = _doc()
    doc["config"]["layers"][1]["config"]["kernel_initializer"]["config"]["input_axes"] = [0]
    out = portable_config(doc)
    assert out["config"]["layers"][1]["config"]["kernel_initializer"]["config"]["input_axes"] == [0]
    assert non_portable(out) == [("GlorotUniform", "input_axes", [0])]


def test_qr_free_low_precision_keeps_gain():
    out = portable_config(_doc(), qr_free_low_precision=True)
    init = out["config"]["layers"][1]["config"]["recurrent_initializer"]
    assert (init["class_name"], init["config"]) == ("Identity", {"gain": 0.5})


def test_rewrite_keras_zip_copies_other_members_byte_for_byte(tmp_path):
    src, dst = tmp_path / "m.keras", tmp_path / "p.keras"
    weights = bytes(range(256)) * 1000
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("metadata.json", b'{"keras_version": "3.15.1"}')
        z.writestr("config.json", json.dumps(_doc()))
        z.writestr("model.weights.h5", weights)
    rewrite_keras_zip(src, dst)
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst) as b:
        assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
        for name in ("metadata.json", "model.weights.h5"):
            assert a.read(name) == b.read(name)
        assert json.loads(b.read("config.json")) == portable_config(_doc())
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob(".*.tmp"))


def test_rewrite_keras_zip_refuses_a_zip_without_config(tmp_path):
    src = tmp_path / "x.keras"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("other.txt", b"x")
    with pytest.raises(ValueError, match="not a .keras file"):
        rewrite_keras_zip(src, tmp_path / "y.keras")
    assert not (tmp_path / "y.keras").exists()
