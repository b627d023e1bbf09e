"""The legacy mends: a Keras 2 / tf.keras ``model_config`` made ready for the Keras 3 translation
(:func:`gruconv.keras3.config.translate` starts here): CuDNNGRU / CuDNNLSTM become the cuDNN-compatible
GRU / LSTM (:func:`gru_config`), and the Keras 2-isms Keras 3 cannot read are mended
(:func:`converted_config`).  The config accessors and the cuDNN class table are
:mod:`gruconv.model.keras_config`'s (readers share them without importing the Keras 3 side).

No framework import: JSON in, JSON out.
"""

from __future__ import annotations

import copy
from typing import Optional

from ..errors import UnsupportedError
from ..model.keras_config import CONTAINER_CLASSES, CUDNN_CLASSES, TARGET_CLASS, class_name_of, config_of, layers_of, name_of
from ..model.keras_layout import CUDNN_COMPATIBLE, KERAS3_CLASS

#: CuDNNGRU config keys that GRU also takes (and CuDNNLSTM keys LSTM takes, with
#: ``unit_forget_bias``: :data:`CARRIED`); anything else is dropped or refused.
_CARRIED_KEYS = (
    "name", "trainable", "dtype", "batch_input_shape", "input_shape", "batch_size", "units",
    "kernel_initializer", "recurrent_initializer", "bias_initializer",
    "kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
    "kernel_constraint", "recurrent_constraint", "bias_constraint",
    "return_sequences", "return_state", "go_backwards", "stateful",
)
#: Per cell: the config keys carried over.  CuDNNLSTM's ``unit_forget_bias`` (an initializer option,
#: tf_keras ``cudnn_lstm.py``) is kept.
CARRIED = {"gru": _CARRIED_KEYS, "lstm": _CARRIED_KEYS + ("unit_forget_bias",)}


def gru_config(cudnn_cfg: dict, *, wrapped: bool = False) -> dict:
    """The GRU (or LSTM) layer config equivalent to a CuDNNGRU (CuDNNLSTM) config, same serialization style.

    The target follows the config's class: ``CuDNNGRU`` -> ``GRU``
    (:data:`gruconv.model.keras_layout.CUDNN_COMPATIBLE_GRU`), ``CuDNNLSTM`` ->
    ``LSTM`` (:data:`gruconv.model.keras_layout.CUDNN_COMPATIBLE_LSTM`, with
    ``unit_forget_bias`` kept from the original).

    Keras 3 picks its deserializer per config: with a ``module`` key the new
    one (``serialization_lib``, which rejects legacy keys such as
    ``batch_input_shape``), without it the legacy one
    (``keras/src/models/sequential.py`` ``from_config``).  So the GRU keeps the
    CuDNNGRU's style — except inside ``Bidirectional``/``TimeDistributed``,
    whose ``from_config`` always uses the new deserializer and so needs
    ``module`` (``keras/src/layers/rnn/bidirectional.py``).
    """
    conf = config_of(cudnn_cfg)
    cell = CUDNN_CLASSES[class_name_of(cudnn_cfg)]  # callers pass cuDNN classes only: no GRU fallback
    target = TARGET_CLASS[cell]
    new = {k: copy.deepcopy(conf[k]) for k in CARRIED[cell] if k in conf}
    new.update(CUDNN_COMPATIBLE[cell])
    if wrapped:
        for k in ("batch_input_shape", "input_shape", "batch_size"):
            new.pop(k, None)
    out = {"class_name": target, "config": new}
    if wrapped or "module" in cudnn_cfg:
        out = {"module": "keras.layers", "class_name": target, "config": new, "registered_name": None}
    for k in ("name", "inbound_nodes"):
        if k in cudnn_cfg:
            out[k] = copy.deepcopy(cudnn_cfg[k])
    return out


def converted_config(model_config: dict) -> dict:
    """A deep copy of ``model_config`` with every CuDNNGRU / CuDNNLSTM replaced by its GRU / LSTM config."""
    new = copy.deepcopy(model_config)

    def visit(node, wrapped=False):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in list(items):
            if isinstance(value, dict) and class_name_of(value) in CUDNN_CLASSES:
                node[key] = gru_config(value, wrapped=wrapped and key in ("layer", "backward_layer"))
            elif isinstance(value, (dict, list)):
                is_wrapper = isinstance(value, dict) and isinstance(value.get("config"), dict) \
                    and "layer" in value["config"]
                if is_wrapper:
                    visit(value["config"], wrapped=True)
                else:
                    visit(value)

    if class_name_of(new) in CUDNN_CLASSES:
        return gru_config(new)
    visit(new)
    _normalise_for_keras3(new)
    return new


