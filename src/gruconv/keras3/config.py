"""Keras 3 ``config.json`` / ``metadata.json`` for a converted model, generated without Keras.

Why: every conversion used to import Keras and a backend only to let Keras 3's legacy loader turn a
legacy tf.keras ``model_config`` into Keras 3 objects and ``Model.save`` serialize them again
(the import alone is 2-6 s and ~650 MiB).  This module does that translation on the JSON:

* input: a legacy (Keras 2 / tf.keras) ``model_config``; :func:`translate` is the one entry point (the
  legacy mends of :func:`gruconv.keras3.legacy.converted_config`: CuDNNGRU/CuDNNLSTM -> GRU/LSTM, then
  the layer translation below, :func:`~gruconv.keras3.portable.portable_config`, validation), used by the
  streamed writer, the Keras-built fallback and ``verify`` alike (``docs/architecture.md``);
* output: the Keras 3 serialized form (``module``/``class_name``/``config``/``registered_name``,
  Keras 3 node format ``{"args", "kwargs"}``), every constructor argument filled from the defaults
  Keras 3.15.1's ``get_config()`` reports (:mod:`gruconv.keras3.defaults`, generated from Keras by
  ``scripts/make_keras3_defaults.py``), then :func:`gruconv.keras3.portable.portable_config` (Keras 3.8+).

Evidence that the two agree: ``tests/writers/test_streaming_writer.py`` loads this config and the one
``gruconv.api.convert`` writes through Keras with ``keras.saving.load_model`` and compares
``get_config()`` of the model and of every layer, for every fixture that converts.

Not written (Keras recomputes them on load; shape inference is not done here): ``build_config``
and the true ``shape`` of ``__keras_tensor__`` references (written as ``[None]``, as
:func:`gruconv.keras3.legacy.tensor_ref` already does), ``shared_object_id``.

Also :func:`saveable_plan`: the object paths of ``model.weights.h5`` (``keras/src/saving/saving_lib.py``
``_save_state`` / ``_save_container_state``: a container's children are named by the snake-cased
class with a per-container counter, every saveable gets ``<path>/vars`` with attr ``name``) and, per
top-level layer, the order in which Keras 3's legacy HDF5 loader matches a layer's saved weights
(``legacy_h5_format._legacy_weights``: ``trainable_weights + non_trainable_weights``).

No framework import here: JSON in, JSON out.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from dataclasses import dataclass, field
from typing import Optional

from ..errors import InputError, UnsupportedError
from .builtins import bare_name, is_custom, is_keras_function
from .defaults import DEFAULTS
from ..model.keras_config import CODE_CLASSES, CUDNN_CLASSES, code_in, code_label, code_phrase, malformed
from .legacy import converted_config
from .portable import portable_config
from . import dialects, validate

KERAS_VERSION = DEFAULTS["keras_version"]
_LAYERS = DEFAULTS["layers"]
_CONTAINERS = {"Sequential", "Functional", "Model"}
_WRAPPERS = {"Bidirectional", "TimeDistributed"}
#: Every class this module writes (wrappers and models besides the generated table).
VOCABULARY = tuple(sorted(set(_LAYERS) | _WRAPPERS | {"Sequential", "Functional"}))

#: Legacy keys Keras 3's constructors accept and drop (``Layer.__init__``: input_shape,
#: batch_input_shape, batch_size, input_dim; RNN: implementation, time_major already refused/popped
#: by keras_h5), so they never reach a Keras 3 config.
_IGNORED = {"input_shape", "batch_input_shape", "batch_size", "input_dim", "implementation", "time_major",
            "autocast", "input_length"}
#: Legacy argument names Keras 3 constructors rename (keras/src/layers/activations/leaky_relu.py: ``alpha``
#: -> ``negative_slope``).
_RENAMED = {("LeakyReLU", "alpha"): "negative_slope"}
_RNN = {"GRU": "gru_cell", "LSTM": "lstm_cell", "SimpleRNN": "simple_rnn_cell"}
#: Legacy class names of Keras 3 classes (aliases tf.keras wrote).
_ALIASES = {"Convolution1D": "Conv1D", "MaxPool1D": "MaxPooling1D", "AvgPool1D": "AveragePooling1D",
            "AveragePooling1D": "AveragePooling1D", "GlobalMaxPool1D": "GlobalMaxPooling1D",
            "GlobalAvgPool1D": "GlobalAveragePooling1D", "Model": "Functional"}
_INIT_ALIASES = {"glorot_uniform": "GlorotUniform", "glorot_normal": "GlorotNormal", "he_uniform": "HeUniform",
                 "he_normal": "HeNormal", "lecun_uniform": "LecunUniform", "lecun_normal": "LecunNormal",
                 "orthogonal": "Orthogonal", "zeros": "Zeros", "ones": "Ones", "random_uniform": "RandomUniform",
                 "random_normal": "RandomNormal", "truncated_normal": "TruncatedNormal", "identity": "Identity",
                 "constant": "Constant", "variance_scaling": "VarianceScaling"}
_KINDS = {"initializer": ("initializers", "keras.initializers"),
          "regularizer": ("regularizers", "keras.regularizers"),
          "constraint": ("constraints", "keras.constraints")}


def _cls(cfg) -> str:
    name = str(cfg.get("class_name", "")) if isinstance(cfg, dict) else ""
    name = name.split(">")[-1]
    return _ALIASES.get(name, name)


def _where(path: str, cls: str) -> str:
    if len(path) > 120:  # one readable line even for absurd names
        path = path[:57] + "..." + path[-60:]
    return f"layer {path!r} ({cls})"


def _policy(dtype) -> dict:
    if isinstance(dtype, dict):
        conf = dtype.get("config")
        dtype = conf.get("name") if isinstance(conf, dict) else None
    if not isinstance(dtype, str):
        dtype = "float32"
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": dtype}, "registered_name": None}


def _object(value, kind: str, where: str):
    """A legacy initializer / regularizer / constraint (``{"class_name", "config"}`` or a name) in
    Keras 3 form, every argument filled from the Keras 3 defaults."""
    if value is None:
        return None
    table_name, module = _KINDS[kind]
    table = DEFAULTS[table_name]
    if isinstance(value, str):
        value = {"class_name": _INIT_ALIASES.get(value, value), "config": {}}
    if not isinstance(value, dict):
        raise UnsupportedError(f"{where}: {kind} {value!r:.60} is not one Keras 3 knows")
    cls = _cls(value)
    if cls == "L1L2" and kind == "regularizer":
        pass
    if cls not in table:
        raise UnsupportedError(f"{where}: {kind} class {cls!r} is outside the streaming writer's vocabulary")
    cfg = copy.deepcopy(table[cls]["config"])
    given = value.get("config") or {}
    if not isinstance(given, dict):  # a damaged file (make fuzz: a list there was a TypeError, exit 4)
        raise InputError(f"{where}: {kind} {cls}'s config is not an object ({given!r:.40})")
    # keys Keras 2 ignored (tf.keras 1.13-1.14's initializer dtype): dialects
    given = {k: v for k, v in given.items() if k not in dialects.DROPPED_OBJECT_KEYS}
    unknown = sorted(str(k) for k in set(given) - set(cfg))
    if unknown:
        raise UnsupportedError(f"{where}: {kind} {cls} has argument(s) {', '.join(unknown)} Keras 3 does not take")
    cfg.update(copy.deepcopy(given))
    return {"module": table[cls]["module"], "class_name": cls, "config": cfg, "registered_name": None}


def _value(key: str, value, default, where: str):
    if key == "dtype":
        return value if isinstance(default, str) and isinstance(value, str) else _policy(value)
    if key.endswith("_initializer"):
        return _object(value, "initializer", where)
    if key.endswith("_regularizer"):
        return _object(value, "regularizer", where)
    if key.endswith("_constraint"):
        return _object(value, "constraint", where)
    if isinstance(value, list) and isinstance(default, (list, tuple)):
        return list(value)
    return copy.deepcopy(value)


def _tensor(ref) -> dict:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None], "dtype": "float32", "keras_history": [ref[0], ref[1], ref[2]]}}


def _nodes(nodes, where: str) -> list:
    """Legacy inbound nodes (``[[name, node, tensor, kwargs], ...]``) in Keras 3's node format."""
    out = []
    for node in nodes or []:
        if isinstance(node, dict):  # already Keras 3 form (legacy.initial_state_as_kwargs)
            out.append(copy.deepcopy(node))
            continue
        if not isinstance(node, list) or not node or not all(
                isinstance(r, list) and len(r) >= 3 and isinstance(r[0], str) for r in node):
            # each tensor reference is [layer, node, tensor(, kwargs)] (a dict or a short list there was a
            # KeyError: make fuzz, once inspect asked the translation)
            raise UnsupportedError(f"{where}: inbound node {node!r:.60} not understood")
        kwargs = {}
        for ref in node:
            if len(ref) > 3 and isinstance(ref[3], dict):
                kwargs.update(copy.deepcopy(ref[3]))
        args = [_tensor(node[0])] if len(node) == 1 else [[_tensor(r) for r in node]]
        out.append({"args": args, "kwargs": kwargs})
    return out


