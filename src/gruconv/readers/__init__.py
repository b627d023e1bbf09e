"""The registry of input formats (readers), detected from content (never from the extension alone).

Readers produce one document; writers (:mod:`gruconv.writers`) consume it: pandoc's readers →
AST → writers split.  Every reader module offers the same attributes and verbs (``options`` is
always a :class:`gruconv.options.Options`):

``FORMAT``, ``DESCRIPTION``, ``OPTIONS``, ``CONTENTS``, ``SUFFIXES``
    its name, its words for messages, the option fields it reads, what its documents may hold
    (:data:`~gruconv.model.canonical.CONTENTS` kinds: the options a run accepts are the writer's for the
    target kind such a document is written as), the input name endings batch strips;
``sniff(path) -> bool``
    cheap content check, no exceptions;
``read(path, options) -> doc``
    the file's structure plus its stacks in the canonical model; ``doc.document()`` is the
    :class:`gruconv.model.canonical.Document` writers consume, with the plan facts
    :func:`gruconv.writers.planning.plan` decides from (and, for a Keras model, a complete
    :class:`~gruconv.model.canonical.KerasGraph`); every problem a ``GruconvError``;
``inspect(doc) -> dict``
    the one inspect schema (``file``, ``format``, ``kind``, ``summary``, ``rnns`` [``name``,
    ``cell``, ``kind``, ``shape``, ``params``, ``converts_to``, ``nonfinite_weights``,
    ``details``], ``details``);
``input_facts(path, options) -> InputFacts``
    what the input holds (:class:`gruconv.model.canonical.InputFacts`: a
    :data:`~gruconv.model.canonical.CONTENTS` kind, how many bare stacks), read cheaply: batch mode
    asks it of every input; the reader's document says the same kind (``doc.content``);
``input_files(path)``, ``input_prefix(path)`` (multi-file inputs only)
    every file a conversion reads, and batch mode's "what is one input here".

A reader states facts and decides nothing from them: the output a conversion writes, its name in
batch mode and the files written beside it are :mod:`gruconv.writers.planning`'s
(``NATURAL_FORMAT``, ``BESIDE``); what ``verify`` checks of a document is
:mod:`gruconv.verify.subjects`' (``CHECKS``, keyed by ``doc.content``).

A reader writes nothing and offers no writer, planning or verify verb (``convert``, ``check_outputs``,
``output_format``, ``output_name``, ``verify_subjects``, ...: :mod:`gruconv.api` drives read -> plan ->
write -> verify; ``tests/test_structure.py``).
A new reader is one module and one line in :data:`READERS`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError

#: name -> module path, tried in order.
READERS = {
    "tf-keras-zip": "gruconv.readers.tf_keras_zip",  # before keras3: it claims the tf_keras .keras zips keras3 would pass over
    "keras3": "gruconv.readers.keras3",  # before keras-h5: it claims the Keras 3 HDF5 files keras-h5 would misread
    "keras-h5": "gruconv.readers.keras_h5",
    "tf-graph": "gruconv.readers.tfgraph",  # before tf2-checkpoint: it claims the SavedModels whose graph runs cuDNN ops
    "tf2-checkpoint": "gruconv.readers.tf2",
    "tf1-checkpoint": "gruconv.readers.tf1",
}


def module(name: str):
    """The format module registered as ``name``."""
    import importlib

    return importlib.import_module(READERS[name])


#: detect()'s answers for regular files, by path and the file's identity and change stamps
#: (:func:`_file_key`).  Why: a batch detects each input while discovering it, again while
#: naming its output and again in the conversion (~1 ms each: the readers' sniffers open the file); a
#: forked batch worker inherits the main process's answers.  A file rewritten since has another
#: ``st_mtime_ns`` / ``st_ctime_ns`` / size (the kernel updates ctime on every change), so it is sniffed again.
#: (A same-size rewrite inside one timestamp tick could keep an old answer on kernels without fine-grained
#: ctimes; the answer only picks the reader, which then reads the file itself through every guard, so the
#: worst case is a wrong one-line refusal.  The parsed-index cache, where a stale answer would be data, is
#: keyed by the bytes instead: ``tfbundle._parsed_indexes``.)
_detected: dict = {}
_DETECTED_MAX = 4096


def _file_key(path: Path):
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        return None  # directories (their checkpoint files may change unseen), links, FIFOs: never cached
    return (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def detect(path) -> str:
    """The format name of ``path``, or :class:`InputError` saying what was found instead.

    Nothing is opened here that :mod:`gruconv.files.inputs` has not checked: a FIFO, a device or a
    socket is refused by its type before any read could block."""
    key = _file_key(Path(path))
    if key is not None and key in _detected:
        return _detected[key]
    name = _detect(path)
    if key is not None and _file_key(Path(path)) == key:  # unchanged while it was sniffed
        if len(_detected) >= _DETECTED_MAX:
            _detected.clear()
        _detected[key] = name
    return name


def _detect(path) -> str:
    from ..files.inputs import head, regular_file

    path = Path(path)
    if not os.path.lexists(path) and not Path(str(path) + ".index").exists():
        raise InputError("no such file or directory", path=path)
    if path.is_dir():
        try:
            os.listdir(path)
        except OSError as e:
            raise InputError(f"directory cannot be read ({e.strerror})", path=path) from None
    elif os.path.lexists(path):
        st = regular_file(path, "a model file (Keras HDF5 or TensorFlow checkpoint)")
        if st.st_size == 0:
            raise InputError("file is empty", path=path)
        head(path, 8, "a model file")  # readable at all: one line now, not a confusing sniff failure
    for name in READERS:
        if module(name).sniff(path):
            return name
    if path.is_dir():
        raise InputError("directory holds no TensorFlow checkpoint ('checkpoint' file or *.index)", path=path)
    raise InputError("not a Keras HDF5 file nor a TensorFlow checkpoint", path=path)
