"""Which recurrent layers of a Keras model run on cuDNN, per Keras 3 backend, and why not.

The answer is a fact of Keras's own source, so it is kept here as data (:data:`RULES`), each rule with
the Keras release and the source file it was read from, and evaluated on a model *config* -- no
framework is imported by this module, so ``gruconv inspect`` answers on any machine.

Read from Keras 3.15.1 (the release installed in the project venv):

* ``keras/src/layers/rnn/gru.py`` / ``lstm.py`` ``inner_loop``: the layer calls ``backend.gru`` /
  ``backend.lstm`` only when ``use_cudnn`` is ``"auto"``/``True`` and ``recurrent_dropout`` is 0; a
  ``NotImplementedError`` from the backend sends it to ``RNN.inner_loop``, Keras's step-by-step loop
  (``fallback``).  A generic ``RNN(GRUCell(...))`` never calls the backend op.
  ``use_cudnn`` is not written by ``get_config`` (3.15.1): a saved model loads with ``"auto"``; the
  rule matters only for configs that carry the key by hand (``from_config`` passes it on).
* ``keras/src/backend/tensorflow/rnn.py`` ``gru``/``lstm`` -> ``cudnn_ok`` ->
  ``_do_gru_arguments_support_cudnn``: tanh, sigmoid, ``not unroll``, ``use_bias``, GRU
  ``reset_after``; a GPU must be visible; ``_cudnn_gru`` asserts every mask is right-padded with no
  fully-masked row (``_assert_valid_mask``).  There is no non-cuDNN fused path on TensorFlow.
* ``keras/src/backend/torch/rnn.py`` ``gru``: ``reset_after=False`` or any mask -> NotImplementedError
  (fallback); otherwise cuDNN when ``cudnn_ok`` (tanh, sigmoid, not unroll, use_bias) and the inputs
  are on CUDA, else ``_fallback_gru``, a torch loop with the input projections precomputed
  (``fused``).  ``lstm`` likewise (mask -> fallback; else cuDNN or ``_fallback_lstm``).
* ``keras/src/backend/jax/rnn.py`` ``gru``: ``reset_after=False``, ``unroll`` or a mask ->
  NotImplementedError; otherwise a ``lax.scan`` with precomputed input projections for *any*
  activation (``fused``: ``jax.experimental.rnn`` has no GRU, so JAX never runs a cuDNN GRU).
  ``lstm``: a mask, or ``cudnn_ok`` false (tanh, sigmoid only, not unroll, use_bias, GPU backend) ->
  NotImplementedError; otherwise ``jax.experimental.rnn.lstm``, cuDNN's LSTM.

Verdicts: ``cudnn`` (cuDNN's RNN kernel), ``fused`` (the backend's own whole-sequence op, not cuDNN),
``fallback`` (Keras's step loop, ~20x slower on a GPU, ``shared/DESIGN.md``).  The verdict is what
Keras does *on a GPU*; on a CPU every backend runs ``fused`` or ``fallback``.

The rules are checked against what Keras actually does on a GPU by ``tests/eligibility/test_eligibility_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..errors import InputError, UsageError
from ..model.keras_config import config_of, makes_mask

KERAS_RELEASE = "3.15.1"
BACKENDS = ("tensorflow", "jax", "torch")
VERDICTS = ("cudnn", "fused", "fallback")  # best first
_RANK = {v: i for i, v in enumerate(VERDICTS)}

_GRU_PY = "keras/src/layers/rnn/gru.py"
_LSTM_PY = "keras/src/layers/rnn/lstm.py"
_TF = "keras/src/backend/tensorflow/rnn.py"
_TORCH = "keras/src/backend/torch/rnn.py"
_JAX = "keras/src/backend/jax/rnn.py"

# A rule: on ``backend`` for ``layers``, config field ``field`` must satisfy ``test`` (see _passes),
# else the verdict is at most ``else``.  ``fix`` says what changing it does to the function computed.
RULES: list = []


def _rule(rid, backends, layers, field, test, need, else_, source, fix):
    for be in backends:
        RULES.append({"id": rid, "backend": be, "layers": tuple(layers), "field": field, "test": test,
                      "need": need, "else": else_, "keras": KERAS_RELEASE, "source": source, "fix": fix})


_SAME = "same function: safe to change"
_CHANGES = "changes the function: no weights make the two equal; retrain or fine-tune"
_INFER = "same function at inference (dropout is off); training regularisation changes"

# layer level (every backend): whether the backend op is called at all
_rule("use_cudnn", BACKENDS, ("GRU",), "use_cudnn", ("in", ("auto", True)), "use_cudnn in ('auto', True)",
      "fallback", f"{_GRU_PY} GRU.inner_loop", _SAME)
_rule("use_cudnn", BACKENDS, ("LSTM",), "use_cudnn", ("in", ("auto", True)), "use_cudnn in ('auto', True)",
      "fallback", f"{_LSTM_PY} LSTM.inner_loop", _SAME)
_rule("recurrent_dropout", BACKENDS, ("GRU",), "recurrent_dropout", ("zero",), "recurrent_dropout == 0",
      "fallback", f"{_GRU_PY} GRU.inner_loop", _INFER)
_rule("recurrent_dropout", BACKENDS, ("LSTM",), "recurrent_dropout", ("zero",), "recurrent_dropout == 0",
      "fallback", f"{_LSTM_PY} LSTM.inner_loop", _INFER)

# TensorFlow: cudnn_ok -> _do_{gru,lstm}_arguments_support_cudnn
_TF_OK = f"{_TF} cudnn_ok / _do_gru_arguments_support_cudnn / _do_lstm_arguments_support_cudnn"
_rule("activation", ("tensorflow",), ("GRU", "LSTM"), "activation", ("eq", "tanh"), "activation == 'tanh'",
      "fallback", _TF_OK, _CHANGES)
_rule("recurrent_activation", ("tensorflow",), ("GRU", "LSTM"), "recurrent_activation", ("eq", "sigmoid"),
      "recurrent_activation == 'sigmoid'", "fallback", _TF_OK, _CHANGES)
_rule("unroll", ("tensorflow",), ("GRU", "LSTM"), "unroll", ("false",), "unroll == False", "fallback", _TF_OK,
      _SAME)
_rule("use_bias", ("tensorflow",), ("GRU", "LSTM"), "use_bias", ("true",), "use_bias == True", "fallback",
      _TF_OK, "same function with a zero bias: safe to change")
_rule("reset_after", ("tensorflow",), ("GRU",), "reset_after", ("true",), "reset_after == True", "fallback",
      _TF_OK, _CHANGES)

# torch: gru()/lstm(); the fused alternative is _fallback_gru/_fallback_lstm
_rule("reset_after", ("torch",), ("GRU",), "reset_after", ("true",), "reset_after == True", "fallback",
      f"{_TORCH} gru", _CHANGES)
_rule("mask", ("torch",), ("GRU", "LSTM"), "mask", ("no_mask",), "no mask (any mask, even right-padded)",
      "fallback", f"{_TORCH} gru / lstm", "drop the mask (Masking / mask_zero): the padded steps then count")
for _f, _t, _need, _fix in (
        ("activation", ("eq", "tanh"), "activation == 'tanh'", _CHANGES),
        ("recurrent_activation", ("eq", "sigmoid"), "recurrent_activation == 'sigmoid'", _CHANGES),
        ("unroll", ("false",), "unroll == False", _SAME),
        ("use_bias", ("true",), "use_bias == True", "same function with a zero bias: safe to change")):
    _rule(_f, ("torch",), ("GRU", "LSTM"), _f, _t, _need, "fused", f"{_TORCH} cudnn_ok (else _fallback_gru/lstm)",
          _fix)

# JAX: gru() has no cuDNN at all; lstm() uses jax.experimental.rnn.lstm
_rule("reset_after", ("jax",), ("GRU",), "reset_after", ("true",), "reset_after == True", "fallback",
      f"{_JAX} gru", _CHANGES)
_rule("unroll", ("jax",), ("GRU",), "unroll", ("false",), "unroll == False", "fallback", f"{_JAX} gru", _SAME)
_rule("mask", ("jax",), ("GRU", "LSTM"), "mask", ("no_mask",), "no mask (any mask, even right-padded)",
      "fallback", f"{_JAX} gru / lstm", "drop the mask (Masking / mask_zero): the padded steps then count")
for _f, _t, _need, _fix in (
        ("activation", ("eq", "tanh"), "activation == 'tanh'", _CHANGES),
        ("recurrent_activation", ("eq", "sigmoid"), "recurrent_activation == 'sigmoid'", _CHANGES),
        ("unroll", ("false",), "unroll == False", _SAME),
        ("use_bias", ("true",), "use_bias == True", "same function with a zero bias: safe to change")):
    _rule(_f, ("jax",), ("LSTM",), _f, _t, _need, "fallback", f"{_JAX} cudnn_ok / lstm", _fix)

#: Best verdict a layer class can reach per backend, with the source that says so.
CEILING = {
    ("jax", "GRU"): ("fused", f"{_JAX} gru: lax.scan; jax.experimental.rnn has no GRU (bidirectional_gru says so)"),
}

#: What a verdict needs at run time that no config can show.
RUNTIME = {
    "tensorflow": "a GPU visible to TensorFlow (_is_gpu_available); with a mask, every row right-padded and "
                  "none fully masked (_cudnn_gru -> _assert_valid_mask: eager falls back, inside "
                  "predict/fit's tf.function the assertion fails with InvalidArgumentError)",
    "torch": "inputs on a CUDA device, not under torch.jit tracing or torch.compile (gru / lstm)",
    "jax": "jax.default_backend() == 'gpu' (cudnn_ok, LSTM only)",
}

RECURRENT = ("GRU", "LSTM")
LEGACY_CUDNN = {"CuDNNGRU": "GRU", "CuDNNLSTM": "LSTM"}
#: Per recurrent class, the fields the rules read beyond the ones every class has: ``{field: (default in a
#: legacy Keras 2 file, Keras 3 default, what ``gruconv convert`` writes)}`` (GRU ``reset_after``: False
#: before Keras 2.3, keras/src/layers/rnn/gru.py).  Indexed, never defaulted: a class outside it fails.
CLASS_FIELDS = {"GRU": {"reset_after": (False, True, True)}, "LSTM": {}}
assert set(CLASS_FIELDS) == set(RECURRENT)
# Layers that pass a Keras mask on (supports_masking = True in keras/src/layers/**, 3.15.1; RNNs only
# with return_sequences); anything else drops it (Layer.compute_mask is only called when supported).
_MASK_PASSES = {
    "Dense", "EinsumDense", "Activation", "Dropout", "SpatialDropout1D", "GaussianNoise", "GaussianDropout",
    "AlphaDropout", "ActivityRegularization", "LayerNormalization", "BatchNormalization", "GroupNormalization",
    "UnitNormalization", "Normalization", "Rescaling", "ReLU", "LeakyReLU", "PReLU", "ELU", "Softmax",
    "Identity", "Lambda", "Masking", "TimeDistributed", "Concatenate", "Add", "Subtract", "Multiply", "Average",
    "Maximum", "Minimum", "Dot", "MultiHeadAttention", "GroupedQueryAttention", "InputLayer",
}



# --------------------------------------------------------------------------- evaluation


def _act_name(value) -> Any:
    """'tanh' from a Keras 3 or legacy activation config: a name, or a serialized function dict."""
    if isinstance(value, dict):
        cfg = value.get("config")
        if isinstance(cfg, str):
            return cfg
        if isinstance(cfg, dict) and isinstance(cfg.get("name"), str):
            return cfg["name"]
        return value.get("class_name")
    return value


def _passes(test, value) -> bool:
    kind = test[0]
    if kind == "eq":
        return _act_name(value) == test[1]
    if kind == "in":
        return value in test[1]
    if kind == "zero":
        return not value
    if kind == "false":
        return value is False or value == 0
    if kind == "true":
        return value is True or value == 1
    if kind == "no_mask":
        return not value
    raise ValueError(f"unknown rule test {test!r}")


def _defaults(cls: str, cfg: dict, legacy: bool) -> dict:
    """The fields the rules read, with Keras 3 defaults (legacy Keras 2 defaults where a file omits them:
    ``reset_after`` False before Keras 2.3, ``hard_sigmoid`` before 2.3; tf_keras always writes both)."""
    out = {"activation": cfg.get("activation", "tanh"),
           "recurrent_activation": cfg.get("recurrent_activation", "hard_sigmoid" if legacy else "sigmoid"),
           "use_bias": cfg.get("use_bias", True), "unroll": cfg.get("unroll", False),
           "recurrent_dropout": cfg.get("recurrent_dropout", 0.0), "use_cudnn": cfg.get("use_cudnn", "auto")}
    for f, (legacy_default, default, _written) in CLASS_FIELDS[cls].items():
        out[f] = cfg.get(f, legacy_default if legacy else default)
    return out


def verdict_for(cls: str, fields: dict, backend: str, mask: bool) -> dict:
    """The verdict of one GRU/LSTM on one backend, with every failing rule and its value."""
    best, note = CEILING.get((backend, cls), ("cudnn", None))
    failing = []
    values = dict(fields, mask=mask)
    for r in RULES:
        if r["backend"] != backend or cls not in r["layers"]:
            continue
        v = values.get(r["field"])
        if not _passes(r["test"], v):
            failing.append({"rule": r["id"], "field": r["field"], "value": v, "need": r["need"],
                            "else": r["else"], "source": f"Keras {r['keras']} {r['source']}"})
            if _RANK[r["else"]] > _RANK[best]:
                best = r["else"]
    out = {"verdict": best, "failing": failing}
    if note:
        out["ceiling"] = {"verdict": CEILING[(backend, cls)][0], "source": f"Keras {KERAS_RELEASE} {note}"}
    if fields.get("use_cudnn") is True and best == "fallback":
        out["raises"] = ("ValueError: use_cudnn=True was specified, but cuDNN is not supported for this layer "
                         "configuration (GRU/LSTM.inner_loop)")
    if mask and backend == "tensorflow" and best == "cudnn":
        out["requires"] = "every mask right-padded with no fully-masked row (_assert_valid_mask)"
    return out


def _what_it_takes(cls: str, fields: dict, per_backend: dict) -> list:
    """Each change that would lift the layer to its best verdict, and whether the weights allow it."""
    seen, out = set(), []
    for be in BACKENDS:
        for f in per_backend[be]["failing"]:
            if f["field"] in seen:
                continue
            seen.add(f["field"])
            rule = next(r for r in RULES if r["id"] == f["rule"] and r["backend"] == be)
            same = rule["fix"] != _CHANGES
            if f["field"] == "reset_after":
                fix = ("reset_after=False cannot become reset_after=True with the same function: the reset gate "
                       "multiplies before the recurrent matrix instead of after; no weights make them equal "
                       "(keras/src/layers/rnn/gru.py GRUCell.call). Retrain with reset_after=True.")
            else:
                fix = rule["fix"]
            out.append({"field": f["field"], "value": f["value"], "change_to": rule["need"],
                        "weights_allow": same, "note": fix})
    return out


# --------------------------------------------------------------------------- walking configs


def _history_names(obj, acc: list) -> list:
    """Names of the layers feeding an inbound node, Keras 3 (``keras_history``) or legacy lists."""
    if isinstance(obj, dict):
        hist = obj.get("config", {}).get("keras_history") if isinstance(obj.get("config"), dict) else None
        if obj.get("class_name") == "__keras_tensor__" and isinstance(hist, list) and hist:
            acc.append(str(hist[0]))
            return acc
        for v in obj.values():
            _history_names(v, acc)
    elif isinstance(obj, list):
        if len(obj) >= 3 and isinstance(obj[0], str) and isinstance(obj[1], int) and isinstance(obj[2], int):
            acc.append(obj[0])
            return acc
        for v in obj:
            _history_names(v, acc)
    return acc


def _class(layer: dict) -> str:
    return str(layer.get("class_name", "?"))


def _sub_layers(model_cfg) -> list:
    if isinstance(model_cfg, list):  # Keras 2.0-2.2 Sequential: the config is the layer list
        return model_cfg
    layers = model_cfg.get("layers") if isinstance(model_cfg, dict) else None
    return layers if isinstance(layers, list) else []


class _Walker:
    def __init__(self, legacy: bool):
        self.legacy = legacy
        self.out: list = []

    # -- one recurrent layer
    def recurrent(self, cls: str, cfg: dict, path: str, mask: bool, sources: list, wrapper=None):
        converted = cls in LEGACY_CUDNN
        as_cls = LEGACY_CUDNN.get(cls, cls)
        if converted:  # gruconv convert writes GRU/LSTM(tanh, sigmoid, reset_after=True, use_bias=True)
            fields = {"activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True, "unroll": False,
                      "recurrent_dropout": 0.0, "use_cudnn": "auto",
                      **{f: written for f, (_l, _d, written) in CLASS_FIELDS[as_cls].items()}}
        else:
            fields = _defaults(as_cls, cfg, self.legacy)
        per = {be: verdict_for(as_cls, fields, be, mask) for be in BACKENDS}
        entry = {"path": path, "name": cfg.get("name"), "class": cls, "wrapper": wrapper,
                 "units": cfg.get("units"), "settings": fields,
                 "mask": {"reaches": mask, "from": sources}, "backends": per}
        if converted:
            entry["note"] = (f"{cls} does not exist in Keras 3; `gruconv convert` writes it as {as_cls}("
                             "activation='tanh', recurrent_activation='sigmoid', use_bias=True"
                             + "".join(f", {f}={written!r}" for f, (_l, _d, written) in CLASS_FIELDS[as_cls].items())
                             + "): verdicts are for that")
        else:
            entry["to_become_eligible"] = _what_it_takes(as_cls, fields, per)
        self.out.append(entry)

    def generic_rnn(self, cfg: dict, path: str, mask: bool, sources: list, wrapper=None):
        cell = cfg.get("cell")
        cells = cell.get("config", {}).get("cells") if isinstance(cell, dict) and _class(cell) == \
            "StackedRNNCells" else None
        cell_name = _class(cell) if isinstance(cell, dict) else "?"
        reason = {"rule": "layer_class", "field": "class", "value": f"RNN({cell_name})",
                  "need": "a GRU or LSTM layer (RNN(cell) always runs RNN.inner_loop)", "else": "fallback",
                  "source": f"Keras {KERAS_RELEASE} keras/src/layers/rnn/rnn.py RNN.inner_loop"}
        per = {be: {"verdict": "fallback", "failing": [reason]} for be in BACKENDS}
        take = [{"field": "class", "value": f"RNN({cell_name})", "change_to": "GRU/LSTM layer with the same "
                 "settings", "weights_allow": cell_name in ("GRUCell", "LSTMCell") and not cells,
                 "note": "GRU(...)/LSTM(...) hold the same weights as RNN(GRUCell/LSTMCell) with the same config"}]
        self.out.append({"path": path, "name": cfg.get("name"), "class": "RNN", "wrapper": wrapper,
                         "cell": cell_name, "mask": {"reaches": mask, "from": sources}, "backends": per,
                         "to_become_eligible": take})

    # -- any layer; returns (mask leaves the layer, mask sources)
    def layer(self, layer: dict, path: str, mask: bool, sources: list, explicit_mask: Optional[bool] = None):
        cls, cfg = _class(layer), config_of(layer)
        name = str(cfg.get("name", layer.get("name", "?")))
        here = f"{path}/{name}" if path else name
        if explicit_mask is not None:
            mask = explicit_mask
        if cls in RECURRENT or cls in LEGACY_CUDNN:
            self.recurrent(cls, cfg, here, mask, sources if mask else [])
            return (mask and bool(cfg.get("return_sequences"))), sources
        if cls == "RNN":
            self.generic_rnn(cfg, here, mask, sources if mask else [])
            return (mask and bool(cfg.get("return_sequences"))), sources
        if cls == "Bidirectional":
            fw = cfg.get("layer") if isinstance(cfg.get("layer"), dict) else {}
            bw = cfg.get("backward_layer") if isinstance(cfg.get("backward_layer"), dict) else None
            for d, sub in (("forward", fw), ("backward", bw or fw)):
                scls, scfg = _class(sub), config_of(sub)
                if scls in RECURRENT or scls in LEGACY_CUDNN:
                    self.recurrent(scls, scfg, f"{here}[{d}]", mask, sources if mask else [], wrapper="Bidirectional")
                elif scls == "RNN":
                    self.generic_rnn(scfg, f"{here}[{d}]", mask, sources if mask else [], wrapper="Bidirectional")
            return (mask and bool(config_of(fw).get("return_sequences"))), sources
        if cls == "TimeDistributed":
            sub = cfg.get("layer") if isinstance(cfg.get("layer"), dict) else {}
            before = len(self.out)
            self.layer(sub, here, mask, sources)
            for e in self.out[before:]:
                e["wrapper"] = e["wrapper"] or "TimeDistributed"
            return mask, sources
        if cls in ("Sequential", "Functional", "Model") or "layers" in cfg:
            return self.model(layer, here, mask, sources)
        if makes_mask(cls, cfg):
            return True, sources + [name]
        if cls in _MASK_PASSES:
            return mask, sources
        return False, []

    def model(self, model: dict, path: str, mask: bool = False, sources: Optional[list] = None):
        sources = sources or []
        cfg = model.get("config", {}) if isinstance(model, dict) else {}
        layers = _sub_layers(cfg)
        cls = _class(model) if isinstance(model, dict) else "?"
        functional = any(isinstance(lay, dict) and lay.get("inbound_nodes") for lay in layers)
        if not functional:  # Sequential: each layer feeds the next
            for lay in layers:
                if isinstance(lay, dict):
                    mask, sources = self.layer(lay, path, mask, sources)
            return mask, sources
        # Functional: a layer's mask comes from its inputs, or from the mask Keras recorded in the node
        state: dict = {}
        first = True
        for lay in layers:
            if not isinstance(lay, dict):
                continue
            name = str(lay.get("name", config_of(lay).get("name", "?")))
            nodes = lay.get("inbound_nodes") or []
            if not nodes:  # an Input of this (possibly nested) model receives the outer mask
                state[name] = (mask if first else False, sources if first else [])
                first = False
                if _class(lay) == "InputLayer":
                    continue
            inputs = _history_names(nodes, []) if nodes else []
            m_in, src_in = False, []
            explicit = None
            for node in nodes if isinstance(nodes, list) else []:
                kw = node.get("kwargs") if isinstance(node, dict) else None
                if isinstance(kw, dict) and "mask" in kw:
                    explicit = bool(kw["mask"])
                    if explicit:  # Keras 3 records the mask tensor it traced: follow it to its maker
                        src_in = [s for h in _history_names(kw["mask"], []) for s in state.get(h, (0, [h]))[1]]
            for i in inputs:
                m, s = state.get(i, (False, []))
                if m:
                    m_in, src_in = True, src_in or s
            if explicit is False and m_in:
                # the writer traced no mask, but Layer.__call__ (keras/src/layers/layer.py step 6) fills a
                # None mask argument from the input tensor at run time: the mask still arrives
                explicit = True
            state[name] = self.layer(lay, path, m_in, sorted(set(src_in)), explicit_mask=explicit)
        # a Keras 2.0-2.2 list config has no output_layers: its last layers' outputs are the model's
        outs = _history_names(cfg.get("output_layers", []) if isinstance(cfg, dict) else [], [])
        m = any(state.get(o, (False,))[0] for o in outs)
        return m, sorted({s for o in outs for s in state.get(o, (False, []))[1]})


def evaluate(config: dict, *, legacy: bool = False, source: str = "") -> dict:
    """The report for a model config (Keras 3 ``config.json``/``to_json()`` or legacy ``model_config``)."""
    if isinstance(config, dict) and "class_name" not in config and "config" in config:
        config = config["config"]
    if not isinstance(config, dict) or "class_name" not in config:
        raise InputError("not a Keras model config (no class_name)", path=source or None)
    w = _Walker(legacy)
    cls = _class(config)
    if cls in RECURRENT or cls in LEGACY_CUDNN or cls in ("Bidirectional", "TimeDistributed", "RNN"):
        w.layer(config, "", False, [])
    else:
        w.model(config, config_of(config).get("name", "model") if isinstance(config_of(config).get("name"), str) else "model")
    counts = {be: {v: sum(1 for e in w.out if e["backends"][be]["verdict"] == v) for v in VERDICTS}
              for be in BACKENDS}
    return {"source": source, "legacy": legacy, "keras_rules": KERAS_RELEASE, "model_class": cls,
            "layers": w.out, "summary": counts, "runtime": RUNTIME,
            "verdicts": {"cudnn": "cuDNN's RNN kernel", "fused": "the backend's whole-sequence op, not cuDNN",
                         "fallback": "Keras's step-by-step loop (RNN.inner_loop)"}}


def for_document(doc) -> Optional[dict]:
    """The report for a document another reader read (:mod:`gruconv.readers.keras_h5`): its
    ``model_config`` (the file's, or ``--config``'s for a weights-only file), evaluated with Keras 2
    defaults unless the file says Keras 3 wrote it.  None when the document has no architecture (a
    weights-only file without ``--config``, a TF1 checkpoint).  CuDNNGRU/CuDNNLSTM layers are
    reported as what ``gruconv convert`` writes for them."""
    config = getattr(doc, "model_config", None)
    if not isinstance(config, dict) or getattr(doc, "laid_out", False):
        # a TF2 checkpoint's graph (weights laid out from the bundle) has no report yet: its format line
        # would name a legacy HDF5 file
        return None
    version = str(getattr(doc, "keras_version", None) or "")
    path = getattr(doc, "path", None)
    legacy = not version.startswith("3.")
    weights_only = getattr(doc, "kind", None) == "weights"
    try:
        rep = evaluate(config, legacy=legacy, source=f"{path} + --config" if weights_only else str(path))
    except RecursionError:
        raise InputError("model config is nested too deeply", path=path) from None
    except InputError as e:
        if e.path is None:
            raise InputError(e.message, path=path) from None
        raise
    rep["format"] = ("legacy HDF5 weights + config" if weights_only else "legacy HDF5 model") if legacy \
        else ("HDF5 weights + config" if weights_only else "HDF5 model")
    if version:
        rep["saved_by_keras"] = version
    return rep


# --------------------------------------------------------------------------- reading files


def legacy_keras_zip(config, meta) -> bool:
    """Whether a ``.keras`` zip's ``config.json`` / ``metadata.json`` were written by Keras 2
    (tf.keras 2.13-2.15, tf_keras 2.16+: ``metadata.json`` ``keras_version`` ``2.x``, seen
    ``"2.21.0"``) or name a Keras-2-only class (``CuDNNGRU``/``CuDNNLSTM``, which Keras 3 cannot
    load): such a file is read as a legacy model (:mod:`gruconv.readers.tf_keras_zip`), never passed
    over as "already Keras 3".  Keras 3 itself writes ``keras_version`` ``3.x``."""
    version = meta.get("keras_version") if isinstance(meta, dict) else None
    if isinstance(version, str) and version.split(".", 1)[0] in ("1", "2"):
        return True
    found, stack = False, [config]
    while stack and not found:  # iterative: the config is already bounded in depth and size
        node = stack.pop()
        if isinstance(node, dict):
            found = node.get("class_name") in LEGACY_CUDNN
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return found


def _hdf5_model_config(path) -> tuple:
    """(model_config or None, keras_version) of a legacy HDF5 file, via the guarded opener."""
    from ..files import hdf5 as h5safe, inputs

    with h5safe.open_hdf5(path, "a Keras HDF5 file") as f:
        cfg = h5safe.read_json_attr(f, "model_config", path)
        ver = h5safe.read_attr(f, "keras_version")
        layer_names = h5safe.read_attr(f, "layer_names")
        has_vars = "layers" in f or "_layer_checkpoint_dependencies" in f or "vars" in f
    return cfg, ver, layer_names is not None or has_vars


def inspect_path(path, config=None) -> dict:
    """The eligibility report for a model file.

    ``path``: a ``.keras`` zip; a legacy Keras HDF5 model (``model_config`` root attribute); a Keras 3
    ``.weights.h5`` or legacy weights-only HDF5 together with ``config`` (a JSON file: ``model.to_json()``
    or a ``.keras`` ``config.json``); or a config JSON file itself.  Raises InputError for unreadable or
    hostile input, UsageError when a weights-only file comes without ``config``.
    """
    from ..files import hdf5 as h5safe, inputs, zips

    path = Path(path)
    zips.regular_size(path)
    head = inputs.head(path, 8)
    if config is not None:
        cfg = inputs.load_json(config, "a Keras model config JSON")
        legacy = isinstance(cfg, dict) and "module" not in cfg and "keras_version" in cfg
        rep = evaluate(cfg, legacy=legacy, source=f"{path} + {config}")
        rep["format"] = "weights + config"
        return rep
    if head[:4] == b"PK\x03\x04" or head[:4] == b"PK\x05\x06":
        cfg, meta = zips.read_keras_zip(path)
        rep = evaluate(cfg, legacy=legacy_keras_zip(cfg, meta), source=str(path))
        rep["format"] = ".keras"
        rep["saved_by_keras"] = meta.get("keras_version")
        return rep
    if h5safe.is_hdf5(path):
        cfg, ver, weights_only = _hdf5_model_config(path)
        if cfg is None:
            raise UsageError("holds weights but no model config (a `.weights.h5` or `save_weights` file); pass "
                             "the architecture with --config (model.to_json() or a .keras config.json)", path=path)
        legacy = not str(ver or "").startswith("3.")
        rep = evaluate(cfg, legacy=legacy, source=str(path))
        rep["format"] = "legacy HDF5 model" if legacy else "HDF5 model"
        rep["saved_by_keras"] = ver
        return rep
    if head[:1] in (b"{", b"[") or path.suffix == ".json":
        cfg = inputs.load_json(path, "a Keras model config JSON")
        rep = evaluate(cfg, legacy=isinstance(cfg, dict) and "module" not in cfg, source=str(path))
        rep["format"] = "config JSON"
        return rep
    raise InputError("not a .keras zip, Keras HDF5 file or model config JSON", path=path)


# --------------------------------------------------------------------------- text


def _val(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return repr(_act_name(v)) if isinstance(v, (str, dict)) else str(v)


def text_lines(report: dict) -> list:
    """Human-readable lines for ``gruconv inspect``: one block per recurrent layer."""
    from ..files.inputs import display

    lines = [f"cuDNN eligibility ({report.get('format', 'config')}; rules read from Keras "
             f"{report['keras_rules']} source) for {display(report.get('source', ''))}"]
    if not report["layers"]:
        lines.append("  no recurrent layers (GRU, LSTM, CuDNNGRU, CuDNNLSTM, RNN)")
        return lines
    for e in report["layers"]:
        head = f"  {display(e['path'])}  {e['class']}"
        if e.get("units") is not None:
            head += f"({e['units']})"
        if e.get("wrapper"):
            head += f" in {e['wrapper']}"
        if e["mask"]["reaches"]:
            head += f"  [mask from {', '.join(display(s) for s in e['mask']['from']) or 'upstream'}]"
        lines.append(head)
        if e.get("note"):
            lines.append(f"    note: {e['note']}")
        for be in BACKENDS:
            b = e["backends"][be]
            why = "; ".join(f"{f['field']}={_val(f['value'])} (needs {f['need']})" for f in b["failing"])
            extra = ""
            if b.get("ceiling") and b["verdict"] == "fused" and not b["failing"]:
                extra = " (no cuDNN GRU on JAX)"
            if b.get("requires"):
                extra = f" if {b['requires']}"
            if b.get("raises"):
                extra = f" -> raises {b['raises']}"
            lines.append(f"    {be:<10} {b['verdict']}{extra}" + (f": {why}" if why else ""))
        for t in e.get("to_become_eligible") or []:
            ok = "weights allow it" if t["weights_allow"] else "NOT with these weights"
            lines.append(f"    to fix {t['field']}={_val(t['value'])} -> {t['change_to']}: {ok} ({t['note']})")
    s = report["summary"]
    lines.append("  summary: " + "; ".join(
        f"{be} " + ", ".join(f"{n} {v}" for v, n in s[be].items() if n) for be in BACKENDS))
    return lines