def _refs(refs):
    if not refs:
        return []
    if isinstance(refs[0], str):
        return [refs[0], refs[1], refs[2]]
    return [[r[0], r[1], r[2]] for r in refs]


#: ``translate(..., outside=CARRY)``: a Keras built-in class outside :data:`VOCABULARY` is carried in the
#: Keras 3 envelope with its legacy arguments (:func:`outside_layer`), for Keras itself to build.
CARRY = "carry"
#: Legacy keys a Keras 3 layer constructor refuses but that Keras 2 wrote on every layer; dropped from a
#: carried layer's config (``Layer.__init__`` takes ``input_shape``/``batch_size``/``input_dim`` only
#: through its legacy path).
_CARRY_DROPPED = ("batch_input_shape", "input_shape", "batch_size", "input_dim")


def translate(model_config, *, outside: Optional[str] = None) -> dict:
    """THE translation of a legacy (Keras 2 / tf.keras) ``model_config`` into a Keras 3 ``config.json``
    document: the legacy mending (CuDNNGRU/CuDNNLSTM -> GRU/LSTM and the Keras 3 mends,
    :func:`gruconv.keras3.legacy.converted_config`), then :func:`layer_config` over the generated
    defaults, :func:`gruconv.keras3.portable.portable_config` (Keras 3.8+, float16 Orthogonal ->
    Identity) and :func:`gruconv.keras3.validate.check_model` (a value Keras 3 would refuse: exit 3).

    Every route calls it: the streamed writer (:func:`gruconv.keras3.archive.write_keras_h5_doc`), the
    Keras-built fallback and ``verify`` without a converted file (:func:`gruconv.writers.keras_route.built`:
    ``model_from_json`` of this dict), the weights-only layer checks (:mod:`gruconv.verify.partial`).

    ``outside``: None (the streamed writer) refuses a layer class outside :data:`VOCABULARY` with
    :class:`UnsupportedError`; :data:`CARRY` (the Keras-built route) carries a Keras built-in class
    outside it in the Keras 3 envelope with its legacy arguments (:func:`outside_layer`), for Keras's own
    ``from_config`` to build or refuse.  A config that is not a model (not an object, no layer list) is
    :class:`InputError`."""
    if not isinstance(model_config, dict):
        raise InputError(f"model_config is not a JSON object ({type(model_config).__name__})")
    if outside not in (None, CARRY):
        raise ValueError(f"outside={outside!r}")
    damaged = malformed(model_config)
    if damaged:
        raise InputError(f"model_config not understood: {damaged}")
    doc = model_config_of(converted_config(model_config), outside=outside)
    # the last word on code: whatever a value of the legacy config held and wherever the
    # translation copied it (an argument Keras takes as any value, ``return_sequences`` included, is copied
    # as it is: make fuzz found a ``Pkg>Lambda`` object written there), a written config holds no code
    found = code_in(doc)
    if found:
        raise UnsupportedError(f"model_config holds {code_phrase([code_label(p, w) for p, w in found])}; gruconv "
                               "never writes it, and Keras 3 refuses it in safe_mode")
    return doc


