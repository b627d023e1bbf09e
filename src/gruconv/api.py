"""The Python API: every CLI command is one function here (the CLI only parses and prints).

>>> from gruconv import api
>>> api.inspect("fixtures/keras/sequential.h5")["rnns"][0]["shape"]["units"]   # doctest: +SKIP
>>> api.convert("in.h5", "out.keras")                                          # doctest: +SKIP

Each function detects the input's format and hands it to that format's reader
(:mod:`gruconv.readers`), which reads it into the canonical model; ``convert`` then plans the
outputs (:mod:`gruconv.writers.planning`) and drives the writers inside one output transaction
(:class:`gruconv.files.outputs.Outputs`).  This module knows no format.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Optional

from . import readers, run_options
from .files.inputs import reading_once
from .options import Bounds, ConvertResult, Options

__all__ = ["inspect", "convert", "write", "verify", "check_not_inputs", "ConvertResult", "Options"]


@reading_once
def inspect(path, options=None, **kw) -> dict:
    """Describe every cuDNN RNN in a file, and what ``convert`` would produce; for a file with a Keras
    architecture, also whether each recurrent layer runs on cuDNN (``cudnn_eligibility``,
    :mod:`gruconv.eligibility`).  No TensorFlow/Keras."""
    opts = Options.of(options, **kw)
    module = readers.module(readers.detect(path))
    run_options.refuse_unread(opts, run_options.accepted_options(module.FORMAT, ()), module.DESCRIPTION)
    doc = module.read(Path(path), opts)
    info = module.inspect(doc)
    if "cudnn_eligibility" not in info:  # a Keras graph read by another reader
        from .eligibility import for_document

        report = for_document(doc)
        if report is not None:
            info["cudnn_eligibility"] = report
    refused = _translation_refusal(doc)
    if refused is not None and not info.get("refused"):
        info["refused"] = refused
        info.setdefault("details", []).append(f"gruconv convert refuses it: {refused}")
    _add_targets(info)
    _add_profiles(info, doc)
    return info


def _add_profiles(info: dict, doc) -> None:
    """``edge_profiles``: per writer with profiles (``.tflite``), which this input can take and why not
    (:func:`gruconv.writers.profiles`); nothing for an input with nothing to convert."""
    from . import writers
    from .errors import GruconvError

    if info.get("refused"):  # convert refuses it: no profile to offer
        return
    try:
        document = doc.document() if hasattr(doc, "document") else doc
        if document.nothing or document.refusal is not None:
            return
        found = writers.profiles(document)
    except GruconvError:
        return
    if found:
        info["edge_profiles"] = found


def _translation_refusal(doc) -> Optional[str]:
    """The message ``convert`` refuses a Keras graph with before writing anything, when the one translation
    (:func:`gruconv.keras3.config.translate`, pure JSON) refuses what the file means, for a model using a Keras 2
    function whose meaning changed (:mod:`gruconv.keras3.dialects`): inspect says it first, in the same words."""
    from .errors import InputError, UnsupportedError
    from .keras3 import config as keras3_config
    from .keras3 import dialects

    config, rnns = getattr(doc, "model_config", None), getattr(doc, "rnns", None)
    if not isinstance(config, dict) or not rnns or not dialects.mentions_changed_function(config):
        return None  # the refusals inspect can foresee cheaply: Keras 2 functions Keras 3 has no equal of

    try:
        keras3_config.translate(config, outside=keras3_config.CARRY)
    except InputError as e:
        return e.message
    except UnsupportedError:  # the streaming writer's limits: the Keras-built route may still write it
        return None
    return None


def _add_targets(info: dict) -> None:
    """Per RNN, ``targets``: what each writer that describes stacks (torch, onnx) makes of it
    (:func:`gruconv.writers.targets`)."""
    from . import writers
    from .model.canonical import StackShape

    for r in info.get("rnns", []):
        if r.get("shape"):
            r["targets"] = {fmt: d["target"] + (f" ({d['note']})" if d["note"] else "")
                            for fmt, d in writers.targets(StackShape(**r["shape"])).items()}


@reading_once
def convert(input, output, options=None, *, verify: bool = False, bounds: Optional[Bounds] = None, batch: int = 2,
            steps: int = 8, seed: int = 0, int8_tolerance: Optional[float] = None, **kw) -> ConvertResult:
    """Convert one input into a Keras 3 model (``.keras``) or a weights file (``.h5``).

    read -> plan (:func:`gruconv.writers.planning.plan`: format, file or directory, targets,
    refusals, decided once) -> one output transaction (:class:`gruconv.files.outputs.Outputs`) ->
    each target to its writer's ``write`` -> with ``verify``, verify the staged files.

    Raises a :class:`~gruconv.errors.GruconvError` for anything the user can
    fix and writes nothing unless the whole conversion succeeds.  With
    ``verify`` the outputs are written to a private staging directory beside
    ``output``, verified there, and moved into place only when parity holds:
    a failed check leaves no file behind (the report says why).  ``bounds``
    (:class:`gruconv.options.Bounds`; None: the defaults), ``batch``, ``steps`` and ``seed`` are
    :func:`gruconv.verify.verify`'s.
    """
    from .files.outputs import Outputs
    from .writers.planning import plan

    opts = Options.of(options, **kw)
    input, output = Path(input), Path(output)
    module = readers.module(run_options.reader_for(input, output, opts))
    refuse_unread(module, output, opts)
    document = module.read(input, opts).document()
    outputs = Outputs(force=opts.force)
    planned = plan(document, output, opts)
    if planned.route == "tf-graph-stacks":  # a graph's cuDNN nodes as bare stacks: their params evaluated
        document = document.as_stacks().document()
        planned = plan(document, output, opts)
    if not verify:
        return write(document, planned, outputs, opts)
    from .verify import verify as _verify

    with outputs.staged(output) as td:
        staged = Path(td) / output.name
        # --verify implies --check-load (a writer that reads no such option ignores it)
        staged_opts = dataclasses.replace(opts, force=True, check_load=True)
        result = write(document, plan(document, staged, staged_opts), Outputs(force=True), staged_opts)
        if result.nothing_to_convert and not result.outputs:
            return result
        report = _verify(input, staged, bounds=bounds, batch=batch, steps=steps, seed=seed, options=opts,
                         int8_tolerance=int8_tolerance)
        result.verification = report.to_json()
        if not report.passed:
            result.outputs = []
            return result
        result.outputs = outputs.promote(staged, output, result.outputs)
    return result


def write(document, planned, outputs, opts: Options) -> ConvertResult:
    """Write what ``planned`` says (:class:`gruconv.writers.planning.Plan`) inside the transaction
    ``outputs`` (all or nothing), each target through its writer's one ``write`` verb, and report it."""
    from . import writers
    from .writers import rest_npz

    result = ConvertResult(input=document.source, format=document.reader)
    result.warnings.extend(document.warnings)
    if planned.route == "nothing":
        result.nothing_to_convert, result.reason = True, planned.reason
        return result
    result.nothing_to_convert = document.nothing
    result.warnings.extend(document.notes)
    writer = planned.writer
    describe = writers.hook(writer, "describe")
    with outputs.writing():
        if planned.directory is not None:
            outputs.directory(planned.directory)
        for t in planned.targets:
            t.warnings = result.warnings
            place = (outputs.tree(t.path, force=t.force) if t.kind in writers.DIRECTORY_KINDS
                     else outputs.file(t.path, force=t.force, suffix=writer.SUFFIX))
            with contextlib.ExitStack() as beside:  # files its writer writes beside it, placed with it
                t.beside = {p: beside.enter_context(outputs.file(p, force=t.force, suffix=p.suffix))
                            for p in writers.beside(planned.format, t.path)}
                with place as tmp:
                    t.tmp = tmp
                    nonfinite = writer.write(document, t, opts)
            document.drop()
            result.outputs.append(str(t.path))
            result.outputs.extend(str(p) for p in t.beside)
            if t.kind == "graph":
                for i, name in enumerate(document.names):
                    bad = nonfinite.get(name, 0)
                    result.rnns.append(document.row(i, bad))
                    if describe:  # a non-Keras target says what it made
                        result.rnns[-1]["converts_to"] = describe(document.stacks[i].shape)["target"]
                    if bad:
                        result.warnings.append(f"{name}: {bad} NaN/Inf weight value(s) carried over unchanged")
            elif t.kind in ("tf-graph", "tf-graph-file"):  # the graph's cuDNN nodes, as the reader describes them
                rows = [document.row(i, 0) for i in range(len(document.names))]
                shapes = [r.shape for r in document.tf_graph.rnns if r.shape is not None]
                if describe and len(shapes) == len(rows):  # a non-TensorFlow target says what it made
                    for row, shape in zip(rows, shapes):
                        row["converts_to"] = describe(shape)["target"]
                result.rnns.extend(rows)
            elif t.kind == "document":
                result.rnns.extend(dict(document.row(i), output=str(t.path), converts_to=describe(s.shape)["target"])
                                   for i, s in enumerate(document.stacks))
            else:  # one stack, or one RNN of a graph
                result.rnns.append(dict(document.row(i=t.stack), output=str(t.path)))
                if describe:
                    result.rnns[-1]["converts_to"] = describe(document.stacks[t.stack].shape)["target"]
        if planned.rest is not None:
            with outputs.file(planned.rest, force=planned.directory is not None or opts.force, suffix=".npz") as tmp:
                rest_npz.write(document, tmp, result.warnings)
            result.outputs.append(str(planned.rest))
    if result.outputs:
        result.warnings.extend(document.closing)
    return result


