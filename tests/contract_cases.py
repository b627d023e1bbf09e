"""Shared by ``tests/keras3/test_validation.py`` and ``tests/keras3/test_contract_generative.py``: a legacy HDF5
fixture with one config value replaced (a copy of the file, h5py, root attr ``model_config``), the
CLI run on it, and Keras 3's own verdict on an output (plain ``keras.saving.load_model``).

The user's measured cases of issue 31 (:data:`USER_CASES`): values Keras 3 refuses that converted
with exit 0 into a file ``load_model`` could not open.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import h5py

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures"


def _has_config(path: Path) -> bool:
    with h5py.File(path, "r") as f:
        return "model_config" in f.attrs


#: Every whole-model legacy HDF5 file of the three corpora (weights-only files hold no config).
CORPUS = sorted(p for d in ("keras_user", "keras", "keras_lstm") for p in (FIX / d).glob("*.h5") if _has_config(p))


def read_config(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        raw = f.attrs["model_config"]
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def write_config(src: Path, dst: Path, config: dict) -> Path:
    """A copy of ``src`` whose ``model_config`` is ``config`` (NaN / Infinity written as JSON allows)."""
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        f.attrs["model_config"] = json.dumps(config)
    return dst


def layers(config: dict):
    """Every (layer dict) of a legacy config, wrappers' inner layers and nested models included."""
    stack = [config]
    while stack:
        obj = stack.pop()
        if not isinstance(obj, dict):
            continue
        cfg = obj.get("config")
        if not isinstance(cfg, dict):
            continue
        if isinstance(cfg.get("layers"), list):
            stack.extend(cfg["layers"])
            continue
        yield obj
        for key in ("layer", "backward_layer"):
            if isinstance(cfg.get(key), dict):
                stack.append(cfg[key])


def set_value(config: dict, cls: str, arg: str, value) -> dict:
    """A copy of ``config`` with ``arg`` of the first layer of class ``cls`` set to ``value``."""
    out = copy.deepcopy(config)
    for layer in layers(out):
        if layer.get("class_name") == cls:
            layer["config"][arg] = value
            return out
    raise KeyError(cls)


NAN = float("nan")
#: (fixture, class, argument, value): issue 31's measured cases (a pooling axis: Concatenate's axis,
#: the pooling fixtures' merge of two pooled tensors).
USER_CASES = [
    ("keras/bidir_concat.h5", "Bidirectional", "merge_mode", "bogus"),
    ("keras_user/text_classifier.h5", "Dense", "units", -3),
    ("keras_user/batchnorm_dropout.h5", "Dropout", "rate", 2.5),
    ("keras_user/conv1d_gru.h5", "Conv1D", "padding", "bogus"),
    ("keras_user/conv1d_gru.h5", "Conv1D", "kernel_size", [0]),
    ("keras_user/conv1d_gru.h5", "MaxPooling1D", "pool_size", [-2]),
    ("keras_user/text_classifier.h5", "Embedding", "input_dim", 0),
    ("keras_user/global_pooling.h5", "Concatenate", "axis", 7),
    ("keras/sequential.h5", "InputLayer", "batch_input_shape", [None, None, NAN]),
    ("keras_user/text_classifier.h5", "Dense", "dtype", "float33"),
    ("keras_user/text_classifier.h5", "Dense", "activation", "bogus_act"),
]


def load_verdict(path: Path):
    """None when plain ``keras.saving.load_model(path)`` opens the file, else Keras's first line."""
    import warnings

    import keras

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            keras.saving.load_model(str(path))
    except Exception as e:  # noqa: BLE001 - any refusal is the verdict
        text = str(e).strip().splitlines()
        return (text[-1] if text else type(e).__name__)[:300]
    return None


_LOAD_EACH = """
import json, sys, warnings
warnings.simplefilter("ignore")
import keras
out = {}
for p in sys.argv[1:]:
    try:
        keras.saving.load_model(p)
        out[p] = None
    except Exception as e:
        text = str(e).strip().splitlines()
        out[p] = (text[-1] if text else type(e).__name__)[:300]
print(json.dumps(out))
"""


def refusals_elsewhere(paths) -> dict:
    """``{path: {backend: Keras's first line}}`` for each file plain ``load_model`` refuses on JAX or
    torch (one child process per backend; the backend is fixed per process).  The outputs must load
    on every backend, so a value TensorFlow alone takes is rightly refused: this says which."""
    import os
    import subprocess
    import sys

    paths = [str(p) for p in paths]
    out = {p: {} for p in paths}
    if not paths:
        return out
    for backend in ("jax", "torch"):
        env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
        r = subprocess.run([sys.executable, "-c", _LOAD_EACH, *paths], env=env, capture_output=True, text=True,
                           timeout=1200)
        if r.returncode != 0:
            raise RuntimeError(f"the {backend} load failed: {r.stderr[-2000:]}")
        for p, why in json.loads(r.stdout.strip().splitlines()[-1]).items():
            if why is not None:
                out[p][backend] = why
    return out