def layer_config(legacy: dict, path: str = "", *, in_functional: bool = False, outside: Optional[str] = None) -> dict:
    """One legacy layer config (as :func:`gruconv.keras3.legacy.converted_config` leaves it) in Keras 3 form.

    A class outside :data:`VOCABULARY` raises :class:`UnsupportedError` naming layer and class (with
    ``outside=CARRY``: carried, :func:`outside_layer`)."""
    if not isinstance(legacy, dict):
        raise InputError(f"layer {path or 'config'!r}: a layer entry is not an object ({legacy!r:.60})")
    cls = _cls(legacy)
    conf = legacy.get("config")
    name = (conf.get("name") if isinstance(conf, dict) else None) or legacy.get("name") or cls.lower()
    path = f"{path}/{name}" if path else str(name)
    if cls in ("Sequential", "Functional"):
        out = _model(legacy, cls, path, outside)
    elif cls in _WRAPPERS:
        out = _wrapper(legacy, cls, path, outside)
    elif cls in _LAYERS:
        out = _plain(legacy, cls, path)
        dialects.check_functions(cls, out["config"], _where(path, cls))
    elif is_custom(legacy.get("class_name")):
        out = custom_layer(legacy, path)
    elif outside == CARRY and cls:
        out = outside_layer(legacy, cls, path)
        dialects.check_functions(cls, out["config"], _where(path, cls))
    else:
        raise UnsupportedError(f"{_where(path, cls)}: class {cls} is outside the streaming writer's vocabulary "
                               f"(it writes {', '.join(VOCABULARY)})")
    if in_functional:
        out["name"] = name
        out["inbound_nodes"] = _nodes(legacy.get("inbound_nodes"), _where(path, cls))
    return out


def outside_layer(legacy: dict, cls: str, path: str) -> dict:
    """A Keras built-in layer class outside :data:`VOCABULARY` (``Attention``, ``UnitNormalization``, ...)
    in the Keras 3 envelope (``module`` ``keras.layers``), its legacy arguments as they are but the
    shape keys Keras 3 constructors refuse (:data:`_CARRY_DROPPED`) and a tf.keras dtype policy object
    (its name): Keras 3's ``from_config`` builds it, or refuses it (then :class:`InputError`, exit 3).
    Only the Keras-built route writes such a layer (``translate(..., outside=CARRY)``).  Never carried: a
    config holding code anywhere (:func:`refuse_code`), and a name of Keras's namespace that is no layer
    class (``deserialize``: :func:`gruconv.keras3.builtins.is_keras_function`), which Keras would resolve
    to its own function."""
    refuse_code(legacy, path, cls)
    if is_keras_function(cls):
        raise UnsupportedError(f"{_where(path, cls)}: {cls} is a function of Keras's layer namespace, not a layer "
                               "class (neither Keras's nor a user's); refused")
    conf = legacy.get("config")
    if not isinstance(conf, dict):
        raise InputError(f"{_where(path, cls)}: the layer has no config object")
    cfg = {k: copy.deepcopy(v) for k, v in conf.items() if k not in _CARRY_DROPPED}
    if isinstance(cfg.get("dtype"), dict):
        cfg["dtype"] = _policy(cfg["dtype"])
    return {"module": "keras.layers", "class_name": cls, "config": cfg, "registered_name": None}


def custom_layer(legacy: dict, path: str) -> dict:
    """A user's custom layer (:func:`gruconv.keras3.builtins.is_custom`) as Keras 3 serializes an object
    of an unregistered class defined outside Keras (``keras/src/saving/serialization_lib.py``
    ``serialize_keras_object``: ``module`` the class's module, ``None`` for one defined in ``__main__``
    (``record_object_after_serialization``); ``registered_name`` ``get_registered_name(cls)``, the bare
    class name for an unregistered class), its ``config`` carried over unchanged.

    How it loads: ``deserialize_keras_object`` -> ``_retrieve_class_or_fn`` looks ``registered_name`` up
    in ``custom_objects`` first, so ``load_model(path, custom_objects={"<class_name>": cls})`` resolves
    it; with ``module`` None nothing is ever imported by name (a ``Package>`` prefix the legacy name had
    is dropped for the same reason: the lookup key is the name the warning tells the user to pass).
    Without the class Keras refuses the file ("Could not locate class"), safe mode or not.

    Its config is searched for code as the model's own layers are (:func:`refuse_code`): a carried-over
    config may hold a whole layer, which the user's class could hand to Keras to build."""
    cls = bare_name(legacy.get("class_name"))
    refuse_code(legacy, path, cls)
    conf = legacy.get("config")
    if not isinstance(conf, dict):
        raise UnsupportedError(f"{_where(path, cls)}: custom layer without a config object")
    return {"module": None, "class_name": cls, "config": copy.deepcopy(conf), "registered_name": cls}


def refuse_code(legacy: dict, path: str, cls: str) -> None:
    """:class:`UnsupportedError` when a layer config about to be carried over holds code a build would run
    (:func:`gruconv.model.keras_config.code_in`, the one search: the layer itself or anything nested)."""
    found = code_in(legacy, path)
    if found == [(path, cls)]:  # the layer itself
        raise UnsupportedError(f"{_where(path, cls)}: a {cls} layer holds {CODE_CLASSES[cls]}; gruconv never runs "
                               "it, and Keras 3 refuses it in safe_mode")
    if found:
        labels = [code_label(p, what) for p, what in found]
        raise UnsupportedError(f"{_where(path, cls)}: its config holds {code_phrase(labels)}; gruconv never runs "
                               "it, and Keras 3 refuses it in safe_mode")


def custom_layers(config: dict) -> dict:
    """``{class_name: [layer name, ...]}`` of the custom layers in a Keras 3 config this module generated
    (:func:`custom_layer` writes them, and only them, with ``module`` None)."""
    found: dict = {}

    def visit(obj):
        if isinstance(obj, dict):
            if obj.get("module", "") is None and isinstance(obj.get("class_name"), str) \
                    and isinstance(obj.get("config"), dict):
                found.setdefault(obj["class_name"], []).append(obj["config"].get("name"))
                return
            for v in obj.values():
                visit(v)
        elif isinstance(obj, list):
            for v in obj:
                visit(v)

    visit(config)
    return found


