"""TensorFlow, imported quietly, and the one probe-input rule and loop for running a graph's signatures.

Why its own import helper: TensorFlow is not Keras; :func:`gruconv.keras3.runtime.import_quietly` is the Keras
side's, and a TensorFlow graph is converted without Keras (a Keras 3 of another backend, or none, is fine).
The C++ runtime prints start-up lines on file descriptor 2 that no Python setting suppresses (absl, the CUDA
stubs); they are silenced while it loads, as the Keras side silences them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings

#: The sizes tried for every unknown dimension at once when a signature is run on probe inputs: a graph whose
#: fixed dimensions tie its batch to another size (a state of fixed ``L*D`` rows read as the batch) runs
#: only at that size.
PROBE_SIZES = (1, 2, 3, 4, 6, 8)
#: The probe rule in words, for messages.
PROBE_WORDS = ("zeros (integers: ones) of each signature's inputs, every unknown dimension taken as "
               + ", ".join(map(str, PROBE_SIZES[:-1])) + f" or {PROBE_SIZES[-1]}")


@contextlib.contextmanager
def quiet_fd2():
    """File descriptor 2 to /dev/null for a moment: TensorFlow's C++ runtime (absl, cudart stubs) writes start-up
    lines there that no Python setting suppresses, and the CLI promises a single line on stderr for an error.  The
    one copy: :mod:`gruconv.keras3.runtime` (Keras's TensorFlow backend, tf_keras) uses it too."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def import_quietly(name: str = "tensorflow", probe: bool = True):
    """Import ``name`` (``tensorflow``, ``tf2onnx``: modules that load TensorFlow) with TensorFlow's start-up
    lines silenced and, with ``probe``, its device probe done silently.  Without ``probe`` no device is asked
    for, so no CUDA driver is initialized: what the bounded runs' zygote needs before it forks
    (:func:`gruconv.tf.bounded._fork_safe`).  ImportError is the caller's."""
    import importlib

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with warnings.catch_warnings(), quiet_fd2():
        warnings.simplefilter("ignore")
        module = importlib.import_module(name)
        if probe:
            import tensorflow as tf  # noqa: PLC0415

            tf.config.list_physical_devices()  # CUDA probing logs happen here, silenced
    logging.getLogger("absl").setLevel(logging.ERROR)
    return module


def missing(name: str = "tensorflow"):
    """None when ``name`` (``tensorflow``, ``tf2onnx``) imports (quietly, :func:`import_quietly`), else the name
    of the module that is missing: how a caller outside this package asks without importing TensorFlow itself."""
    try:
        import_quietly(name)
    except ImportError as e:
        return e.name or str(e)
    return None


def tensorflow(what: str = "running a TensorFlow graph"):
    """The ``tensorflow`` module, or the one line saying how to install it."""
    from ..errors import UnsupportedError

    try:
        return import_quietly("tensorflow")
    except ImportError:
        raise UnsupportedError(f"{what} needs TensorFlow (pip install 'gruconv[tensorflow]')") from None


def probe_input(tf, spec, k: int = 1):
    """The input a signature is probed with (the writer's serve check, the evaluation of a graph's params):
    float zeros, integer ones (a sequence length of one step; a token id past a padding 0, which a mask with
    ``mask_zero`` would otherwise drop whole: a graph may assert on that), empty strings; every unknown
    dimension ``k``."""
    shape = [k if d is None else d for d in (spec.shape.as_list() if spec.shape.rank is not None else [])]
    if spec.dtype == tf.string:
        return tf.fill(shape, "")
    return tf.ones(shape, spec.dtype) if spec.dtype.is_integer else tf.zeros(shape, spec.dtype)


def first_run(tf, fn, make, sizes=PROBE_SIZES, retry=None, never=None):
    """The one probe loop: ``(feed, outputs)`` of signature ``fn`` run on the CPU on ``make(specs, k)`` (``specs``:
    its ``{input name: TensorSpec}``; a dict of tensors or arrays) for the first ``k`` of ``sizes`` it runs at.
    An error of ``retry`` (default: ``InvalidArgumentError``, shapes that do not fit) tries the next size, one of
    ``never`` (a subclass of ``retry``: running out of memory is not a size that does not fit) goes up; when no
    size runs, the first error is raised.  Every user of a signature's probe (the writer's serve check, the
    params evaluation, verify's end to end) runs through here."""
    retry = retry or tf.errors.InvalidArgumentError
    specs = fn.structured_input_signature[1]
    first = None
    for k in sizes:
        feed = make(specs, k)
        try:
            with tf.device("/CPU:0"):
                return feed, fn(**{name: tf.constant(a) if not tf.is_tensor(a) else a for name, a in feed.items()})
        except retry as e:
            if never is not None and isinstance(e, never):
                raise
            first = first or e
    raise first


def probe_feed(tf):
    """``make`` for :func:`first_run`: :func:`probe_input` of every input."""
    return lambda specs, k: {name: probe_input(tf, spec, k) for name, spec in specs.items()}


def op_attrs(tf, node, names) -> dict:
    """``{attr: value}`` of ``names`` (and ``T``) for ``node`` (a ``NodeDef``), by TensorFlow's op registry: the
    value the node holds, else the op's default; an attr the op lacks is left out (dtypes by name, strings
    decoded).  Not the reader's reading of the attrs: verify's reference must not share it with the conversions."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(node.op)
    out = {}
    for a in op_def.attr:
        if a.name not in names and a.name != "T":
            continue
        value = node.attr[a.name] if a.name in node.attr else a.default_value
        field = value.WhichOneof("value")
        v = getattr(value, field)
        out[a.name] = tf.as_dtype(v).name if a.name == "T" else (v.decode() if isinstance(v, bytes) else v)
    return out


def why(e: Exception) -> str:
    """The informative line of a TensorFlow error (its text opens with "Graph execution error:" and the node)."""
    skip = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith(skip)]
    return (lines[0] if lines else type(e).__name__)[:200]
