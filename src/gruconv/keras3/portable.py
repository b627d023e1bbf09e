"""Make a Keras 3 ``.keras`` config loadable by older Keras 3 releases (3.8 and newer).

A ``.keras`` file written by Keras 3.N records every constructor argument of every object as 3.N
knows it.  Arguments added in later releases are unknown to the constructors of earlier ones, and
Keras passes configs to constructors as keyword arguments, so an older Keras refuses the whole
file (``GlorotUniform.__init__() got an unexpected keyword argument 'input_axes'``) although the
argument only holds its default value.  :func:`portable_config` drops exactly those keys, and only
while they hold the value that makes them a no-op; everything else is left as written.

The tables :data:`DROP_IF_DEFAULT` and :data:`DROP_WHEN_OFF` were read off the Keras sources (each
entry names the release that added the argument and the file) and are checked by ``scripts/compat.py``
(``docs/compatibility.md``): every streamed fixture output loaded on Keras 3.8-3.15, and its ``vocab``
step, which deserializes every class the streaming writer can write on each release.

No framework import: this works on the JSON document and the zip container only.
"""

from __future__ import annotations

import copy
import json
import os
import zipfile
from pathlib import Path
from typing import Any, Iterator, Optional

CONFIG_NAME = "config.json"
MAX_CONFIG_BYTES = 64 << 20  # a config.json of a few MB is already a very large model

_VARIANCE_SCALING = ("VarianceScaling", "GlorotUniform", "GlorotNormal", "HeUniform", "HeNormal",
                     "LecunUniform", "LecunNormal")

# (module, class names, key, default): drop ``key`` from the object's config when it equals
# ``default``.  ``module`` is the serialized object's "module" field.
DROP_IF_DEFAULT: tuple = (
    # Keras 3.15: VarianceScaling (and its Glorot/He/Lecun subclasses) gained input_axes/output_axes
    # (keras/src/initializers/random_initializers.py; absent from 3.14.0's wheel); None = the former
    # fan computation.
    ("keras.initializers", _VARIANCE_SCALING, "input_axes", None),
    ("keras.initializers", _VARIANCE_SCALING, "output_axes", None),
    # Keras 3.13 (keras/src/layers/core/embedding.py, dense.py, einsum_dense.py; absent from 3.12's
    # wheel, present in 3.13.0's): quantization_config, None = not quantized.
    ("keras.layers", ("Embedding", "Dense", "EinsumDense"), "quantization_config", None),
)

# (module, class names, switch key, off value, dependent keys): when the switch holds its off value,
# the switch and its dependents are dropped whatever the dependents hold (they are read only when the
# switch is on).  Keras 3.14 (keras/src/layers/normalization/batch_normalization.py; absent from
# 3.13.0's wheel): BatchNormalization gained batch renormalization; with ``renorm=False`` neither
# ``renorm_clipping`` nor ``renorm_momentum`` is read (``__init__`` validates the clipping and ``build``
# and ``call`` use both only under ``if renorm`` / ``if self.renorm``).  tf_keras wrote all three, so a
# converted legacy BatchNormalization carries them (fixtures/keras_user/batchnorm_dropout.h5; Keras 3.8
# refused it: ``Unrecognized keyword arguments passed to BatchNormalization: {'renorm': False, ...}``).
DROP_WHEN_OFF: tuple = (
    ("keras.layers", ("BatchNormalization",), "renorm", False, ("renorm_clipping", "renorm_momentum")),
)


# Keras on the torch backend serializes its optimizers under their torch-only subclasses
# (keras/src/backend/torch/optimizers/torch_adam.py ...: "module":
# "keras.src.backend.torch.optimizers.torch_adam", "registered_name": "Adam"); another backend cannot
# import that module.  The public class of the same name takes the same config.
_TORCH_OPTIMIZER_MODULE = "keras.src.backend.torch.optimizers.torch_"
PUBLIC_OPTIMIZERS = ("Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "Ftrl", "Lamb", "Lion",
                     "Nadam", "RMSprop", "SGD")

# Orthogonal needs a QR decomposition at build time, in the variable dtype; jax, torch and NumPy have
# no QR for float16/bfloat16 (TensorFlow has one for float16 only), and Keras 3.3-3.15 build every
# layer - running its initializers - before loading the weights.
_QR_INITIALIZERS = ("Orthogonal", "OrthogonalInitializer")
_LOW_PRECISION = ("float16", "bfloat16")


def _objects(node: Any) -> Iterator[dict]:
    """Every serialized Keras object (``{"class_name", "config", ...}``) in a config document."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if isinstance(n.get("class_name"), str) and isinstance(n.get("config"), dict):
                yield n
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)


def _variable_dtype(layer_config: dict):
    """A layer's variable dtype from its serialized ``dtype`` (a string or a ``DTypePolicy``)."""
    dtype = layer_config.get("dtype")
    if isinstance(dtype, dict):
        dtype = (dtype.get("config") or {}).get("name")
    if not isinstance(dtype, str):
        return None
    return "float32" if dtype.startswith("mixed_") else dtype