def _plain(legacy: dict, cls: str, path: str) -> dict:
    spec = _LAYERS[cls]
    where = _where(path, cls)
    given = legacy.get("config") or {}
    cfg = {"name": given.get("name")} if cls != "InputLayer" else {}
    cfg.update(copy.deepcopy(spec["config"]))
    if cls == "InputLayer":
        shape = given.get("batch_input_shape", given.get("batch_shape"))
        if shape is None:
            raise UnsupportedError(f"{where}: no batch_input_shape")
        cfg["batch_shape"] = list(shape) if isinstance(shape, (list, tuple)) else shape  # else: validate.py refuses
        cfg["name"] = given.get("name")
        extra = {k: v for k, v in given.items() if k not in ("batch_input_shape", "batch_shape")}
    else:
        extra = given
    for (c, key), meant in dialects.MISSING_DEFAULTS.items():  # older than the argument: Keras 2's default
        if c == cls and key not in extra and key in cfg:
            cfg[key] = meant
    for key, value in extra.items():
        if key in ("name",):
            continue
        key = _RENAMED.get((cls, key), key)
        if key in ("trainable", "dtype") and key not in cfg:  # Layer.__init__ takes them; this get_config omits them
            continue
        if key == "activity_regularizer" and key not in cfg:  # every Layer takes it; listed when set
            if value is not None:
                cfg[key] = _value(key, value, None, where)
            continue
        if key in cfg or key in spec["required"]:
            cfg[key] = _value(key, value, cfg.get(key), where)
        elif key in _IGNORED:
            continue
        else:
            raise UnsupportedError(f"{where}: argument {key}={value!r:.40} is not one Keras 3's {cls} takes")
    missing = [k for k in spec["required"] if k not in cfg and k != "shape"]
    if missing:
        raise UnsupportedError(f"{where}: missing {', '.join(missing)}")
    if cls == "BatchNormalization" and isinstance(cfg.get("axis"), list) and len(cfg["axis"]) == 1:
        cfg["axis"] = cfg["axis"][0]  # Keras 3 BatchNormalization takes one int axis
    if cls == "InputLayer" and isinstance(cfg.get("dtype"), dict):
        cfg["dtype"] = cfg["dtype"]["config"]["name"]
    return {"module": spec["module"], "class_name": cls, "config": cfg, "registered_name": None}


#: The attributes Keras 3's ``Bidirectional`` compares between its forward and backward layers with
#: ``!=`` on load (``keras/src/layers/rnn/bidirectional.py``, ``_verify_layer_config``: ``common_attributes``),
#: so a value unequal to itself (NaN, which the value table lets through for a plain RNN: Keras reads
#: these by truthiness there) is refused inside a Bidirectional.
BIDIRECTIONAL_COMMON = ("stateful", "return_sequences", "return_state")


def _wrapper(legacy: dict, cls: str, path: str, outside: Optional[str] = None) -> dict:
    where = _where(path, cls)
    given = legacy.get("config") or {}
    inner = given.get("layer")
    if not isinstance(inner, dict):
        raise UnsupportedError(f"{where}: no wrapped layer")
    cfg = {"name": given.get("name"), "trainable": given.get("trainable", True), "dtype": _policy(given.get("dtype"))}
    layer = layer_config(inner, path, outside=outside)
    if cls == "Bidirectional":
        mode = given.get("merge_mode", "concat")
        if layer["class_name"] not in _RNN:
            raise UnsupportedError(f"{where}: wraps {layer['class_name']}, not a recurrent layer")
        base = layer["config"]["name"]
        fw = copy.deepcopy(layer)
        fw["config"]["name"] = "forward_" + (base[len("forward_"):] if base.startswith("forward_") else base)
        if isinstance(given.get("backward_layer"), dict):
            bw = layer_config(given["backward_layer"], path, outside=outside)
        else:
            bw = copy.deepcopy(layer)
            # Keras 2 / tf.keras built the backward copy with ``go_backwards = not layer.go_backwards``
            # (``layers/wrappers.py`` Bidirectional.__init__); Keras 3 forces True and refuses a forward layer
            # that goes backwards, so the copy is written out as Keras 2 made it (keras3/dialects.py)
            fw_back = fw["config"].get("go_backwards")
            bw["config"]["go_backwards"] = not fw_back if isinstance(fw_back, bool) else True
            bw["config"]["name"] = "backward_" + (base[len("backward_"):] if base.startswith("backward_") else base)
        if fw["config"]["go_backwards"] == bw["config"]["go_backwards"]:
            raise UnsupportedError(f"{where}: forward and backward layers have the same go_backwards")
        for a in BIDIRECTIONAL_COMMON:
            f_value, b_value = fw["config"].get(a, False), bw["config"].get(a, False)
            if f_value != b_value:  # NaN included: it equals nothing, itself neither (make fuzz)
                raise UnsupportedError(f"{where}: Keras 3's Bidirectional needs the forward and backward layers' "
                                       f"{a} equal, got {f_value!r} and {b_value!r} "
                                       "(keras.saving.load_model would refuse it)")
        for r in (fw, bw):  # Bidirectional.__init__ force_zero_output_for_mask
            r["config"]["zero_output_for_mask"] = r["config"]["return_sequences"]
        cfg.update({"merge_mode": mode, "layer": fw, "backward_layer": bw})
        known = {"name", "trainable", "dtype", "layer", "backward_layer", "merge_mode"}
    else:
        cfg["layer"] = layer
        known = {"name", "trainable", "dtype", "layer"}
    unknown = sorted(set(given) - known - _IGNORED)
    if unknown:
        raise UnsupportedError(f"{where}: argument(s) {', '.join(unknown)} not taken by Keras 3's {cls}")
    return {"module": "keras.layers", "class_name": cls, "config": cfg, "registered_name": None}


