"""Lazy, quiet imports of the heavy frameworks.

``gruconv --help`` and ``gruconv inspect`` must not import TensorFlow or
Keras (``tests/test_cli.py`` checks ``sys.modules``); every code path that
needs Keras calls :func:`keras` here, which also silences TensorFlow's C++
start-up logging and picks a Keras backend that is actually installed
(GPU boxes often carry PyTorch or JAX but no TensorFlow).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings


def _pick_backend() -> None:
    if os.environ.get("KERAS_BACKEND"):
        return
    for backend, module in (("tensorflow", "tensorflow"), ("torch", "torch"), ("jax", "jax")):
        if importlib.util.find_spec(module) is not None:
            os.environ["KERAS_BACKEND"] = backend
            return


def keras():
    """Import and return the ``keras`` module (Keras 3), quietly."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    _pick_backend()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import keras as _keras  # noqa: PLC0415
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        _keras.utils.disable_interactive_logging()
    except AttributeError:
        pass
    return _keras
