"""``verify`` of a Keras model that Keras cannot rebuild here: it holds a user's custom layer and no
``--custom-objects`` file was given.  gruconv never runs code from a model file, so the whole
model cannot run; every cuDNN layer still can, alone, as for a weights-only file
(:func:`gruconv.verify.graph.alone_layer` / :func:`~gruconv.verify.graph.check_alone`).

What each layer is fed: the input it receives in the model wherever the layers before it can be run
without the model -- read from the model config, top-level layers only:

* an ``Embedding`` fed by a model input: its rows (from the original file) for random token ids, so the
  layer sees the value range it saw in use;
* a cuDNN layer checked before it (its sequence, merged as its ``Bidirectional`` merges): the converted
  layer's own output, so a stack is checked on the activations that reach its upper layers;
* through layers that are the identity at inference (``Dropout`` and its kin);
* anything else (the model input itself, a ``Concatenate``, a custom layer...): uniform(-1, 1) inputs of
  the layer's width, as for a weights-only file.

The converted weights come from the file ``convert`` wrote: a legacy-layout ``.h5`` as for weights-only
files, or a Keras 3 ``.keras`` / ``.weights.h5`` at the object paths of the generated config
(:func:`gruconv.keras3.config.saveable_plan`, read by :func:`gruconv.keras3.archive.read_weights`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import UsageError
from ..keras3 import runtime as keras3
from ..model.keras_config import IDENTITY_AT_INFERENCE
from .graph import alone_layer, check_alone

_MERGE = {"concat": lambda f, b: np.concatenate([f, b], -1), "sum": lambda f, b: f + b,
          "mul": lambda f, b: f * b, "ave": lambda f, b: (f + b) / 2}


def verify_partial(doc, converted, engine, report, rng, user_inputs) -> None:
    """Every cuDNN layer of ``doc`` checked alone, fed as the module docstring says; a note names the
    custom layers and says the end-to-end check needs ``--custom-objects``."""
    from ..keras3.builtins import custom_classes

    keras = keras3.keras()
    custom = custom_classes(doc.model_config)
    if user_inputs:
        raise UsageError("--inputs feeds the whole model, which cannot be rebuilt without the custom layer "
                         f"class(es) {', '.join(custom)}: pass --custom-objects FILE.py", path=report.input)
    listed = "; ".join(f"{cls} ({', '.join(paths)})" for cls, paths in custom.items())
    report.notes.append(f"custom layer(s) {listed} cannot be rebuilt without their code (gruconv never runs code "
                        "from a model file): each cuDNN layer checked alone, fed the inputs it receives in the "
                        "model where the layers before it can be run; the end-to-end check needs "
                        "--custom-objects FILE.py (your Keras 3 classes)")
    layers = _top_layers(doc.model_config)
    plan = _keras3_plan(doc, converted)
    outputs: dict = {}
    for rnn in doc.rnns:
        s = rnn.stack.shape
        bad = rnn.stack.nonfinite_count()
        if bad:
            report.notes.append(f"{rnn.path}: {bad} NaN/Inf weight value(s) in the original; NaN outputs "
                                "at the same places on both sides count as equal")
        x, how = _feed(doc, layers, rnn, outputs, rng, report)
        arrays, legacy = None, converted
        if plan is not None:
            legacy = None
            names = plan.get(rnn.top_layer) if _top_level(rnn) else None
            if names is None:
                report.notes.append(f"{rnn.path}: converted weights rebuilt in memory (a nested layer's object "
                                    "path is not read back here)")
            else:
                from ..keras3.archive import read_weights

                arrays = read_weights(converted, names)
        layer, view = alone_layer(keras, rnn, legacy, arrays=arrays)
        got = check_alone(rnn, layer, view, x.astype(s.dtype), engine, report)
        report.notes.append(f"{rnn.path}: fed {how}")
        out = _model_output(rnn, got)
        if out is not None:
            outputs[rnn.top_layer] = out


def _top_level(rnn) -> bool:
    return "/" not in rnn.path or (rnn.wrapper is not None and rnn.path.count("/") == 1)


def _keras3_plan(doc, converted) -> Optional[dict]:
    """``{top-level layer: [dataset path, ...]}`` when ``converted`` is a Keras 3 file (``.keras`` or
    ``.weights.h5``), in the layer's Keras 3 weights order; None for a legacy-layout ``.h5`` or no file."""
    from ..keras3 import config as keras3_config
    from ..keras3.archive import is_keras3_weights

    if converted is None or Path(converted).is_dir() or not is_keras3_weights(converted):
        return None
    config = keras3_config.translate(doc.model_config)
    _groups, tops = keras3_config.saveable_plan(config)
    return {t.name: [f"{slot.group}/{slot.index}" for slot in t.slots] for t in tops}


