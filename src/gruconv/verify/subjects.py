"""What ``verify`` checks of a document, decided here from what the document holds.

A reader states what its document holds (``doc.content``, a :data:`gruconv.model.canonical.CONTENTS`
kind) and reads; which checks that calls for, and the converted models they compare against, are
decided by :data:`CHECKS`, keyed by that kind:

``graph`` / ``weights``
    the whole converted model with the document's Keras graph (:func:`graph_subjects`); weights
    without an architecture (or custom layers Keras cannot rebuild) each layer alone;
``stacks``
    every bare stack with the opaque buffer the original ran (:func:`stack_subjects`), its converted
    model built in memory (:func:`stack_models`) or loaded from what ``convert`` wrote;
``final``
    a Keras 3 file (or a graph that already serves on a CPU): nothing to verify, a usage error before
    Keras is imported;
``tf-graph``
    a graph holding cuDNN ops: each cuDNN RNN node as a bare stack, its replacement function run by
    TensorFlow (:func:`tf_graph_subjects`);
``refused``
    an input ``convert`` refuses (a graph node it cannot replace): the same one-line refusal, before Keras.

Converted files are loaded through the writers (:func:`gruconv.writers.load`,
:func:`gruconv.writers.stack_runners`); no format is named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .. import writers
from ..errors import InputError, UsageError
from ..model.canonical import InputFacts, Subject
from ..options import Options
from ..writers import planning


@dataclass(frozen=True)
class Checks:
    """One row of :data:`CHECKS`: ``nothing(doc)`` is verify's note when there is nothing to check
    (None otherwise; it may raise the one-line refusal), ``subjects(doc, converted, options)`` yields
    each :class:`~gruconv.model.canonical.Subject`; ``early``: ``nothing`` is asked before Keras and
    its backend are imported (seconds), for a document that never has anything to check; ``after(doc,
    converted, engine, report, rng)``, where set, checks the whole after its subjects (a graph's
    conversions against the original graph: :func:`gruconv.verify.tfgraph.end_to_end`)."""

    nothing: Callable
    subjects: Callable
    early: bool = False
    after: Optional[Callable] = None


def nothing_to_verify(doc) -> Optional[str]:
    """``verify``'s note when ``doc`` holds nothing to check, else None (:data:`CHECKS`)."""
    return _checks(doc).nothing(doc)


def refuse_early(doc) -> None:
    """The refusal of a document that never has anything to check, before Keras is imported."""
    if _checks(doc).early:
        _checks(doc).nothing(doc)


def checks_after(doc) -> Optional[Callable]:
    """The whole-input check run after the subjects, or None (:attr:`Checks.after`)."""
    return _checks(doc).after


def _tf_graph_after(doc, converted, engine, report, rng) -> None:
    from .tfgraph import end_to_end

    if _converted_stacks(converted):
        report.notes.append("end to end: not checked, the converted stacks are checked one by one above (the graph's "
                            "other ops are not in them)")
        return
    end_to_end(doc, converted, engine, report, rng)


def verify_subjects(doc, converted, opts: Options):
    """What ``verify`` checks of ``doc`` against ``converted`` (None: the conversion, built in memory)."""
    return _checks(doc).subjects(doc, converted, opts)


def _checks(doc) -> Checks:
    return CHECKS[doc.content]  # every CONTENTS kind has a row (tests/test_structure.py)


# --------------------------------------------------------------------------- a Keras graph

def _graph_nothing(doc) -> Optional[str]:
    """Nothing to check without a cuDNN layer, unless the original is a tf.keras 2.x SavedModel TensorFlow
    serves (``served_by``): its conversion is checked end to end against it."""
    if doc.rnns or getattr(doc, "served_by", None) is not None and getattr(doc, "served_why", None) is None:
        return None
    return "nothing to convert: no CuDNNGRU or CuDNNLSTM layers"