def _model(legacy: dict, cls: str, path: str, outside: Optional[str] = None) -> dict:
    nested = "/" in path
    where = _where(path, cls)
    given = legacy.get("config")
    if not isinstance(given, dict) or not isinstance(given.get("layers"), list):
        raise UnsupportedError(f"{where}: no layer list")
    if cls == "Sequential":
        layers = [layer_config(l, path, outside=outside) for l in given["layers"]]
        if not layers or layers[0]["class_name"] != "InputLayer":
            raise UnsupportedError(f"{where}: a Sequential model without an input shape")
        for l in layers:  # Sequential layers carry no name / nodes keys beyond their config
            l.pop("name", None)
        cfg = {"name": given.get("name"), "trainable": given.get("trainable", True),
               "dtype": _policy(given.get("dtype")), "layers": layers,
               "build_input_shape": copy.deepcopy(layers[0]["config"]["batch_shape"])}
        out = {"module": "keras", "class_name": "Sequential", "config": cfg, "registered_name": None}
        if nested:  # a built, uncompiled inner model serializes an empty compile config
            out["compile_config"] = {}
        return out
    layers = [layer_config(l, path, in_functional=True, outside=outside) for l in given["layers"]]
    cfg = {"name": given.get("name"), "trainable": given.get("trainable", True), "layers": layers,
           "input_layers": _refs(given.get("input_layers")), "output_layers": _refs(given.get("output_layers"))}
    outs = cfg["output_layers"]
    if nested and isinstance(outs, list) and len(outs) == 1 and isinstance(outs[0], list):
        # Keras 2's Network returns its one output as a tensor (``engine/network.py`` ``call``: ``output_tensors[0]``
        # when there is one), and so does Keras 3 for a single output ref; a one-item list would hand the layer
        # after it in a Sequential a list ("Cannot convert ... to a shape"; the dialect property, seed 7020)
        cfg["output_layers"] = outs[0]
    out = {"module": "keras.src.models.functional", "class_name": "Functional", "config": cfg,
           "registered_name": "Functional"}
    if nested:
        out["compile_config"] = {}
    return out


def model_config_of(converted_legacy: dict, *, outside: Optional[str] = None) -> dict:
    """:func:`translate` after the legacy mending: ``converted_legacy`` is
    :func:`gruconv.keras3.legacy.converted_config` of the file's ``model_config``."""
    cls = _cls(converted_legacy)
    if cls not in ("Sequential", "Functional"):
        raise UnsupportedError(f"top-level {cls}: only Sequential and Functional models are written")
    doc = portable_config(layer_config(converted_legacy, outside=outside), qr_free_low_precision=True)
    # a value Keras 3 would refuse on load: exit 3 before anything is written.  Checked on what is written
    # (after portable_config: a float16 layer's Orthogonal recurrent initializer, seed and all, is Identity
    # there -- the generative test found a bool seed refused that the written file never holds)
    validate.check_model(doc)
    return doc


def keras2_plan(model_config) -> list:
    """The translated config's :func:`saveable_plan` tops when a layer of the legacy ``model_config`` uses a
    function whose Keras 3 meaning differs (:mod:`gruconv.keras3.dialects`), for a writer that copies the
    stored weights itself and must rescale the ones feeding it (:func:`gruconv.keras3.dialects.scales`);
    else ``[]`` (no translation run)."""
    if not dialects.mentions_changed_function(model_config):
        return []
    return saveable_plan(translate(model_config, outside=CARRY))[1]


def metadata(date: Optional[datetime.datetime] = None) -> dict:
    """``metadata.json`` as ``saving_lib._serialize_model_as_json`` writes it."""
    date = date or datetime.datetime.now()
    return {"keras_version": KERAS_VERSION, "date_saved": date.strftime("%Y-%m-%d@%H:%M:%S")}


# --------------------------------------------------------------------------- TF1 stack models

def _identifier(scope: str) -> str:
    from ..model.names import identifier

    return identifier(scope, "gru_stack")


def stack_model_config(shape, name: str, *, initial_state: bool = False, return_state: bool = False,
                       mask_input: bool = False) -> dict:
    """The config :func:`gruconv.keras3.build.build_stack_model` builds for a canonical stack
    (``shape``: :class:`gruconv.model.canonical.StackShape`), as Keras 3 saves it: Input ``inputs``,
    [initial states per pseudo-layer], [``mask``], then ``<base>_l<i>`` GRU/LSTM layers
    (``Bidirectional`` ``<base>_l<i>`` of ``forward_<base>_l<i>_fw`` / ``<base>_l<i>_bw``)."""
    from ..model.keras_layout import CUDNN_COMPATIBLE

    s = shape
    base = _identifier(name)
    dtype = s.dtype
    from ..model.canonical import CELLS

    cls = CELLS[s.cell].title  # GRU / LSTM: the cell table's name is Keras's class
    settings = CUDNN_COMPATIBLE[s.cell]
    states = CELLS[s.cell].states
    layers, input_refs = [], []

    def input_layer(n, batch_shape, dt):
        layers.append({"module": "keras.layers", "class_name": "InputLayer",
                       "config": {"batch_shape": batch_shape, "dtype": dt, "sparse": False, "ragged": False,
                                  "name": n, "optional": False},
                       "registered_name": None, "name": n, "inbound_nodes": []})
        input_refs.append([n, 0, 0])

    input_layer("inputs", [None, None, s.input_size], dtype)
    state_names = []
    if initial_state:
        for layer in range(s.num_layers):
            for d in range(s.num_directions):
                n = f"initial_state_l{layer}_{'bw' if d else 'fw'}"
                for st in states:
                    sn = f"{n}_{st}" if len(states) > 1 else n
                    input_layer(sn, [None, s.units], dtype)
                    state_names.append(sn)
    if mask_input:
        input_layer("mask", [None, None], "bool")

    def rnn(lname, backwards=False, rs=True):
        cfg = {"name": lname}
        cfg.update(copy.deepcopy(_LAYERS[cls]["config"]))
        cfg.update(units=s.units, return_sequences=True, return_state=return_state, go_backwards=backwards,
                   dtype=_policy(dtype))
        for k, v in settings.items():
            cfg[k] = v
        return {"module": "keras.layers", "class_name": cls, "config": cfg, "registered_name": None}

    prev = ["inputs", 0, 0]
    finals = []
    per = s.num_directions * len(states)
    for layer in range(s.num_layers):
        lname = f"{base}_l{layer}"
        if s.bidirectional:
            fw, bw = rnn(f"forward_{lname}_fw"), rnn(f"{lname}_bw", backwards=True)
            for r in (fw, bw):
                r["config"]["zero_output_for_mask"] = True
            obj = {"module": "keras.layers", "class_name": "Bidirectional",
                   "config": {"name": lname, "trainable": True, "dtype": _policy(dtype), "merge_mode": "concat",
                              "layer": fw, "backward_layer": bw}, "registered_name": None}
        else:
            obj = rnn(lname)
        init = state_names[layer * per:(layer + 1) * per]
        # build_stack_model calls every layer with initial_state= (None without state inputs)
        kwargs = {"initial_state": [_tensor([n, 0, 0]) for n in init] if init else None}
        kwargs["mask"] = _tensor(["mask", 0, 0]) if mask_input else None  # passed as mask=mask
        obj["name"] = lname
        obj["inbound_nodes"] = [{"args": [_tensor(prev)], "kwargs": kwargs}]
        layers.append(obj)
        prev = [lname, 0, 0]
        if return_state:
            finals.extend([lname, 0, 1 + i] for i in range(per))
    outputs = [prev] + finals if return_state else prev
    cfg = {"name": base, "trainable": True, "layers": layers,
           "input_layers": input_refs if len(input_refs) > 1 else input_refs[0], "output_layers": outputs}
    doc = {"module": "keras.src.models.functional", "class_name": "Functional", "config": cfg,
           "registered_name": None}
    return portable_config(doc, qr_free_low_precision=True)


