"""Writing what a TF 1.x checkpoint converts to: one output per stack, and ``rest.npz``.

The output format and names are the writers registry's (:mod:`gruconv.writers`): each stack goes
to the chosen writer's ``write_stack`` (``.keras`` model, Keras 3 ``.weights.h5``, legacy ``.h5``
weights); every other tensor to :mod:`gruconv.writers.rest_npz`.  This module plans the targets
(one file, or a directory with one file per stack) and keeps the conversion all or nothing.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import numpy as np

from ... import writers
from ...model.canonical import Subject
from ...errors import OutputError, UsageError
from ...options import ConvertResult, Options
from ...writers import rest_npz
from .names import FORMAT, file_stem
from .reading import CheckpointDoc, cells_text, input_files, require_shape, rnn_entry


def _output_format(output: Path, opts: Options) -> Optional[str]:
    """The writer's name, or None: a directory of ``.keras`` models.  ``--format`` decides, else the
    output's name (:func:`gruconv.writers.claimed_by`; a directory is never claimed); a writer that
    writes one model per stack (``keras``) gets a file only when the name is claimed by it."""
    claimed = None if output.is_dir() else writers.claimed_by(output)
    fmt = opts.format if opts.format is not None or output.is_dir() else claimed
    if fmt is not None and not writers.module(fmt).MANY:
        return fmt
    return fmt if fmt is not None and claimed == fmt else None


def _dir_format(opts: Options) -> str:
    """The writer of a directory output: ``--format`` when it writes one file per stack (``keras``,
    ``onnx``), else ``keras``."""
    return opts.format if opts.format is not None and writers.module(opts.format).MANY else "keras"


def output_format(output: Path, opts: Options) -> str:
    """The writer this conversion uses (a directory of models: ``keras``, or ``--format onnx``)."""
    return _output_format(Path(output), opts) or _dir_format(opts)


def stack_targets(doc: CheckpointDoc, directory: Path, fmt: str) -> list:
    """The file each stack gets in a directory output: its scope made a file name
    (:func:`.names.file_stem`, unique up to case) plus the writer's suffix; the one rule, for
    ``convert`` and for ``verify`` finding what ``convert`` wrote."""
    names, targets = set(), []
    for e in doc.stacks:
        default = f"{e.stack.shape.cell}_stack"
        stem, n = file_stem(e.scope, default), 1
        while stem.lower() in names:
            n += 1
            stem = f"{file_stem(e.scope, default)}_{n}"
        names.add(stem.lower())
        targets.append(Path(directory) / writers.output_name(stem, fmt))
    return targets


def _targets(doc: CheckpointDoc, output: Path, opts: Options) -> tuple:
    """(as_dir, model targets, rest.npz target), every target checked before any work."""
    from ...files.outputs import check_target

    from ...files.outputs import check_outputs as never_an_input

    input = Path(doc.path)
    force = opts.force
    never_an_input([output], input_files(doc.path))  # first: whatever else is wrong, say this
    fmt = _output_format(output, opts)
    as_dir = fmt is None
    if fmt is not None and output.is_dir():
        raise OutputError(f"--format {fmt} writes one file: OUTPUT is a directory", path=output)
    whole = not as_dir and writers.hook(writers.module(fmt), "write_document") is not None
    if not as_dir and len(doc.stacks) > 1 and not whole:
        scopes = ", ".join(repr(e.scope) for e in doc.stacks)
        raise UsageError(f"the checkpoint holds {len(doc.stacks)} {cells_text(doc.stacks)} stacks ({scopes}): "
                         f"pass --rnn SCOPE to "
                         f"convert one into {output.name}, or a directory as OUTPUT for all", path=input)
    if as_dir and output.suffix.lower() in (".h5", ".hdf5", ".npz", ".json"):  # (.h5 here: --format keras)
        raise UsageError(f"a TF1 checkpoint converts to Keras 3 .keras models (or weights: *.h5 legacy layout, "
                         f"*.weights.h5 Keras 3): name OUTPUT *.keras, *.h5, or a directory "
                         f"(got {output.name!r})", path=input)
    if as_dir:
        if output.exists() and not output.is_dir():
            raise OutputError("output exists and is not a directory", path=output)
        parent = output.parent if str(output.parent) else Path(".")
        if not output.exists() and not parent.is_dir():
            raise OutputError(f"output directory {str(parent)!r} does not exist", path=output)
        if output.is_dir() and any(output.iterdir()) and not force:
            raise OutputError("output directory is not empty; pass --force to write into it", path=output)
        targets = stack_targets(doc, output, _dir_format(opts))
        rest_target = output / rest_npz.NAME
    else:
        targets = [output]
        rest_target = None if whole else rest_npz.beside(output)  # a WHOLE writer keeps them inside
        check_target(output, force=force)
        if doc.other_keys and rest_target is not None:
            check_target(rest_target, force=force)
    never_an_input(targets + [rest_target] if rest_target is not None else targets, input_files(doc.path))
    return as_dir, targets, rest_target


def check_outputs(doc: CheckpointDoc, output: Path, opts: Options) -> None:
    """Refuse what this conversion cannot or must not write, before any work is done."""
    if doc.stacks:
        for e in doc.stacks:
            require_shape(e, doc.reader.where)
        _targets(doc, Path(output), opts)


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


def convert(doc: CheckpointDoc, output: Path, opts: Optional[Options] = None) -> ConvertResult:
    """Convert the checkpoint's GRU/LSTM stack(s) into Keras 3 ``.keras`` model(s) plus ``rest.npz``.

    One stack: ``output`` is a ``.keras`` file and the other tensors go to
    ``<output>.rest.npz``.  Several stacks (and no ``rnn``): ``output`` is a
    directory that receives ``<scope with / as __>.keras`` per stack and
    ``rest.npz``.  Everything is written atomically.
    """
    from ...files.outputs import atomic_path
    from ...keras3 import runtime as keras3

    opts = opts or Options()
    force, prefer = opts.force, opts.prefer
    input, output = Path(doc.path), Path(output)
    r = doc.reader
    result = ConvertResult(input=str(input), format=FORMAT)
    result.warnings.extend(doc.warnings)
    if not doc.stacks:
        if doc.possible_buffers:
            cand = ", ".join(f"{p['key']} ({p['size']} {p['dtype']} values)" for p in doc.possible_buffers[:5])
            raise UsageError(f"no cuDNN GRU or LSTM stack identified (no opaque_kernel, no canonical cell "
                             f"tensors); "
                             f"1-D tensors that may be an opaque buffer: {cand}. Pass --variable KEY and "
                             f"shape hints (--num-units, --input-size, --num-layers, --direction, --input-mode)",
                             path=r.where)
        result.nothing_to_convert = True
        return result
    for e in doc.stacks:
        require_shape(e, r.where)

    as_dir, targets, rest_target = _targets(doc, output, opts)

    half = [e.scope for e in doc.stacks if e.stack.shape.dtype in ("float16", "bfloat16")]
    if half:
        result.warnings.append(keras3.LOW_PRECISION_NOTE.format(layers=", ".join(half)))
    for e in doc.stacks:
        cc = e.cross_check
        if cc.status == "disagree":
            used = "opaque buffer" if prefer == "opaque" else "canonical tensors"
            diff = (f"max abs diff {cc.max_abs_diff:.6g} at {cc.where}" if cc.max_abs_diff is not None
                    else cc.detail)
            result.warnings.append(
                f"{e.scope}: opaque buffer {e.opaque_key!r} disagrees with the canonical tensors ({diff}); "
                f"it is not in cuDNN 9.19 layout. Weights taken from the {used}")
        if e.slots:
            result.warnings.append(
                f"{e.scope}: optimizer slots of the opaque buffer dropped (they follow the cuDNN layout; the "
                f"converted model starts with a fresh optimizer): {', '.join(e.slots)}")

    created = False
    if as_dir and not output.exists():
        try:
            output.mkdir()
        except OSError as err:
            raise OutputError(f"cannot create output directory ({err.strerror or err})", path=output) from None
        created = True
    try:
        document = doc.document()
        writer = writers.module(_output_format(output, opts) or _dir_format(opts))
        if rest_target is None:  # a WHOLE writer: every stack and the other tensors in one file
            named = [(e, e.scope or f"{e.stack.shape.cell}_stack") for e in doc.stacks]
            with atomic_path(output, force=force, suffix=writer.SUFFIX) as tmp:
                writer.write_document(document, named, tmp, opts, result.warnings)
            r.release()
            result.outputs.append(str(output))
            result.rnns.extend(dict(rnn_entry(e), output=str(output), converts_to=writer.describe(e.shape)["target"])
                               for e in doc.stacks)
            return result
        for e, target in zip(doc.stacks, targets):
            name = e.scope or f"{e.stack.shape.cell}_stack"
            with atomic_path(target, force=True if as_dir else force, suffix=writer.SUFFIX) as tmp:
                writer.write_stack(document, e, tmp, opts, name)
            r.release()
            result.outputs.append(str(target))
            result.rnns.append(dict(rnn_entry(e), output=str(target)))
            if writers.hook(writer, "describe"):  # a non-Keras target says what it made
                result.rnns[-1]["converts_to"] = writer.describe(e.shape)["target"]
        if doc.other_keys:
            rest_npz.write(document, rest_target, True if as_dir else force, result.warnings)
            result.outputs.append(str(rest_target))
    except BaseException:
        # All or nothing: a model placed before a later output (rest.npz) failed is removed again.
        for f in result.outputs:
            with contextlib.suppress(OSError):
                Path(f).unlink()
        if created:  # leave no half-filled directory behind
            with contextlib.suppress(OSError):
                output.rmdir()
        raise
    return result