def _snake_case(name: str) -> str:
    # Keras 2 ``keras/engine/base_layer.py`` ``_to_snake_case`` (tf.keras ``generic_utils.to_snake_case``)
    import re

    name = re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    name = re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
    return name if name[:1] != "_" else "private" + name


def keras2_names(model_config, saved_names: list):
    """``model_config`` with a name for every layer whose config has none, as the Keras 2 that loads it
    names it (a user layer whose ``get_config()`` returned only its own arguments: Keras 2's
    ``cls.from_config(config)`` = ``cls(**config)`` makes a fresh name, and a full model's weights are
    loaded by position, ``load_weights_from_hdf5_group``).  The name given is the one the layer had when
    saved, where the file says it: a Functional layer entry's own ``name`` (``Network.get_config`` writes
    it beside ``config``), or in a top-level Sequential the saved ``layer_names`` entry at the layer's
    position (``model.layers``, the InputLayer left out, is what ``save_weights_to_hdf5_group`` lists),
    when every named layer sits at its saved position; else a fresh one by Keras 2's rule (snake-cased
    class name, numbered from 1: ``base_layer.py`` ``_init_set_name``), unique in the model.  The input
    is not changed; without a nameless layer it is returned as it is."""
    if not isinstance(model_config, dict) or not _has_nameless(model_config):
        return model_config
    new = copy.deepcopy(model_config)
    taken = set(_all_names(new))
    top = [l for l in layers_of(new) if isinstance(l, dict) and class_name_of(l) != "InputLayer"]
    by_position = None
    if class_name_of(new) == "Sequential" and len(top) == len(saved_names or []) and all(
            not isinstance(l.get("config"), dict) or l["config"].get("name") in (None, n)
            for l, n in zip(top, saved_names)):
        by_position = {id(l): n for l, n in zip(top, saved_names)}

    def fresh(cls: str) -> str:
        base, n = _snake_case(cls or "layer"), 1
        while f"{base}_{n}" in taken:
            n += 1
        taken.add(f"{base}_{n}")
        return f"{base}_{n}"

    def visit(cfg) -> None:
        for layer in layers_of(cfg):
            if not isinstance(layer, dict):
                continue
            conf = layer.get("config")
            if isinstance(conf, list) and class_name_of(layer) == "Sequential":
                # a nested Sequential written by Keras 2.0-2.2.2 is a bare layer list: no name of its own (Keras
                # 2 named it afresh); given one here in the {name, layers} form 2.2.3+ wrote
                conf = layer["config"] = {"name": None, "layers": conf}
            if isinstance(conf, dict) and conf.get("name") is None:
                name = layer.get("name") if isinstance(layer.get("name"), str) else None
                name = name or (by_position or {}).get(id(layer)) or fresh(str(class_name_of(layer) or ""))
                conf["name"] = name
                taken.add(name)
            visit(layer)
            inner = config_of(layer).get("layer")
            if isinstance(inner, dict) and isinstance(inner.get("config"), dict) and inner["config"].get("name") is None:
                inner["config"]["name"] = fresh(str(class_name_of(inner) or ""))

    visit(new)
    return new


def _has_nameless(cfg) -> bool:
    for layer in layers_of(cfg):
        if not isinstance(layer, dict):
            continue
        conf = layer.get("config")
        if isinstance(conf, dict) and conf.get("name") is None or isinstance(conf, list) or _has_nameless(layer):
            return True
        inner = config_of(layer).get("layer")
        if isinstance(inner, dict) and isinstance(inner.get("config"), dict) and inner["config"].get("name") is None:
            return True
    return False


def _all_names(cfg) -> list:
    out = []
    for layer in layers_of(cfg):
        if isinstance(layer, dict):
            out.append(name_of(layer))
            out.extend(_all_names(layer))
    return out