# --------------------------------------------------------------------------- weight object paths

@dataclass
class Slot:
    """One variable of ``model.weights.h5``: ``group`` (``layers/gru/cell/vars``), ``index``."""

    group: str
    index: int
    trainable: bool
    role: str
    #: the shape the layer's config alone fixes (``None`` entries: set by the layer's input), checked
    #: against the stored weight before it is written (:func:`fits`); None: not known here
    shape: Optional[tuple] = None
    #: per gate block of the weight's last axis, the factor that keeps the layer computing what Keras 2
    #: computed (:func:`gruconv.keras3.dialects.slot_scale`: Keras 2's ``hard_sigmoid``); None: unchanged
    scale: Optional[tuple] = None


@dataclass
class TopLayer:
    """A top-level layer: its name (the legacy weight group), and its variables in Keras 3
    ``layer.weights`` order; :attr:`legacy_order` is what Keras 3's legacy HDF5 loader matches
    against the group's ``weight_names``."""

    name: str
    slots: list = field(default_factory=list)

    @property
    def legacy_order(self) -> list:
        return [s for s in self.slots if s.trainable] + [s for s in self.slots if not s.trainable]


def _snake(name: str) -> str:
    # keras/src/utils/naming.py to_snake_case
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _int(v):
    """An int config value (a one-element list such as Conv1D's ``kernel_size: [3]`` included; a bool as
    the int Keras takes it for, ``Dense(units=True)`` being one unit), else None."""
    if isinstance(v, (list, tuple)) and len(v) == 1:
        v = v[0]
    return int(v) if isinstance(v, int) else None


def _own_vars(cls: str, cfg: dict) -> list:
    """(role, trainable, shape) of a layer's own variables, in creation order (Keras 3 ``build``).  The
    shape holds what the config alone decides (``Dense.build``: kernel ``(input_dim, units)``;
    ``Conv1D``: ``(kernel_size, input_channels / groups, filters)``; ``Embedding``:
    ``(input_dim, output_dim)``), None where the layer's input decides: a stored weight that does not
    fit is a file ``load_model`` would refuse (the generative contract test: ``Embedding input_dim``
    changed in the config, the stored table not)."""
    if cls == "Dense" or cls == "Conv1D":
        out = _int(cfg.get("units" if cls == "Dense" else "filters"))
        kernel = (None, out) if cls == "Dense" else (_int(cfg.get("kernel_size")), None, out)
        return [("kernel", True, kernel)] + ([("bias", True, (out,))] if cfg.get("use_bias", True) else [])
    if cls == "Embedding":
        return [("embeddings", True, (_int(cfg.get("input_dim")), _int(cfg.get("output_dim"))))]
    if cls == "BatchNormalization":
        return ([("gamma", True, None)] if cfg.get("scale", True) else []) + \
               ([("beta", True, None)] if cfg.get("center", True) else []) + \
               [("moving_mean", False, None), ("moving_variance", False, None)]
    if cls == "LayerNormalization":
        return ([("gamma", True, None)] if cfg.get("scale", True) else []) + \
               ([("beta", True, None)] if cfg.get("center", True) else [])
    if cls == "PReLU":
        return [("alpha", True, None)]
    if cls in _RNN:
        return []
    return []


def fits(expected: Optional[tuple], shape: tuple) -> bool:
    """``shape`` has ``expected``'s rank and every entry it fixes (None: any)."""
    return expected is None or (len(expected) == len(shape)
                                and all(e is None or e == n for e, n in zip(expected, shape)))


def saveable_plan(config: dict):
    """``(groups, tops)`` for a Keras 3 model config: ``groups`` every ``<path>/vars`` group Keras
    writes with its ``name`` attribute (``""`` is the root), ``tops`` one :class:`TopLayer` per
    top-level layer that holds variables."""
    groups: list = []

    def visit(obj, path, trainable, slots):
        cls, cfg = obj["class_name"], obj["config"]
        trainable = trainable and cfg.get("trainable", True)
        groups.append((f"{path}/vars" if path else "vars", cfg.get("name")))
        own = _own_vars(cls, cfg)
        for i, (role, tr, shape) in enumerate(own):
            slots.append(Slot(f"{path}/vars", i, trainable and tr, role, shape, dialects.slot_scale(cls, cfg, role)))
        if cls in _RNN:
            cell = f"{path}/cell"
            groups.append((f"{cell}/vars", _RNN[cls]))
            roles = ["kernel", "recurrent_kernel"] + (["bias"] if cfg.get("use_bias", True) else [])
            for i, role in enumerate(roles):
                slots.append(Slot(f"{cell}/vars", i, trainable, role, scale=dialects.slot_scale(cls, cfg, role)))
        elif cls == "Bidirectional":
            visit(cfg["layer"], f"{path}/forward_layer", trainable, slots)
            visit(cfg["backward_layer"], f"{path}/backward_layer", trainable, slots)
        elif cls == "TimeDistributed":
            visit(cfg["layer"], f"{path}/layer", trainable, slots)
        elif cls in ("Sequential", "Functional"):
            used: dict = {}
            for child in _container_layers(obj):
                visit(child, f"{path}/layers/{_unique(child['class_name'], used)}" if path
                      else f"layers/{_unique(child['class_name'], used)}", trainable, slots)

    tops = []
    used: dict = {}
    groups.append(("vars", config["config"].get("name")))
    for child in _container_layers(config):
        top = TopLayer(child["config"].get("name"))
        visit(child, f"layers/{_unique(child['class_name'], used)}", config["config"].get("trainable", True),
              top.slots)
        tops.append(top)
    return groups, tops