def portable_config(config: dict, *, qr_free_low_precision: bool = False) -> dict:
    """A copy of a ``.keras`` ``config.json`` document that Keras 3.8 and newer all accept.

    * Keys in :data:`DROP_IF_DEFAULT` are removed from an object's config only while they hold
      their default value (a non-default value stays: dropping it would change the model).
    * A switch of :data:`DROP_WHEN_OFF` that is off is removed with the keys only it reads.
    * A torch-backend optimizer class (``keras.src.backend.torch.optimizers.torch_adam.Adam``)
      becomes the public one (``keras.optimizers.Adam``), same config.

    ``qr_free_low_precision=True`` (a documented change of the model's config, off by default):
    an ``Orthogonal`` initializer of a layer whose variables are float16/bfloat16 becomes
    ``Identity`` with the same gain.  Both give ``gain *`` a matrix with orthonormal rows (columns
    for a tall one); Identity is the deterministic member of that family, built without a QR.  It
    only acts when the layer is initialised afresh (the stored weights are loaded over it); with it a
    float16 GRU model loads on the jax and torch backends (``docs/compatibility.md``).

    The input is not modified.

    >>> cfg = {"module": "keras.initializers", "class_name": "GlorotUniform",
    ...        "config": {"seed": None, "input_axes": None, "output_axes": None}}
    >>> portable_config(cfg)["config"]
    {'seed': None}
    """
    out = copy.deepcopy(config)
    for obj in _objects(out):
        module, cls, cfg = obj.get("module"), obj["class_name"], obj["config"]
        for rule_module, classes, key, default in DROP_IF_DEFAULT:
            if module == rule_module and cls in classes and key in cfg and cfg[key] == default:
                del cfg[key]
        for rule_module, classes, switch, off, dependents in DROP_WHEN_OFF:
            if module == rule_module and cls in classes and switch in cfg and cfg[switch] is off:
                for key in (switch, *dependents):
                    cfg.pop(key, None)
        if isinstance(module, str) and module.startswith(_TORCH_OPTIMIZER_MODULE) and cls in PUBLIC_OPTIMIZERS:
            obj["module"] = "keras.optimizers"
            obj["registered_name"] = None
        if qr_free_low_precision and _variable_dtype(cfg) in _LOW_PRECISION:
            for key, value in cfg.items():
                if isinstance(value, dict) and value.get("class_name") in _QR_INITIALIZERS:
                    gain = (value.get("config") or {}).get("gain", 1.0)
                    cfg[key] = {"module": "keras.initializers", "class_name": "Identity",
                                "config": {"gain": gain}, "registered_name": None}
    return out


def non_portable(config: dict) -> list:
    """``(class_name, key, value)`` for every key of :data:`DROP_IF_DEFAULT` holding a non-default
    value and every switch of :data:`DROP_WHEN_OFF` that is on: such a config cannot be made loadable
    by the releases that lack the argument."""
    found = []
    for obj in _objects(config):
        cfg = obj["config"]
        for rule_module, classes, key, default in DROP_IF_DEFAULT:
            if obj.get("module") == rule_module and obj["class_name"] in classes and key in cfg \
                    and cfg[key] != default:
                found.append((obj["class_name"], key, cfg[key]))
        for rule_module, classes, switch, off, _ in DROP_WHEN_OFF:
            if obj.get("module") == rule_module and obj["class_name"] in classes and switch in cfg \
                    and cfg[switch] is not off:
                found.append((obj["class_name"], switch, cfg[switch]))
    return found


def rewrite_keras_zip(src_path, dst_path, *, qr_free_low_precision: bool = False,
                      config: Optional[dict] = None) -> None:
    """Copy the ``.keras`` file ``src_path`` to ``dst_path`` with ``config.json`` replaced by
    :func:`portable_config` of it (``qr_free_low_precision`` passed on), or by ``config`` when given (a
    document that is portable already); every other member (``metadata.json``, ``model.weights.h5``,
    assets) is copied byte for byte, streamed (never extracted, never read whole), in the same
    order and with the same zip attributes.

    ``config.json`` must be at most :data:`MAX_CONFIG_BYTES`; the result is written to a temporary
    file beside ``dst_path`` and renamed into place (``dst_path`` may equal ``src_path``).
    Raises ``ValueError`` for a zip that is not a ``.keras`` file.
    """
    src_path, dst_path = Path(src_path), Path(dst_path)
    with zipfile.ZipFile(src_path, "r") as zin:
        infos = zin.infolist()
        names = [i.filename for i in infos]
        if names.count(CONFIG_NAME) != 1 or len(set(names)) != len(names):
            raise ValueError(f"{src_path}: not a .keras file (expected one {CONFIG_NAME}, unique member "
                             f"names; found {names[:10]})")
        cinfo = zin.getinfo(CONFIG_NAME)
        if cinfo.file_size > MAX_CONFIG_BYTES:
            raise ValueError(f"{src_path}: {CONFIG_NAME} is {cinfo.file_size} bytes, more than "
                             f"{MAX_CONFIG_BYTES}")
        with zin.open(cinfo) as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"{src_path}: {CONFIG_NAME} is larger than {MAX_CONFIG_BYTES} bytes")
        if config is None:
            config = portable_config(json.loads(raw.decode("utf-8")), qr_free_low_precision=qr_free_low_precision)
        new_config = json.dumps(config).encode("utf-8")

        from ..files.outputs import scratch_file

        with scratch_file(dst_path.parent, prefix=f".{dst_path.name}.{os.getpid()}-", suffix=".tmp") as tmp:
            with open(tmp, "wb") as fout, zipfile.ZipFile(fout, "w") as zout:
                for info in infos:
                    new_info = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                    new_info.compress_type = info.compress_type
                    new_info.external_attr = info.external_attr
                    new_info.create_system = info.create_system
                    if info.filename == CONFIG_NAME:
                        zout.writestr(new_info, new_config)
                        continue
                    new_info.file_size = info.file_size  # lets zipfile choose ZIP64 up front
                    with zin.open(info) as fi, zout.open(new_info, "w", force_zip64=info.file_size > 0x7FFFFFFF) as fo:
                        while True:
                            chunk = fi.read(1 << 20)
                            if not chunk:
                                break
                            fo.write(chunk)
            os.replace(tmp, dst_path)