def graph_subjects(doc, converted, opts: Options):
    """The whole converted model with this file's graph (its recurrent layers are ``doc.rnns``).
    Without ``converted``, the model ``convert`` would save, built by the same code but not saved and
    re-loaded (a float16 ``.keras`` does not load on the torch backend: Keras's Orthogonal initializer
    has no QR for Half); else what the writer its name claims loads (:func:`gruconv.writers.load`),
    weights into the rebuilt architecture."""
    from ..keras3.builtins import custom_classes

    if converted is not None and not Path(converted).exists():
        raise InputError("converted model not found", path=converted)
    whole = writers.model_runner(Path(converted)) if converted is not None else None
    runners = writers.stack_runners(Path(converted)) if converted is not None and whole is None else None
    if runners is not None:  # torch / onnx: every cuDNN RNN checked as a bare stack, run by the target
        from .runners import matching_runner

        for rnn in doc.rnns:
            runner = matching_runner(runners, rnn.stack, only=len(doc.rnns) == 1, path=Path(converted))
            yield Subject(name=rnn.path, model=runner, stack=rnn.stack)
        return
    if doc.model_config is None:  # weights-only, no --config: verify checks each layer alone
        yield Subject(name=str(doc.path), model=None, graph=doc)
        return
    custom = custom_classes(doc.model_config)
    if custom and opts.custom_objects is None:  # Keras cannot rebuild it: each layer alone
        yield Subject(name=str(doc.path), model=None, graph=doc)
        return
    from ..keras3 import runtime as keras3

    objects = keras3.custom_objects_from(opts.custom_objects, custom) if custom else None
    if converted is None or whole is not None:  # verify builds what convert writes (writers.keras_route.built)
        # (a file run whole by its runtime, a .tflite or an OpenVINO IR: checked end to end beside that model)
        yield Subject(name=str(doc.path), model=None, graph=doc, in_memory=True, custom_objects=objects, whole=whole)
        return

    def rebuild():  # the converted architecture (weights are loaded into it): the one translation
        from ..keras3 import config as keras3_config

        return keras3.from_config(keras3_config.translate(doc.model_config, outside=keras3_config.CARRY))

    with keras3.custom_scope(objects):
        model = writers.load(Path(converted), rebuild)
    yield Subject(name=str(doc.path), model=model, graph=doc)


# --------------------------------------------------------------------------- bare stacks

def _stacks_nothing(doc) -> Optional[str]:
    """A 1-D tensor that may be an opaque buffer is a usage error naming it (the user passes hints)."""
    if doc.stacks:
        return None
    if doc.possible_buffers:
        keys = ", ".join(b["key"] for b in doc.possible_buffers[:5])
        raise UsageError(f"no cuDNN GRU or LSTM found by name; possible opaque buffers: {keys} "
                         "(pass --variable KEY and shape hints)", path=Path(doc.path))
    return "nothing to convert: no cuDNN GRU or LSTM stacks"


def stack_models(doc, opts: Optional[Options] = None) -> list:
    """``[(stack entry, model)]``: each bare stack of ``doc`` as the Keras 3 model ``convert`` saves, in
    memory.  Built with every optional input and output (initial states, final states) so
    verification can drive them all; ``convert`` adds only what was asked."""
    from ..keras3.build import build_stack_model
    from ..keras3.config import stack_model_config

    out = []
    for e in doc.stacks:
        doc.require_shape(e)
        config = stack_model_config(e.stack.shape, e.scope or e.stack.name, initial_state=True, return_state=True)
        out.append((e, build_stack_model(e.stack, config)))
    return out


def stack_targets(doc, directory: Path, fmt: str) -> list:
    """The file each stack got in a directory output (:func:`gruconv.writers.planning.stack_targets`,
    the rule ``convert`` followed)."""
    return planning.stack_targets([e.scope for e in doc.stacks], [e.stack.shape.cell for e in doc.stacks],
                                  directory, fmt)


def stack_subjects(doc, converted, opts: Options):
    """Every stack, with the opaque buffer the original ran (when stored and of the stack's size) and
    its converted model: built in memory with every optional input and output (:func:`stack_models`),
    or what ``convert`` wrote (a directory: the file :func:`stack_targets` names; loaded by the
    writer the name claims, :func:`gruconv.writers.load`)."""
    from ..keras3 import runtime as keras3

    built = dict((id(e), m) for e, m in stack_models(doc, opts)) if converted is None else {}
    targets = {}
    if converted is not None and Path(converted).is_dir():
        targets = dict(zip((id(e) for e in doc.stacks), stack_targets(doc, Path(converted),
                                                                       _written_format(doc, Path(converted)))))
    whole = writers.stack_runners(converted) if converted is not None and not targets else None
    for found in doc.stacks:
        # a torch/onnx output runs its stacks itself (writers.stack_runners); a Keras one is loaded
        runners = whole if whole is not None or not targets else writers.stack_runners(targets[id(found)])
        extra: list = []
        if converted is None:
            model = built.pop(id(found))
        elif runners is not None:
            from .runners import matching_runner

            model = matching_runner(runners, found.stack, only=len(doc.stacks) == 1 or bool(targets),
                                    path=converted)
            # the same stack in another runtime (a micro .tflite: TFLM), checked after it
            extra = [(k, matching_runner({k: runners[k]}, found.stack, only=True, path=converted))
                     for k in runners if k.startswith(f"{model.name} (")]
        else:
            def rebuild(e=found):  # the architecture the weights are loaded into
                from ..keras3.config import stack_model_config

                return keras3.from_config(stack_model_config(
                    e.stack.shape, e.scope or f"{e.stack.shape.cell}_stack", initial_state=opts.initial_state,
                    return_state=opts.return_state, mask_input=opts.mask_input))

            model = writers.load(targets.get(id(found), Path(converted)), rebuild)
        yield Subject(name=found.scope, model=model, stack=found.stack, opaque=_opaque(doc, found))
        for key, other in extra:
            import dataclasses

            yield Subject(name=key, model=other, stack=dataclasses.replace(found.stack, name=key),
                          opaque=_opaque(doc, found))


