"""Lazy, quiet imports of the heavy frameworks.

``gruconv --help`` and ``gruconv inspect`` must not import TensorFlow or
Keras (``tests/test_cli.py`` checks ``sys.modules``); every code path that
needs Keras calls :func:`keras` here, which also silences TensorFlow's C++
start-up logging and picks a Keras backend that is actually installed
(GPU boxes often carry PyTorch or JAX but no TensorFlow).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import warnings


def _pick_backend() -> None:
    if os.environ.get("KERAS_BACKEND"):
        return
    for backend, module in (("tensorflow", "tensorflow"), ("torch", "torch"), ("jax", "jax")):
        if importlib.util.find_spec(module) is not None:
            os.environ["KERAS_BACKEND"] = backend
            return


@contextlib.contextmanager
def _quiet_fd2():
    """Silence file descriptor 2 for a moment: TensorFlow's C++ runtime (absl, cudart stubs)
    writes start-up lines there that no Python setting suppresses, and the CLI promises a
    single line on stderr for an error."""
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


def keras():
    """Import and return the ``keras`` module (Keras 3), quietly."""
    if "keras" in sys.modules and hasattr(sys.modules["keras"], "saving"):
        return sys.modules["keras"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    _pick_backend()
    with warnings.catch_warnings(), _quiet_fd2():
        warnings.simplefilter("ignore")
        import keras as _keras  # noqa: PLC0415

        if _keras.backend.backend() == "tensorflow":
            import tensorflow as tf  # noqa: PLC0415

            tf.config.list_physical_devices()  # CUDA probing logs happen here, silenced
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        _keras.utils.disable_interactive_logging()
    except AttributeError:
        pass
    return _keras
