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
#: Above this declared size, a dataset must actually store its bytes (see :func:`check_dataset`).
BOMB_FLOOR_BYTES = 2**20
#: Most a filtered (compressed) dataset may expand; deflate's own limit is ~1032:1, and Keras 3's
#: ``saving_lib.safe_get_h5_dataset`` uses 1000 too.
MAX_EXPANSION = 1000


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
    try:
        if isinstance(raw, list):
            raw = "".join(raw)
        return json.loads(raw)
    except (TypeError, ValueError, RecursionError) as e:
        raise InputError(f"attribute {name!r} is not valid JSON ({e})", path=path) from None


_LINK_WORDS = {"SoftLink": "soft link", "ExternalLink": "external link", "UserDefinedLink": "user-defined link"}


def _join(group, name: str) -> str:
    return f"{group.name.rstrip('/')}/{name}"


def child(group, name: str, path, kind: str = "any"):
    """``group[name]`` only if it is a hard link to an object of the expected kind."""
    import h5py

    if not isinstance(name, str) or not name or name in (".", ".."):
        raise InputError(f"{group.name}: member name {name!r} is not a valid HDF5 name", path=path)
    try:
        link = group.get(name, getlink=True)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{_join(group, name)} cannot be read ({_first_line(e)})", path=path) from None
    if link is None:
        raise InputError(f"{_join(group, name)} is missing", path=path)
    if not isinstance(link, h5py.HardLink):
        raise InputError(
            f"{_join(group, name)} is an HDF5 {_LINK_WORDS.get(type(link).__name__, type(link).__name__)}; "
            "links are not followed",
            path=path,
        )
    try:
        obj = group[name]
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{_join(group, name)} cannot be read ({_first_line(e)})", path=path) from None
    if kind == "group" and not isinstance(obj, h5py.Group):
        raise InputError(f"{obj.name} is not a group", path=path)
    if kind == "dataset" and not isinstance(obj, h5py.Dataset):
        raise InputError(f"{obj.name} is not a dataset", path=path)
    return obj


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def child_exists(group, name: str, path) -> bool:
    """Whether ``group`` has a member (any link kind) called ``name``; errors become :class:`InputError`."""
    try:
        return group.get(name, getlink=True) is not None
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{_join(group, name)} cannot be read ({_first_line(e)})", path=path) from None


def resolve(root, dotted: str, path, kind: str = "any"):
    """Walk a ``a/b/c`` path one hard link at a time."""
    obj = root
    parts = [p for p in dotted.split("/") if p]
    for i, part in enumerate(parts):
        obj = child(obj, part, path, kind if i == len(parts) - 1 else "group")
    return obj


def check_dataset(ds, path, *, max_bytes: int = MAX_TENSOR_BYTES, numeric: bool = True) -> int:
    """Refuse a dataset that would be unsafe to read in full; return its declared size in bytes.

    Checked from the header alone, before anything is allocated: external raw
    storage (other files' bytes) and virtual datasets (other HDF5 files) are
    refused as Keras 3 refuses them; the declared size must stay under
    ``max_bytes``; and above :data:`BOMB_FLOOR_BYTES` the declared size must be
    backed by stored bytes (all of them without filters, 1/:data:`MAX_EXPANSION`
    of them with compression) — a chunked dataset that declares terabytes and
    stores nothing is a "shape bomb" that reading would turn into fill values.
    """
    try:
        dtype = ds.dtype
        shape = ds.shape
        external = ds.external
        virtual = ds.is_virtual
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"{ds.name} cannot be read ({_first_line(e)})", path=path) from None
    if external:
        raise InputError(f"{ds.name} keeps its data in external file(s) {[x[0] for x in external]!r}; "
                         "refused", path=path)
    if virtual:
        raise InputError(f"{ds.name} is a virtual dataset (data from other files); refused", path=path)
    if shape is None:
        raise InputError(f"{ds.name} has no data (null dataspace)", path=path)
    if numeric and dtype.kind not in "fiub":
        raise InputError(f"{ds.name} has dtype {dtype}, expected a numeric tensor", path=path)
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if nbytes > max_bytes:
        raise InputError(f"{ds.name} claims {nbytes} bytes (shape {shape}); refused (limit {max_bytes})",
                         path=path)
    if nbytes > BOMB_FLOOR_BYTES:
        try:
            stored = ds.id.get_storage_size()
            filtered = ds.id.get_create_plist().get_nfilters() > 0
        except (OSError, RuntimeError, ValueError) as e:
            raise InputError(f"{ds.name} cannot be read ({_first_line(e)})", path=path) from None
        allowed = stored * (MAX_EXPANSION if filtered else 1)
        if nbytes > allowed:
            raise InputError(
                f"{ds.name} declares {nbytes} bytes (shape {shape}) but the file stores only {stored} "
                "bytes of it (a sparse or truncated dataset, or a shape bomb); refused", path=path)
    return nbytes


def read_dataset(ds, path, *, max_bytes: int = MAX_TENSOR_BYTES) -> np.ndarray:
    """Read a numeric dataset after checking its dtype and declared size (:func:`check_dataset`)."""
    check_dataset(ds, path, max_bytes=max_bytes)
    try:
        return np.asarray(ds[()])
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"{ds.name} cannot be read ({_first_line(e)})", path=path) from None
