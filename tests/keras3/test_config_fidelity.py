"""Config fidelity: a converted model's config equals the original's in every field but the documented
changes (issue 10, ``shared/DESIGN.md`` "The output contract").

For every Keras fixture that converts, the original ``model_config`` (legacy JSON in the HDF5 file) and
the written ``config.json`` are walked side by side, layer by layer (nested models and the layers inside
``Bidirectional`` / ``TimeDistributed`` included).  Documented changes:

* cuDNN layers: class ``CuDNNGRU``/``CuDNNLSTM`` -> ``GRU``/``LSTM``; ``activation``,
  ``recurrent_activation``, ``use_bias``, ``reset_after`` (GRU) written explicitly; ``time_major``
  dropped (always False in files gruconv accepts); inside ``Bidirectional`` Keras 3 names the layers
  ``forward_<name>`` / ``backward_<name>``.
* every layer: ``batch_input_shape`` / ``input_shape`` / ``batch_size`` move to an ``InputLayer``
  (Keras 3 keeps input shapes there only); Embedding's deprecated ``input_length``; serialization
  style (``module``, ``registered_name``, ``shared_object_id``, ``build_config``) and tf.keras dtype
  policy objects written as their names.

Every other key the original has must be in the converted config with the same value.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import h5py
import pytest

from conftest import FIXTURES

_STYLE = {"module", "registered_name", "shared_object_id", "build_config", "compile_config"}
_MOVED = {"batch_input_shape", "input_shape", "batch_size", "input_length", "time_major", "input_dim"}
_CUDNN_SET = {"activation", "recurrent_activation", "use_bias", "reset_after", "dropout", "recurrent_dropout",
              "unroll"}
_CUDNN = {"CuDNNGRU": "GRU", "CuDNNLSTM": "LSTM"}


def _plain(v):
    """A config value without serialization-style keys, dtype policies as their names."""
    if isinstance(v, dict):
        if v.get("class_name") in ("Policy", "DTypePolicy") and isinstance(v.get("config"), dict):
            return v["config"].get("name")
        return {k: _plain(x) for k, x in v.items() if k not in _STYLE}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _layers(cfg) -> list:
    c = cfg.get("config")
    if isinstance(c, list):
        return c
    if isinstance(c, dict) and isinstance(c.get("layers"), list):
        return c["layers"]
    return []


def _name(cfg) -> str:
    c = cfg.get("config")
    return (c.get("name") if isinstance(c, dict) else None) or cfg.get("name")


def _pairs(orig: dict, conv: dict, where: str):
    """Yield (where, original layer cfg, converted layer cfg) for every layer, recursively."""
    yield where, orig, conv
    by_name = {_name(l): l for l in _layers(conv)}
    for layer in _layers(orig):
        name = _name(layer)
        assert name in by_name, f"{where}: layer {name!r} missing from the converted config"
        yield from _pairs(layer, by_name[name], f"{where}/{name}")
    oc, cc = orig.get("config"), conv.get("config")
    if isinstance(oc, dict) and isinstance(oc.get("layer"), dict):
        inner = oc["layer"]
        if orig.get("class_name") == "Bidirectional":
            yield from _pairs(inner, cc["layer"], f"{where}/forward")
            backward = oc.get("backward_layer")
            if backward is None:  # Keras builds it from the forward layer, going the other way
                backward = json.loads(json.dumps(inner))
                backward["config"]["go_backwards"] = not backward["config"].get("go_backwards", False)
            yield from _pairs(backward, cc["backward_layer"], f"{where}/backward")
        else:
            yield from _pairs(inner, cc["layer"], f"{where}/layer")


def _same(conv_value, orig_value) -> bool:
    """Equal, where a converted object may add keys that hold None (Keras 3 defaults such as an
    initializer's ``input_axes``; ``keras_portable`` strips those that older Keras does not know)."""
    a, b = _plain(conv_value), _plain(orig_value)
    if isinstance(a, dict) and isinstance(b, dict):
        extra = set(a) - set(b)
        return all(a[k] is None for k in extra) and all(k in a and _same(a[k], b[k]) for k in b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(b, list) and len(b) == 1 and not isinstance(a, list):  # Keras 3 writes axis [2] as 2
        return _same(a, b[0])
    return a == b


def _half_precision_identity(where, key, conv_value, orig_value, layer_conf) -> bool:
    """The documented change for float16 layers (``keras_portable``): Orthogonal -> Identity, same gain."""
    a, b = _plain(conv_value), _plain(orig_value)
    return (key == "recurrent_initializer" and layer_conf.get("dtype") in ("float16", "bfloat16")
            and isinstance(a, dict) and isinstance(b, dict) and a.get("class_name") == "Identity"
            and b.get("class_name") == "Orthogonal"
            and (a.get("config") or {}).get("gain", 1.0) == (b.get("config") or {}).get("gain", 1.0))


def diff_configs(orig: dict, conv: dict) -> list:
    """Every undocumented difference, as text (empty when faithful)."""
    problems = []
    for where, o, c in _pairs(orig, conv, "model"):
        ocls, ccls = o.get("class_name"), c.get("class_name")
        cudnn = ocls in _CUDNN
        want_cls = _CUDNN.get(ocls, ocls)
        if ocls in ("Model", "Functional") and ccls in ("Model", "Functional"):
            want_cls = ccls
        if ccls != want_cls:
            problems.append(f"{where}: class {ccls!r}, expected {want_cls!r}")
            continue
        oconf, cconf = o.get("config"), c.get("config")
        if not isinstance(oconf, dict) or not isinstance(cconf, dict):
            continue
        for key, value in oconf.items():
            if key in _STYLE or key in _MOVED or key in ("layers", "layer", "backward_layer", "input_layers",
                                                         "output_layers"):
                continue
            if cudnn and key in _CUDNN_SET:
                continue
            if key == "name" and where.endswith(("/forward", "/backward")):
                side = "forward_" if where.endswith("/forward") else "backward_"
                if cconf.get("name") not in (value, side + str(value)):
                    problems.append(f"{where}: name {cconf.get('name')!r} for {value!r}")
                continue
            if key not in cconf:
                if value is not None:  # Keras 3 leaves out some keys that hold None
                    problems.append(f"{where}: key {key!r} dropped (was {value!r:.80})")
            elif not _same(cconf[key], value) and not _half_precision_identity(where, key, cconf[key], value, oconf):
                problems.append(f"{where}: {key} = {_plain(cconf[key])!r:.120} where the original has "
                                f"{_plain(value)!r:.120}")
        if cudnn:
            for key, value in (("activation", "tanh"), ("recurrent_activation", "sigmoid"), ("use_bias", True)):
                if _plain(cconf.get(key)) != value:
                    problems.append(f"{where}: {key} = {cconf.get(key)!r}, expected {value!r}")
            if ccls == "GRU" and cconf.get("reset_after") is not True:
                problems.append(f"{where}: reset_after = {cconf.get('reset_after')!r}, expected True")
    return problems


def _converted_cases() -> list:
    cases = []
    for folder in ("keras", "keras_user"):
        manifest = json.loads((FIXTURES / folder / "manifest.json").read_text())
        files = manifest.get("fixtures", manifest)
        for name in sorted(files):
            p = FIXTURES / folder / name
            if p.suffix != ".h5" or not p.is_file():
                continue
            with h5py.File(p, "r") as f:
                if "model_config" not in f.attrs:
                    continue
                cfg = json.loads(f.attrs["model_config"])
            if "CuDNN" not in json.dumps(cfg):
                continue
            # tier (docs/testing.md): one TensorFlow child per case; make test runs one file per folder
            cases.append(pytest.param(p, id=f"{folder}/{name}",
                                      marks=() if not any(folder in str(c.id) for c in cases) else pytest.mark.slow))
    return cases


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fidelity")


@pytest.mark.parametrize("path", _converted_cases())
def test_converted_config_is_faithful(path, out_dir):
    out = out_dir / (path.parent.name + "_" + path.stem + ".keras")
    res = subprocess.run([sys.executable, "-m", "gruconv", "convert", str(path), str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    with h5py.File(path, "r") as f:
        orig = json.loads(f.attrs["model_config"])
    with zipfile.ZipFile(out) as z:
        conv = json.loads(z.read("config.json"))
    problems = diff_configs(orig, conv)
    assert not problems, "\n".join(problems)


def test_diff_catches_a_changed_field():
    """The comparison fails on what it must catch: a lost initializer, a changed unit count, a wrong
    recurrent activation (Keras 2.0–2.2's hard_sigmoid default)."""
    orig = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "CuDNNGRU", "config": {"name": "g", "units": 4, "return_sequences": False,
                                              "kernel_initializer": {"class_name": "GlorotUniform",
                                                                     "config": {"seed": None}}}}]}}
    good = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"module": "keras.layers", "class_name": "GRU", "config": {
            "name": "g", "units": 4, "return_sequences": False, "activation": "tanh",
            "recurrent_activation": "sigmoid", "use_bias": True, "reset_after": True,
            "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                                   "config": {"seed": None}, "registered_name": None}}}]}}
    assert diff_configs(orig, good) == []
    for key, bad in (("kernel_initializer", {"class_name": "Zeros", "config": {}}), ("units", 5),
                     ("recurrent_activation", "hard_sigmoid")):
        broken = json.loads(json.dumps(good))
        broken["config"]["layers"][0]["config"][key] = bad
        assert diff_configs(orig, broken), key
