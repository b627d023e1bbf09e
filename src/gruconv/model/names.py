"""Names made from a user's names: each rule once (a second copy drifted in its default before).

* :func:`identifier`: a scope or layer path as a Keras layer name -- every run of characters outside
  ``[A-Za-z0-9_]`` one ``_``, leading and trailing ``_`` dropped (Keras 3 refuses ``/`` in a layer name:
  ``keras/src/layers/layer.py``; the stack model, its legacy ``.h5`` weights and verify's in-memory stack
  model must name the same layers), ``default`` when nothing is left;
* :func:`file_chars`: a key as file-name characters -- ``/`` becomes ``__``, every character outside
  ``[A-Za-z0-9_.-]`` one ``_`` (an output per scope, a ``rest.npz`` member).
"""

from __future__ import annotations

import re

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]+")
_NOT_FILE_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")


def identifier(name: str, default: str = "") -> str:
    return _NOT_IDENTIFIER.sub("_", name).strip("_") or default


def file_chars(key: str) -> str:
    return _NOT_FILE_CHAR.sub("_", key.replace("/", "__"))
