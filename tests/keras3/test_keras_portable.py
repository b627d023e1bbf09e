"""gruconv.keras3.portable: config rewrites for older Keras 3 releases (no framework needed)."""

import json
import zipfile

import pytest

from gruconv.keras3.portable import non_portable, portable_config, rewrite_keras_zip


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


def _batch_norm(**over):
    """A BatchNormalization config as Keras 3.15.1 writes it (gruconv.keras3.defaults), with ``over``."""
    from gruconv.keras3.defaults import DEFAULTS

    cfg = dict(json.loads(json.dumps(DEFAULTS["layers"]["BatchNormalization"]["config"])), name="bn", **over)
    return {"module": "keras.layers", "class_name": "BatchNormalization", "config": cfg, "registered_name": None}


def test_batch_renormalization_keys_go_while_renorm_is_off():
    # Keras 3.8-3.13 refuse the three keys (docs/compatibility.md); with renorm off Keras 3.14+ reads
    # neither renorm_clipping nor renorm_momentum, so even a non-default momentum is dropped.
    doc = {"module": "keras", "class_name": "Sequential",
           "config": {"layers": [_batch_norm(renorm_momentum=0.5)]}}
    out = portable_config(doc)["config"]["layers"][0]["config"]
    assert not {"renorm", "renorm_clipping", "renorm_momentum"} & set(out)
    assert (out["momentum"], out["epsilon"], out["synchronized"]) == (0.99, 0.001, False)  # the rest stays
    assert non_portable(doc) == []


def test_batch_renormalization_on_is_kept_and_reported():
    clip = {"rmax": 3.0, "rmin": 0.3, "dmax": 5.0}
    doc = _batch_norm(renorm=True, renorm_clipping=clip)
    out = portable_config(doc)
    cfg = out["config"]
    assert (cfg["renorm"], cfg["renorm_clipping"], cfg["renorm_momentum"]) == (True, clip, 0.99)
    assert non_portable(out) == [("BatchNormalization", "renorm", True)]


def test_streamed_batchnorm_model_carries_no_key_older_keras_refuses(tmp_path):
    """End to end: the streaming writer's config of a tf_keras BatchNormalization model (which wrote
    renorm/renorm_clipping/renorm_momentum) is already portable: the keys Keras 3.8 refused in
    ``make compat`` are gone, and portable_config has nothing left to remove."""
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "fixtures" / "keras_user" / "batchnorm_dropout.h5"
    out = tmp_path / "bn.keras"
    r = subprocess.run([sys.executable, "-m", "gruconv", "convert", str(src), str(out)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "streaming writer:" not in r.stderr  # streamed, not the Keras-built fallback
    with zipfile.ZipFile(out) as z:
        doc = json.loads(z.read("config.json"))
    bns = [o for o in _all_objects(doc) if o["class_name"] == "BatchNormalization"]
    assert bns and all(not {"renorm", "renorm_clipping", "renorm_momentum"} & set(b["config"]) for b in bns)
    assert portable_config(doc) == doc


def _all_objects(node):
    if isinstance(node, dict):
        if "class_name" in node and isinstance(node.get("config"), dict):
            yield node
        for v in node.values():
            yield from _all_objects(v)
    elif isinstance(node, list):
        for v in node:
            yield from _all_objects(v)