def _top_layers(model_config: dict) -> list:
    """``[(name, class, config, source name or None)]`` per top-level layer of a legacy model config: the
    source is the one layer feeding it (a Functional layer's only inbound tensor, a Sequential's previous
    layer); None for a model input or a layer with several inputs (``"*"``)."""
    from ..model.keras_config import walk_layers

    out, prev = [], None
    sequential = model_config.get("class_name") == "Sequential"
    for layer, name, top, _wrapper in walk_layers(model_config):
        if name != top:  # inside a nested model or a wrapper
            continue
        cls = layer.get("class_name")
        conf = layer.get("config") if isinstance(layer.get("config"), dict) else {}
        if sequential:
            source = prev
        else:
            nodes = layer.get("inbound_nodes") or []
            try:
                refs = nodes[0] if len(nodes) == 1 else None
                source = refs[0][0] if refs and len(refs) == 1 else ("*" if refs else None)
            except (TypeError, IndexError, KeyError):
                source = "*"
        out.append((name, cls, conf, source))
        prev = None if cls == "InputLayer" else name
    return out


def _feed(doc, layers: list, rnn, outputs: dict, rng, report) -> tuple:
    """``(x, words)``: what ``rnn`` is fed and how that was chosen (the module docstring's rules)."""
    s = rnn.stack.shape
    shape = (report.batch, report.steps, s.input_size)
    by_name = {name: (cls, conf, source) for name, cls, conf, source in layers}
    random = rng.uniform(-1, 1, shape)
    if not _top_level(rnn) or rnn.top_layer not in by_name:
        return random, "random inputs of its width (it sits inside a nested layer)"
    source = by_name[rnn.top_layer][2]
    while source in by_name and by_name[source][0] in IDENTITY_AT_INFERENCE:
        source = by_name[source][2]
    if source is None or source == "*" or source not in by_name or by_name[source][0] == "InputLayer":
        return random, "random inputs of its width"
    cls, conf, upstream = by_name[source]
    if source in outputs and outputs[source].shape[-1] == s.input_size:
        return outputs[source], f"the output of the converted layer {source!r} (its input in the model)"
    if cls == "Embedding" and (upstream is None or by_name.get(upstream, ("",))[0] == "InputLayer"):
        table = _embedding_rows(doc, source)
        if table is not None and table.ndim == 2 and table.shape[1] == s.input_size and table.shape[0] > 0:
            ids = rng.integers(0, table.shape[0], size=shape[:2])
            return table[ids].astype(np.float64), f"the rows of Embedding {source!r} for random token ids"
    return random, f"random inputs of its width ({source!r}, {cls}, before it is not run here)"


def _embedding_rows(doc, name: str) -> Optional[np.ndarray]:
    """The stored embedding matrix of top-level layer ``name`` (the converted model holds the same
    values: only cuDNN layers are transformed), or None when the file does not hold exactly one.  Read
    from the document's weight store (:class:`gruconv.model.weights.WeightStore`)."""
    with doc.store.open() as store:
        if name not in doc.layer_names:
            return None
        names = store.layer_weights(name)
        if len(names) != 1:
            return None
        return store.weight(name, names[0]).read()


def _model_output(rnn, got: list) -> Optional[np.ndarray]:
    """What the layer gives the next one in the model, from the alone layer's outputs (sequence(s)
    first): only for a top-level layer returning its sequence forward in time with no states."""
    opts = rnn.options
    if not opts["return_sequences"] or opts["return_state"] or opts["go_backwards"] or not _top_level(rnn):
        return None
    if rnn.wrapper is None:
        return np.asarray(got[0], dtype=np.float64)
    if rnn.wrapper == "Bidirectional" and rnn.merge_mode in _MERGE:
        return _MERGE[rnn.merge_mode](np.asarray(got[0], np.float64), np.asarray(got[1], np.float64))
    return None