_RNN_CLASSES = {"GRU", "LSTM", "SimpleRNN", "RNN"}


def _normalise_for_keras3(cfg: dict) -> None:
    """Mend three Keras 2 / tf.keras-isms that Keras 3's legacy loader (3.15) fails on, in place.

    * a Sequential config that is a bare layer list (Keras 2.0–2.2.2; Keras
      2.2.3 made it ``{"name", "layers"}``, the only form Keras 3 reads), and
      a Sequential whose first layer carries ``batch_input_shape`` with no
      ``InputLayer`` before it (Keras 3 then adds a second batch axis): an
      explicit ``InputLayer`` is put in front, as tf.keras 2.x itself writes;
    * ``time_major`` in RNN configs (tf.keras 2.x writes ``time_major: false``;
      Keras 3 layers reject the unknown argument);
    * node indices of nested models: tf.keras gives a nested model's first call
      in the outer graph node index 1 (node 0 is the model's own graph), Keras 3
      rebuilds it as node 0 and then reports "disconnected nodes".  Seen with
      nested Sequential and Functional models (``fixtures/keras/nested.h5``).
    """
    if isinstance(cfg, dict):
        if class_name_of(cfg) == "Sequential" and isinstance(cfg.get("config"), list):
            cfg["config"] = {"name": cfg.get("name") or "sequential", "layers": cfg["config"]}
        if class_name_of(cfg) == "Sequential":
            _explicit_input_layer(cfg)
            for layer in layers_of(cfg)[1:]:
                _drop_later_input_shape(layer)
        elif class_name_of(cfg) in ("Model", "Functional"):
            for layer in layers_of(cfg):
                _drop_new_style_batch_shape(layer)
        conf = cfg.get("config")
        if isinstance(conf, dict) and isinstance(conf.get("dtype"), dict):
            _policy_to_name(conf)
        if isinstance(conf, dict) and isinstance(conf.get("layers"), list) and class_name_of(cfg) != "Sequential":
            for layer in conf["layers"]:
                if isinstance(layer, dict) and class_name_of(layer) in _STATEFUL_CALLS:
                    initial_state_as_kwargs(layer)
        if class_name_of(cfg) in _RNN_CLASSES and isinstance(cfg.get("config"), dict):
            if cfg["config"].get("time_major") is True:
                raise UnsupportedError(f"{cfg['class_name']} {name_of(cfg)} has time_major=True")
            cfg["config"].pop("time_major", None)
        layers = layers_of(cfg)
        nested = {name_of(l) for l in layers if isinstance(l, dict)
                  and (class_name_of(l) in CONTAINER_CLASSES or layers_of(l))}
        if nested and isinstance(cfg.get("config"), dict):
            for layer in layers:
                nodes = layer.get("inbound_nodes") if isinstance(layer, dict) else None
                for node in (nodes if isinstance(nodes, list) else []):
                    for ref in (node if isinstance(node, list) else []):
                        _shift_ref(ref, nested)
            for key in ("input_layers", "output_layers"):
                refs = cfg["config"].get(key) or []
                if not isinstance(refs, list):
                    continue
                if refs and isinstance(refs[0], str):  # a single [name, node, tensor]
                    refs = [refs]
                for ref in refs:
                    _shift_ref(ref, nested)
        for value in cfg.values():
            if isinstance(value, (dict, list)):
                _normalise_for_keras3(value)
    elif isinstance(cfg, list):
        for value in cfg:
            _normalise_for_keras3(value)


#: Layers that tf.keras called with ``initial_state`` appended to their inputs.
_STATEFUL_CALLS = {*KERAS3_CLASS.values(), "SimpleRNN", "RNN", "Bidirectional", *CUDNN_CLASSES}


def _policy_to_name(conf: dict) -> None:
    """A tf.keras dtype policy object (``{"class_name": "Policy", "config": {"name": "mixed_float16"}}``)
    becomes its name, which every Keras 3 layer accepts as ``dtype``; Keras 3's legacy loader fails on
    the object itself ("'str' object has no attribute 'quantization_mode'", Keras 3.15)."""
    policy = conf["dtype"]
    name = config_of(policy).get("name")
    if class_name_of(policy) in ("Policy", "DTypePolicy", "PolicyV1", "FloatDTypePolicy") and isinstance(name, str):
        conf["dtype"] = name


