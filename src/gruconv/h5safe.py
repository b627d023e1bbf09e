"""Careful access to untrusted HDF5 files: no links followed, attributes normalised, shapes checked.

Keras 3's own legacy loader refuses HDF5 external and soft links
(``keras/src/legacy/saving/legacy_h5_format.py`` ``safe_get_h5_group``);
gruconv does the same, and reads attributes the way every Keras 2 writer may
have stored them: bytes or str, scalar or array, and split into
``name0``, ``name1``, ... when longer than HDF5's 64 KB attribute limit
(tf_keras ``saving/legacy/hdf5_format.py`` ``save_attributes_to_hdf5_group``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .errors import InputError

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: A Keras weight tensor larger than this is refused before it is read.
MAX_TENSOR_BYTES = 16 * 2**30


def is_hdf5(path) -> bool:
    """HDF5 files start with the signature at 0, 512, 1024, 2048, ... (user block)."""
    try:
        with open(path, "rb") as f:
            for offset in (0, 512, 1024, 2048, 4096):
                f.seek(offset)
                if f.read(8) == HDF5_SIGNATURE:
                    return True
    except OSError:
        return False
    return False


def _text(value: Any) -> Any:
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return _text(value[()])
        return [_text(v) for v in value.tolist()]
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def read_attr(obj, name: str, default: Any = None) -> Any:
    """An attribute as str / list of str, joining ``name0``, ``name1``, ... splits."""
    try:
        if name in obj.attrs:
            return _text(obj.attrs[name])
        chunks = []
        while f"{name}{len(chunks)}" in obj.attrs:
            chunks.append(_text(obj.attrs[f"{name}{len(chunks)}"]))
    except (OSError, RuntimeError, KeyError, TypeError, ValueError) as e:
        raise InputError(f"attribute {name!r} of {obj.name} cannot be read ({e})") from None
    if not chunks:
        return default
    out: list = []
    for c in chunks:
        out.extend(c if isinstance(c, list) else [c])
    return out


def read_json_attr(obj, name: str, path) -> Any:
    raw = read_attr(obj, name)
    if raw is None:
        return None
    if isinstance(raw, list):
        raw = "".join(raw)
    try:
        return json.loads(raw)
    except (TypeError, ValueError) as e:
        raise InputError(f"attribute {name!r} is not valid JSON ({e})", path=path) from None


def child(group, name: str, path, kind: str = "any"):
    """``group[name]`` only if it is a hard link to an object of the expected kind."""
    import h5py

    try:
        link = group.get(name, getlink=True)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        raise InputError(f"{group.name}/{name} cannot be read ({e})", path=path) from None
    if link is None:
        raise InputError(f"{group.name.rstrip('/')}/{name} is missing", path=path)
    if not isinstance(link, h5py.HardLink):
        raise InputError(
            f"{group.name.rstrip('/')}/{name} is a {type(link).__name__}; links are not followed",
            path=path,
        )
    try:
        obj = group[name]
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        raise InputError(f"{group.name}/{name} cannot be read ({e})", path=path) from None
    if kind == "group" and not isinstance(obj, h5py.Group):
        raise InputError(f"{obj.name} is not a group", path=path)
    if kind == "dataset" and not isinstance(obj, h5py.Dataset):
        raise InputError(f"{obj.name} is not a dataset", path=path)
    return obj


def resolve(root, dotted: str, path, kind: str = "any"):
    """Walk a ``a/b/c`` path one hard link at a time."""
    obj = root
    parts = [p for p in dotted.split("/") if p]
    for i, part in enumerate(parts):
        obj = child(obj, part, path, kind if i == len(parts) - 1 else "group")
    return obj


def read_dataset(ds, path, *, max_bytes: int = MAX_TENSOR_BYTES) -> np.ndarray:
    """Read a numeric dataset after checking its dtype and declared size."""
    try:
        dtype = ds.dtype
        shape = ds.shape
    except (OSError, RuntimeError, ValueError) as e:
        raise InputError(f"{ds.name} cannot be read ({e})", path=path) from None
    if dtype.kind not in "fiub" or shape is None:
        raise InputError(f"{ds.name} has dtype {dtype}, expected a numeric tensor", path=path)
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if nbytes > max_bytes:
        raise InputError(f"{ds.name} claims {nbytes} bytes (shape {shape}); refused", path=path)
    try:
        return ds[()]
    except (OSError, RuntimeError, ValueError, TypeError) as e:
        raise InputError(f"{ds.name} cannot be read ({e})", path=path) from None
