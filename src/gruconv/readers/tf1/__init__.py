"""TensorFlow 1.x ``tf.contrib.cudnn_rnn`` checkpoints (GRU and LSTM): the ``tf1-checkpoint`` format.

The registry verbs (:mod:`gruconv.readers`) over four modules:

:mod:`.names`
    key patterns, name styles (TF 1.3 / 1.4 / 1.5+), layer scopes;
:mod:`.cells`
    ONE table per cell of the canonical tensors TF saved (name, shape as a
    function of ``(in, H)``, blocks <-> :class:`gruconv.model.canonical.GateParams`),
    used by shape detection, reading and the cross-check;
:mod:`.reading`
    find the stacks, read, cross-check the opaque buffer against the
    canonical tensors, solve opaque-only shapes, inspect (no TensorFlow,
    no Keras).

Writing is the writers' (:mod:`gruconv.writers`): what a conversion writes is planned by
:mod:`gruconv.writers.planning` from the document's plan facts (:meth:`CheckpointDoc.document`) and
the input's facts (:func:`input_facts`); what ``verify`` checks (every stack, its stored opaque
buffer, its converted model) is decided by :mod:`gruconv.verify.subjects`.
"""

from __future__ import annotations

from .names import FORMAT
from .reading import CheckpointDoc, CheckpointStack, CrossCheck, input_facts, input_files, inspect, read, sniff

#: What this reader reads, for messages.
DESCRIPTION = "a TensorFlow checkpoint"
#: The :class:`gruconv.options.Options` fields this reader reads (which stack, which stored form,
#: the opaque buffer's shape hints); any other given one is refused unless the writer reads it.
OPTIONS = frozenset({"rnn", "prefer", "hints"})
#: What its documents hold (:data:`gruconv.model.canonical.CONTENTS`): bare stacks (the writer builds each
#: model's interface: initial states, ...).
CONTENTS = ("stacks",)
#: Input name endings (a checkpoint is named by its prefix: none).
SUFFIXES = ()


def input_prefix(path):
    """Batch mode's "what is one input here": a checkpoint directory, prefix or any of its files is
    the one input named by its prefix (:func:`gruconv.readers.tfbundle.resolve_prefix`; a
    :class:`~gruconv.errors.GruconvError` when it cannot be resolved)."""
    from ..tfbundle import resolve_prefix

    return resolve_prefix(path)


__all__ = ["DESCRIPTION", "OPTIONS", "CONTENTS", "SUFFIXES", "input_prefix", "FORMAT", "sniff", "read", "inspect",
           "input_facts", "input_files", "CheckpointDoc", "CheckpointStack", "CrossCheck"]