def _container_layers(obj: dict) -> list:
    layers = obj["config"]["layers"]
    if obj["class_name"] == "Sequential":  # Sequential.layers leaves out its InputLayer
        layers = [l for l in layers if l["class_name"] != "InputLayer"]
    return layers


def _unique(cls: str, used: dict) -> str:
    # saving_lib._get_unique_name: name, name_1, name_2, ...
    base = _snake(cls)
    n = used.get(base, 0)
    used[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


# --------------------------------------------------------------------------- a tf_keras .keras file's object paths
# tf_keras's ``saving_lib`` (``_save_state`` / ``_save_container_state``) names objects by the rule
# above (snake class name, per-container counter, ``layers/``, ``forward_layer``/``backward_layer``,
# ``layer``, ``cell``); only its CuDNN layers differ: no cell, their variables are their own.
# Checked on files tf_keras 2.21 wrote (``fixtures/tf_keras_zip``, ``fixtures/make_tf_keras_zip_fixtures.py``).

_CUDNN = tuple(CUDNN_CLASSES)


def _vars(path: str) -> str:
    return f"{path}/vars" if path else "vars"


def _obj_name(layer: dict) -> str:
    c = layer.get("config")
    name = (c.get("name") if isinstance(c, dict) else None) or layer.get("name")
    return str(name) if name is not None else "?"


def _pair(src: dict, dst: Optional[dict], spath: str, dpath: str, lpath: str, out: dict, where: dict) -> None:
    """Walk ``src`` (a tf_keras layer config) beside ``dst`` (its Keras 3 config, or None): ``out``
    {Keras 3 vars group: stored vars group}, ``where`` {layer config path: stored object path}; layer
    config paths as :func:`gruconv.model.keras_config.walk_layers` names them (a Bidirectional's backward
    half as ``<wrapper>/~backward_layer``)."""
    cls = _cls(src)
    conf = src.get("config") if isinstance(src.get("config"), dict) else {}
    dconf = dst["config"] if dst is not None else None
    where[lpath] = spath
    if dst is not None:
        out[_vars(dpath)] = _vars(spath)
        if _cls(dst) in _RNN:
            out[f"{dpath}/cell/vars"] = _vars(spath) if cls in _CUDNN else f"{spath}/cell/vars"
    if cls == "Bidirectional" and isinstance(conf.get("layer"), dict):
        back = conf.get("backward_layer") if isinstance(conf.get("backward_layer"), dict) else conf["layer"]
        _pair(conf["layer"], dconf["layer"] if dconf else None, f"{spath}/forward_layer", f"{dpath}/forward_layer",
              f"{lpath}/{_obj_name(conf['layer'])}", out, where)
        _pair(back, dconf["backward_layer"] if dconf else None, f"{spath}/backward_layer",
              f"{dpath}/backward_layer", f"{lpath}/~backward_layer", out, where)
    elif cls == "TimeDistributed" and isinstance(conf.get("layer"), dict):
        _pair(conf["layer"], dconf["layer"] if dconf else None, f"{spath}/layer", f"{dpath}/layer",
              f"{lpath}/{_obj_name(conf['layer'])}", out, where)
    elif cls in ("Sequential", "Functional") and isinstance(conf.get("layers"), list):
        src_layers = _container_layers({"class_name": cls, "config": conf})
        dst_layers = _container_layers(dst) if dst is not None else [None] * len(src_layers)
        if len(dst_layers) != len(src_layers):
            raise InputError(f"{lpath or 'the model'}: {len(src_layers)} layers, the converted model "
                             f"{len(dst_layers)}")
        sused: dict = {}
        dused: dict = {}
        for s, d in zip(src_layers, dst_layers):
            if not isinstance(s, dict):
                raise InputError(f"{lpath or 'the model'}: a layer entry is not an object")
            sname = _unique(_cls(s), sused)
            dname = _unique(d["class_name"], dused) if d is not None else ""
            _pair(s, d, f"{spath}/layers/{sname}" if spath else f"layers/{sname}",
                  f"{dpath}/layers/{dname}" if dpath else f"layers/{dname}",
                  f"{lpath}/{_obj_name(s)}" if lpath else _obj_name(s), out, where)


def tf_keras_sources(source: dict, target: dict) -> dict:
    """{Keras 3 ``vars`` group of ``target`` (the converted model's config): the group of a tf_keras
    ``.keras`` file's ``model.weights.h5`` holding its values}, ``source`` being that file's config.
    Raises :class:`InputError` when the two do not pair layer for layer."""
    out: dict = {}
    try:
        _pair(source, target, "", "", "", out, {})
    except (KeyError, TypeError, AttributeError) as e:
        raise InputError(f"config.json does not pair with its converted model ({e!r:.120})") from None
    return out


def tf_keras_object_paths(source: dict) -> dict:
    """{layer config path: object path in a tf_keras ``.keras`` file's ``model.weights.h5``}."""
    where: dict = {}
    try:
        _pair(source, None, "", "", "", {}, where)
    except (KeyError, TypeError, AttributeError) as e:
        raise InputError(f"config.json: a layer cannot be placed ({e!r:.120})") from None
    return where


def dumps(doc: dict) -> str:
    return json.dumps(doc)


# --------------------------------------------------------------------------- training config

#: Per optimizer: the slot variables ``build`` creates, as the ``add_optimizer_variables`` calls it
#: makes (``keras/src/optimizers/adam.py``, ``rmsprop.py``, ``sgd.py``): within one call the names
#: alternate per model variable (``model.weights.h5`` of ``fixtures/keras_user/compiled_adam_mse.h5``:
#: kernel m, kernel v, recurrent m, ...), successive calls follow each other.
def _slot_calls(cls: str, cfg: dict) -> Optional[list]:
    if cls in ("Adam", "AdamW"):
        return [["momentum", "velocity"]] + ([["velocity_hat"]] if cfg.get("amsgrad") else [])
    if cls == "RMSprop":
        return [["velocity"]] + ([["momentum"]] if cfg.get("momentum") else []) + \
               ([["average_gradient"]] if cfg.get("centered") else [])
    if cls == "SGD":
        return [["momentum"]] if cfg.get("momentum") else []
    return None


@dataclass
class Compiled:
    """What a legacy ``training_config`` becomes: Keras 3's ``compile_config`` and the optimizer's
    variables (written fresh: iterations 0, the learning rate, zero slots), plus warnings."""

    compile_config: dict
    optimizer_name: str
    learning_rate: float
    slot_calls: list
    warnings: list


def _metric(m, dropped: list):
    """One tf.keras metric entry as Keras 3 takes it (built-in names kept, ``acc``/``accuracy`` ->
    ``accuracy``, a ``MeanMetricWrapper`` by its name or function, custom ones dropped)."""
    names = DEFAULTS["metric_names"]
    if m is None:
        return None
    if isinstance(m, list):
        return [x for x in (_metric(x, dropped) for x in m) if x is not None]
    if isinstance(m, dict) and "class_name" not in m:
        return {k: _metric(v, dropped) for k, v in m.items()}
    if isinstance(m, str):
        if m in ("acc", "accuracy"):
            return "accuracy"
        if m in names:
            return m
        dropped.append(f"metric {m!r}")
        return None
    if isinstance(m, dict) and _cls(m) == "MeanMetricWrapper":
        cfg = m.get("config") or {}
        name, fn = cfg.get("name"), cfg.get("fn")
        if name in ("acc", "accuracy"):
            return "accuracy"
        for cand in (name, fn):
            if isinstance(cand, str) and cand in names:
                return cand
        dropped.append(f"metric {name or fn!r}")
        return None
    raise UnsupportedError(f"training config: metric {_cls(m) or m!r:.60} is not one the streaming writer writes")


def _loss(loss, dropped: list):
    if loss is None:
        return None
    if isinstance(loss, list):
        return [_loss(x, dropped) for x in loss]
    if isinstance(loss, dict) and "class_name" not in loss:
        return {k: _loss(v, dropped) for k, v in loss.items()}
    if isinstance(loss, str):
        if loss in DEFAULTS["loss_names"]:
            return loss
        dropped.append(f"loss {loss!r:.60}")
        return None
    raise UnsupportedError(f"training config: loss object {_cls(loss) or loss!r:.60} is not one the streaming "
                           "writer writes")


def compile_config(training_config: str, n_outputs: int, *, keras_built: bool = False) -> Optional[Compiled]:
    """Keras 3's ``compile_config`` for a legacy ``training_config`` (JSON): THE training-config
    translation (the streamed writer stores it; the Keras-built route compiles with it,
    :func:`gruconv.keras3.runtime.compile`): the optimizer without its ``Custom>`` prefix and only the
    arguments Keras 3 takes, built-in losses and metrics kept, custom ones dropped with a warning.  An
    optimizer outside Adam/AdamW/RMSprop/SGD, EMA or gradient accumulation raises
    :class:`UnsupportedError` for the streamed writer (it writes the optimizer's variables itself);
    ``keras_built=True`` (Keras builds them) takes every optimizer of the generated table.

    None when the training config is not a JSON object: the Keras route writes such a model
    uncompiled, and so does the streamed writer, without
    importing Keras for it (``make fuzz`` found a flipped bit there sending a model through the
    Keras-built route: 11 s instead of 0.5 s, 2026-11-27)."""
    try:
        tc = json.loads(training_config)
    except ValueError:
        return None
    if not isinstance(tc, dict):
        return None
    opt = tc.get("optimizer_config") or {}
    cls = _cls(opt)
    table = DEFAULTS["optimizers"].get(cls)
    given = opt.get("config") or {}
    if table is None:
        raise UnsupportedError(f"training config: optimizer {cls!r} is outside the streaming writer's vocabulary")
    cfg = copy.deepcopy(table["config"])
    cfg.update({k: copy.deepcopy(v) for k, v in given.items() if k in cfg})
    calls = _slot_calls(cls, cfg)
    if keras_built:  # Keras builds the optimizer (its variables are not written by this module)
        calls = calls or []
    elif calls is None or cfg.get("use_ema") or cfg.get("gradient_accumulation_steps") \
            or not isinstance(cfg.get("learning_rate"), (int, float)):
        raise UnsupportedError(f"training config: {cls} with these settings is outside the streaming writer's "
                               "vocabulary")
    dropped: list = []
    loss = _loss(tc.get("loss"), dropped)
    metrics = _metric(tc.get("metrics"), dropped)
    weighted = _metric(tc.get("weighted_metrics"), dropped)
    if isinstance(metrics, list) and n_outputs == 1 and len(metrics) == 1 and isinstance(metrics[0], list):
        metrics = metrics[0]
    if isinstance(weighted, list) and n_outputs == 1 and len(weighted) == 1 and isinstance(weighted[0], list):
        weighted = weighted[0]
    cc = {"optimizer": {"module": table["module"], "class_name": cls, "config": cfg, "registered_name": None},
          "loss": loss, "loss_weights": tc.get("loss_weights"), "metrics": metrics or None,
          "weighted_metrics": weighted or None, "run_eagerly": False, "steps_per_execution": 1,
          "jit_compile": False}
    warnings = []
    if dropped:
        warnings.append(f"training config: {', '.join(dropped)} not carried over (custom code, or unknown to "
                        "Keras 3: gruconv never runs code from a model file); compile the loaded model again to "
                        "train with it")
    rate = cfg.get("learning_rate")
    return Compiled(cc, cfg["name"], float(rate) if isinstance(rate, (int, float)) else 0.0, calls, warnings)
