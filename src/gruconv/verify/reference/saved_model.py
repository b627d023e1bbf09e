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
    """The SavedModel's serving signature, run on the CPU in a child process within the document's budget
    (:func:`gruconv.tf.served.served_outputs` under :func:`gruconv.tf.bounded.run`: the signature is the user's
    program, which may loop or allocate without end).  One child per feed: the outputs and, while the
    SavedModel is loaded there, the floor's perturbed runs (:func:`gruconv.verify.floor.runs`, handed in)."""

    def __init__(self, doc, path: Path):
        self.doc, self.path = doc, path
        self._floor_runs = None

    def __call__(self, feed: list) -> list:
        from ...tf.bounded import run
        from ...tf.served import served_outputs
        from ..floor import runs

        why, reference, floors = run(served_outputs, self.path, SIGNATURE,
                                     _names(self.doc.model_config, "input_layers"),
                                     _names(self.doc.model_config, "output_layers"), list(feed), runs,
                                     budget=getattr(self.doc, "budget", None), path=Path(self.doc.path),
                                     doing="on verify's inputs", reuse=True)
        if why is not None:
            raise Unavailable(why)
        self._floor_runs = floors
        return reference

    def floor_runs(self, feed: list) -> list:
        """The outputs under the floor's perturbations (:func:`gruconv.verify.floor.runs`), computed with the
        reference by :meth:`__call__` on this ``feed``."""
        return self._floor_runs


def build(doc) -> Served:
    """The served SavedModel of ``doc``; :class:`Unavailable` with the reason when it cannot run here (said when
    it is first called: the SavedModel is loaded only in the child that runs it)."""
    why = refusal(doc)
    if why is not None:
        raise Unavailable(why)
    return Served(doc, Path(doc.served_by))
