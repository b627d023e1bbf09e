"""The original tf.keras 2.x SavedModel, served by TensorFlow on the CPU: verify's second end-to-end reference
for a SavedModel input.

Why: a SavedModel that tf.keras 2.x wrote with ``model.save(dir)`` holds, beside its variables and its
``keras_metadata.pb``, the model's own traced serving function.  Where that function runs on a CPU, it is the
original model exactly as its users serve it today: no config of it is read, no weight of it goes through
gruconv, and the tf_keras reference's legacy-layout weights (:mod:`.keras2`) are not involved.  So its outputs
check the whole conversion at once: the config's translation, the weights' reading from the bundle, their
layout.

When it runs (said in the report otherwise): TensorFlow is importable, and the SavedModel's graph serves on a
CPU: no cuDNN node at all, or each one in a tf.keras GPU-only variant with a standard twin (tf.keras 2's
``GRU``/``LSTM`` layers: Grappler's implementation selector runs the twin on a CPU,
:mod:`gruconv.readers.tfgraph.cudnn`).  A ``CuDNNGRU``/``CuDNNLSTM`` layer calls ``CudnnRNN`` directly, with no
twin, so a SavedModel holding one cannot be served here: the reader decides that (``served_by``: the
directory of a tf.keras SavedModel; ``served_why``: why TensorFlow cannot serve it on a CPU, or None).

How it is fed: the ``serving_default`` signature (tf_keras ``saving/legacy/saved_model/save.py`` writes it for
a model whose call is traced with its input signature) takes the model's inputs keyed by the names of the
config's ``input_layers`` and returns its outputs keyed by the names of its ``output_layers``
(``saving_utils.model_call_inputs``; outputs: ``model.output_names``); a Sequential's are its only input and its
last layer.  The signature's keys are matched to the config in that order; a signature whose keys are not the
config's is not used (a note says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

#: The signature served (tf_keras ``saving/legacy/saved_model/save.py``; TensorFlow's
#: ``signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY``).
from ...model.saved_model import SIGNATURE  # noqa: E402


class Unavailable(Exception):
    """The SavedModel cannot be served here; the message says why (one line)."""


#: Why a document is not checked against a served SavedModel: it is not a SavedModel (no note then).
NOT_NEEDED = "not a SavedModel"


def _names(model_config: dict, key: str) -> Optional[list]:
    """The layer names of a Functional config's ``input_layers``/``output_layers`` (None for a Sequential)."""
    cfg = (model_config or {}).get("config")
    if not isinstance(cfg, dict) or key not in cfg:
        return None
    refs = cfg[key]
    if refs and isinstance(refs[0], str):  # one tensor written flat: [name, node, tensor]
        refs = [refs]
    return [r[0] for r in refs if isinstance(r, (list, tuple)) and r]


def refusal(doc) -> Optional[str]:
    """Why ``doc`` is not checked against its served SavedModel (None: it is), before TensorFlow is imported."""
    if getattr(doc, "served_by", None) is None:
        return NOT_NEEDED
    return getattr(doc, "served_why", None)


class Served:
    """The SavedModel's serving signature, run on the CPU (:func:`build`)."""

    def __init__(self, tf, loaded, inputs: list, outputs: list):
        self.tf, self.loaded, self.inputs, self.outputs = tf, loaded, inputs, outputs
        self.fn = loaded.signatures[SIGNATURE]
        self._saved = None

    def __call__(self, feed: list) -> list:
        specs = self.fn.structured_input_signature[1]
        kw = {k: self.tf.constant(np.asarray(a).astype(specs[k].dtype.as_numpy_dtype)) for k, a in zip(self.inputs, feed)}
        with self.tf.device("/CPU:0"):
            out = self.fn(**kw)
        return [np.asarray(out[k].numpy()) for k in self.outputs]

    def perturbed(self, rng, perturb) -> "Served":
        """Every float variable moved by ``perturb`` (the floor's one-ulp rounding) from the file's values.
        The file's values are kept while the floor is measured (loading the SavedModel again costs seconds
        per run, where tf_keras's ``load_weights`` costs milliseconds: :mod:`.keras2` reloads instead)."""
        if self._saved is None:
            self._saved = [v.numpy() for v in self.loaded.variables]
        self.restore()
        for v in self.loaded.variables:
            a = v.numpy()
            if a.dtype.kind == "f":
                v.assign(perturb(a, rng, dtype=a.dtype))
        return self

    def restore(self) -> None:
        """The file's values again."""
        if self._saved is not None:
            for v, a in zip(self.loaded.variables, self._saved):
                v.assign(a)


def build(doc) -> Served:
    """The served SavedModel of ``doc``; :class:`Unavailable` with the reason when it cannot run here."""
    why = refusal(doc)
    if why is not None:
        raise Unavailable(why)
    from ...tf.runtime import import_quietly

    try:
        tf = import_quietly("tensorflow")
    except ImportError:
        raise Unavailable("TensorFlow is not installed") from None
    path = Path(doc.served_by)
    try:
        with tf.device("/CPU:0"):
            loaded = tf.saved_model.load(str(path))
        fn = loaded.signatures[SIGNATURE]
        got_in = sorted(fn.structured_input_signature[1])
        got_out = sorted(fn.structured_outputs)
    except Exception as e:  # noqa: BLE001  third-party: TensorFlow refusing the SavedModel is a reason
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Unavailable(f"TensorFlow cannot serve it ({type(e).__name__}: {first[:200]})") from None
    inputs = _names(doc.model_config, "input_layers") or got_in
    outputs = _names(doc.model_config, "output_layers") or got_out
    if sorted(inputs) != got_in or sorted(outputs) != got_out:
        raise Unavailable(f"its {SIGNATURE!r} signature takes {got_in} and returns {got_out}, where the config's "
                          f"model has inputs {sorted(inputs)} and outputs {sorted(outputs)}")
    return Served(tf, loaded, inputs, outputs)
