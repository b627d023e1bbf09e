"""What ``verify`` checks of a TF 1.x checkpoint: every stack, with the opaque buffer the original ran.

The converted model of each stack is built in memory (:func:`to_keras`), or loaded from what
``convert`` wrote: one file, or a directory whose files are named by
:func:`gruconv.writers.planning.stack_targets` (the rule ``convert`` followed).  Writing is the
writers' (:mod:`gruconv.writers`), planned by :mod:`gruconv.writers.planning` from the document's plan
facts (:meth:`.reading.CheckpointDoc.document`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ... import writers
from ...model.canonical import Subject
from ...errors import UsageError
from ...options import Options
from ...writers.planning import stack_targets as _planned_targets
from .reading import CheckpointDoc, require_shape


def stack_targets(doc: CheckpointDoc, directory: Path, fmt: str) -> list:
    """The file each stack got in a directory output (:func:`gruconv.writers.planning.stack_targets`)."""
    return _planned_targets([e.scope for e in doc.stacks], [e.stack.shape.cell for e in doc.stacks], directory, fmt)


def to_keras(doc: CheckpointDoc, opts: Optional[Options] = None) -> list:
    """``[(stack entry, model)]``: each stack as the Keras 3 model ``convert`` saves, in memory.

    Built with every optional input and output (initial states, final states)
    so verification can drive them all; ``convert`` adds only what was asked."""
    from ...keras3.build import build_stack_model
    from ...keras3.config import stack_model_config

    out = []
    for e in doc.stacks:
        require_shape(e, doc.reader.where)
        config = stack_model_config(e.stack.shape, e.scope or e.stack.name, initial_state=True, return_state=True)
        out.append((e, build_stack_model(e.stack, config)))
    return out


def nothing_to_verify(doc: CheckpointDoc) -> Optional[str]:
    """``verify``'s note when the checkpoint holds nothing to check, else None; a 1-D tensor that may
    be an opaque buffer is a usage error naming it (the user passes hints)."""
    if doc.stacks:
        return None
    if doc.possible_buffers:
        keys = ", ".join(b["key"] for b in doc.possible_buffers[:5])
        raise UsageError(f"no cuDNN GRU or LSTM found by name; possible opaque buffers: {keys} "
                         "(pass --variable KEY and shape hints)", path=Path(doc.path))
    return "nothing to convert: no cuDNN GRU or LSTM stacks"


def verify_subjects(doc: CheckpointDoc, converted, opts: Options):
    """What ``verify`` checks: every stack, with the opaque buffer the original ran (when stored and
    of the stack's size) and its converted model: built in memory with every optional input and
    output (:func:`to_keras`), or what ``convert`` wrote (a directory: the file
    :func:`stack_targets` names; loaded by the writer the name claims, :func:`gruconv.writers.load`)."""
    from ...model.cudnn_layout import params_size
    from ...keras3 import runtime as keras3

    built = dict((id(e), m) for e, m in to_keras(doc, opts)) if converted is None else {}
    targets = {}
    if converted is not None and Path(converted).is_dir():
        targets = dict(zip((id(e) for e in doc.stacks), stack_targets(doc, Path(converted),
                                                                       _written_format(doc, Path(converted)))))
    whole = writers.stack_runners(converted) if converted is not None and not targets else None
    for found in doc.stacks:
        # a torch/onnx output runs its stacks itself (writers.stack_runners); a Keras one is loaded
        runners = whole if whole is not None or not targets else writers.stack_runners(targets[id(found)])
        if converted is None:
            model = built.pop(id(found))
        elif runners is not None:
            from ...verify.runners import matching_runner

            model = matching_runner(runners, found.stack, only=len(doc.stacks) == 1 or bool(targets),
                                    path=converted)
        else:
            def rebuild(e=found):  # the architecture the weights are loaded into
                from ...keras3.config import stack_model_config

                return keras3.from_config(stack_model_config(
                    e.stack.shape, e.scope or f"{e.stack.shape.cell}_stack", initial_state=opts.initial_state,
                    return_state=opts.return_state, mask_input=opts.mask_input))

            model = writers.load(targets.get(id(found), Path(converted)), rebuild)
        opaque = None
        if found.opaque_key:
            buf = np.array(doc.reader.view(found.opaque_key))
            doc.reader.release()
            if buf.size == params_size(found.stack.shape):
                opaque = buf.astype(found.stack.shape.dtype, copy=False)
        yield Subject(name=found.scope, model=model, stack=found.stack, opaque=opaque)


def _written_format(doc: CheckpointDoc, directory: Path) -> str:
    """The writer whose files a directory output holds: the first writing one file per stack whose
    names (:func:`stack_targets`) are all there (``keras`` when none is complete)."""
    for name in writers.WRITERS:
        if writers.module(name).MANY and all(p.is_file() for p in stack_targets(doc, directory, name)):
            return name
    return "keras"