def _opaque(doc, found):
    """The opaque buffer the original ran, when stored and of the stack's size."""
    from ..model.cudnn_layout import params_size

    buf = doc.opaque_buffer(found)
    if buf is not None and buf.size == params_size(found.stack.shape):
        return buf.astype(found.stack.shape.dtype, copy=False)
    return None


def _written_format(doc, directory: Path) -> str:
    """The writer whose files a directory output holds: the first writing one file per stack whose
    names (:func:`stack_targets`) are all there (the natural one when none is complete)."""
    for name in writers.WRITERS:
        if writers.module(name).MANY and all(p.is_file() for p in stack_targets(doc, directory, name)):
            return name
    return planning.natural_format(InputFacts("stacks"))


# --------------------------------------------------------------------------- already final

def _final_nothing(doc) -> Optional[str]:
    """``verify`` of a Keras 3 file is a usage error (exit 2): there is no cuDNN-era original to
    compare it with."""
    raise UsageError(f"{doc.document().reason}, so nothing to verify (gruconv verify checks a CuDNNGRU/CuDNNLSTM "
                     "or TF1 cudnn_rnn input against its conversion: gruconv verify OLD.h5 NEW.keras); "
                     "`gruconv inspect` says whether it runs on cuDNN", path=doc.path)


def _final_subjects(doc, converted, opts: Options):
    _final_nothing(doc)
    return iter(())


# --------------------------------------------------------------------------- refused

def _refused_nothing(doc) -> Optional[str]:
    """``verify`` of an input ``convert`` refuses is that refusal (exit 3), never "nothing to verify"."""
    raise doc.document().refusal


def _refused_subjects(doc, converted, opts: Options):
    _refused_nothing(doc)
    return iter(())


# --------------------------------------------------------------------------- a TensorFlow graph

def _tf_graph_nothing(doc) -> Optional[str]:
    return None  # every cuDNN node is a subject


#: Seed of the weights each graph node is checked with.
TF_GRAPH_SEED = 3939


def _converted_stacks(converted) -> bool:
    """Whether ``converted`` is a graph's cuDNN node stacks alone (a ``.keras``/``.safetensors``/weights file,
    or a directory of them), not the whole graph (a SavedModel directory, a ``.onnx`` file)."""
    from ..model.saved_model import SAVED_MODEL_FILES

    if converted is None:
        return False
    p = Path(converted)
    return not (any((p / n).is_file() for n in SAVED_MODEL_FILES) if p.is_dir() else p.suffix.lower() == ".onnx")


def tf_graph_subjects(doc, converted, opts: Options):
    """Every cuDNN RNN node of a graph, as a bare stack: its replacement (the function the converted
    SavedModel's node calls, the ``saved-model`` writer's ``node_runner`` hook, :mod:`gruconv.tf.node_runner`; without ``converted``, traced the
    way ``convert`` traces it) run by TensorFlow on the CPU, against the reference, on seeded weights of
    the node's shape (uniform in [-0.5, 0.5]: the graph's own ``params`` tensor reaches the replacement
    unchanged, so what is checked is the replacement's function of any buffer of that layout)."""
    from ..model.canonical import RNNStack
    from ..model.cudnn_layout import params_size, unpack

    if _converted_stacks(converted):  # each stack on the graph's own params (the reader's ``as_stacks``)
        yield from stack_subjects(doc.document().as_stacks(), converted, opts)
        return
    writer = writers.offering(doc.content, "node_runner")  # the writer of the graph whole, its ``node_runner``
    rng = np.random.default_rng(TF_GRAPH_SEED)
    for r in doc.document().tf_graph.rnns:
        if r.shape is None:  # a packing node: it feeds one of the nodes checked here
            continue
        buf = rng.uniform(-0.5, 0.5, params_size(r.shape)).astype(r.shape.dtype)
        model = writer.node_runner(r, converted if converted is not None and Path(converted).is_dir() else None, buf)
        yield Subject(name=r.name, model=model, stack=RNNStack(r.name, r.shape, unpack(buf, r.shape)), opaque=buf)


#: What ``verify`` checks, by what the document holds (:data:`gruconv.model.canonical.CONTENTS`).
CHECKS = {
    "graph": Checks(_graph_nothing, graph_subjects),
    "weights": Checks(_graph_nothing, graph_subjects),
    "stacks": Checks(_stacks_nothing, stack_subjects),
    "final": Checks(_final_nothing, _final_subjects, early=True),
    "tf-graph": Checks(_tf_graph_nothing, tf_graph_subjects, after=_tf_graph_after),
    "refused": Checks(_refused_nothing, _refused_subjects, early=True),
}
