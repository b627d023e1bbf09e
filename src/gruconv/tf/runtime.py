"""TensorFlow, imported quietly, and the one probe-input rule for running a graph's signatures.

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


def import_quietly(name: str = "tensorflow"):
    """Import ``name`` (``tensorflow``, ``tf2onnx``: modules that load TensorFlow) with TensorFlow's start-up
    lines silenced and its device probe done silently.  ImportError is the caller's."""
    import importlib

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with warnings.catch_warnings(), quiet_fd2():
        warnings.simplefilter("ignore")
        module = importlib.import_module(name)
        import tensorflow as tf  # noqa: PLC0415

        tf.config.list_physical_devices()  # CUDA probing logs happen here, silenced
    logging.getLogger("absl").setLevel(logging.ERROR)
    return module


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


def why(e: Exception) -> str:
    """The informative line of a TensorFlow error (its text opens with "Graph execution error:" and the node)."""
    skip = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and not ln.strip().startswith(skip)]
    return (lines[0] if lines else type(e).__name__)[:200]
