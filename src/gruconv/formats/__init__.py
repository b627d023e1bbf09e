"""The registry of input formats, detected from content (never from the file extension alone).

Each format module offers ``sniff(path) -> bool`` and ``read(path, ...)``; a
new format is one module and one line in :data:`READERS`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError

#: name -> module path, tried in order.
READERS = {
    "keras-h5": "gruconv.formats.keras_h5",
    "tf1-checkpoint": "gruconv.formats.tf1_checkpoint",
}


def reader(name: str):
    import importlib

    return importlib.import_module(READERS[name])


def detect(path) -> str:
    """The format name of ``path``, or :class:`InputError` saying what was found instead."""
    path = Path(path)
    if not path.exists() and not Path(str(path) + ".index").exists():
        raise InputError("no such file or directory", path=path)
    if path.is_dir():
        try:
            os.listdir(path)
        except OSError as e:
            raise InputError(f"directory cannot be read ({e.strerror})", path=path) from None
    if path.is_file():
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise InputError(f"cannot be read ({e.strerror})", path=path) from None
        if path.stat().st_size == 0:
            raise InputError("file is empty", path=path)
    for name in READERS:
        if reader(name).sniff(path):
            return name
    if path.is_dir():
        raise InputError("directory holds no TensorFlow checkpoint ('checkpoint' file or *.index)", path=path)
    raise InputError("not a Keras HDF5 file nor a TensorFlow checkpoint", path=path)