#: The input-shape keys a layer's constructor takes (Keras 2 ``base_layer.py`` ``Layer.__init__``; not
#: ``input_dim``, which Dense-like layers turn into ``input_shape`` and never write, and which is an
#: Embedding's own argument).
INPUT_SHAPE_KEYS = ("batch_input_shape", "input_shape", "batch_size")


def _drop_later_input_shape(layer) -> None:
    """A Keras 2 ``Sequential`` takes its input shape from its FIRST layer only (Keras 2.2.x
    ``keras/engine/sequential.py`` ``Sequential.add``: ``batch_input_shape`` is read when ``self._layers``
    is empty; tf.keras ``engine/sequential.py`` the same) and ignores the one a later layer carries (users
    who passed ``input_shape=`` to every layer left one on each, often with another feature count):
    dropped here, in every serialization style, so nothing downstream applies it
    (:func:`gruconv.keras3.archive.check_rnn_inputs` follows the same rule)."""
    conf = layer.get("config") if isinstance(layer, dict) else None
    if isinstance(conf, dict) and class_name_of(layer) != "InputLayer":
        for key in INPUT_SHAPE_KEYS:
            conf.pop(key, None)


def _drop_new_style_batch_shape(layer) -> None:
    """tf.keras 2.13+ serializes the layers of a nested Sequential, and ``to_json()`` every layer,
    in the new style (with ``module``) and leaves ``batch_input_shape`` on them; Keras 3 hands a
    new-style config straight to the constructor, which rejects it.  In a Functional model, or
    after a Sequential's first layer, the shape is redundant: the model's inputs fix it."""
    if isinstance(layer, dict) and "module" in layer and class_name_of(layer) != "InputLayer":
        conf = layer.get("config")
        if isinstance(conf, dict):
            conf.pop("batch_input_shape", None)


def tensor_ref(ref: list) -> dict:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None], "dtype": "float32", "keras_history": [ref[0], ref[1], ref[2]]}}


def initial_state_as_kwargs(layer: dict) -> None:
    """tf.keras recorded ``rnn(x, initial_state=s)`` as one inbound node with inputs ``[x, s...]``
    (Keras 2 ``RNN.__call__`` appends the states to the inputs); Keras 3 reads a legacy node's
    tensors as ONE positional argument, so the layer gets ``[x, s]`` and refuses it ("expects 1
    input(s), but it received 2").  Such nodes are rewritten in Keras 3's own node format
    (``{"args": [x], "kwargs": {"initial_state": [s...]}}``, ``keras/src/models/functional.py``
    ``deserialize_node``), which Keras 3.0+ reads."""
    nodes = layer.get("inbound_nodes")
    if not isinstance(nodes, list):
        return
    for i, node in enumerate(nodes):
        if not (isinstance(node, list) and len(node) > 1 and all(
                isinstance(r, list) and len(r) >= 3 and isinstance(r[0], str) for r in node)):
            continue
        kwargs = {}
        for ref in node:
            if len(ref) > 3 and isinstance(ref[3], dict):
                kwargs.update({k: v for k, v in ref[3].items() if k != "initial_state"})
        kwargs["initial_state"] = [tensor_ref(r) for r in node[1:]]
        nodes[i] = {"args": [tensor_ref(node[0])], "kwargs": kwargs}


def _explicit_input_layer(seq_cfg: dict) -> None:
    layers = layers_of(seq_cfg)
    if not layers or not isinstance(layers[0], dict) or class_name_of(layers[0]) == "InputLayer":
        return
    first = layers[0].get("config")
    if not isinstance(first, dict) or "batch_input_shape" not in first:
        return
    shape = first.pop("batch_input_shape")
    input_layer = {"class_name": "InputLayer",
                   "config": {"batch_input_shape": shape, "dtype": first.get("dtype", "float32"),
                              "name": f"{first.get('name', 'layer')}_input"}}
    layers.insert(0, input_layer)


def _shift_ref(ref, nested: set) -> None:
    if (isinstance(ref, list) and len(ref) >= 3 and isinstance(ref[0], str) and ref[0] in nested
            and isinstance(ref[1], int) and ref[1] >= 1):
        ref[1] -= 1