def refuse_unread(module, output: Path, opts: Options) -> None:
    """Refuse (exit 2, one line naming the target) every given option that neither this input's reader nor the
    writer of the target kind it will write reads (:func:`gruconv.writers.planning.written_as`,
    :func:`gruconv.run_options.accepted_options`); an output name that tells no writer is left for the
    conversion to report (only the reader's options count then)."""
    from .writers.planning import written_as

    written = {w for w in (written_as(c, output, opts) for c in module.CONTENTS) if w[0] is not None}
    what = module.DESCRIPTION
    if written:
        what += " converted to " + " or ".join(dict.fromkeys(run_options.target_words(f, k, output)
                                                             for f, k in sorted(written)))
    run_options.refuse_unread(opts, run_options.accepted_options(module.FORMAT, written=written), what)


def verify(input, converted=None, options=None, **kw):
    """:func:`gruconv.verify.verify` (kept here so the API mirrors the CLI)."""
    from .verify import verify as _verify

    return _verify(input, converted, options=options, **kw)


def check_not_inputs(outputs, input, *others) -> None:
    """Refuse, before any work, a report path (``--json``, ``--report``) that is a file the command
    reads: every file of ``input`` (as its format lists them) and each of ``others`` (converted model,
    ``--config``, ``--inputs``; None skipped)."""
    from .errors import GruconvError
    from .files.outputs import check_outputs

    files = [Path(input)]
    try:
        files += readers.module(readers.detect(input)).input_files(Path(input))
    except GruconvError:
        pass  # the command itself reports an unreadable input
    for o in others:
        if o is None or isinstance(o, dict):
            continue
        o = Path(o)
        files.append(o)
        if o.is_dir():
            files += [p for p in o.iterdir() if p.is_file()]
    check_outputs([Path(p) for p in outputs], files)
