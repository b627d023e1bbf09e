"""The document's other tensors (a checkpoint's tensors that are no RNN stack) as ``rest.npz``,
beside whichever writer wrote the stacks (``OUT.rest.npz`` beside a file, ``DIR/rest.npz`` in a
directory).

A plain NumPy archive whose member names are derived from the tensor names but made safe (no ``/``
or ``\\``, no ``..``, printable ASCII, unique; :func:`npz_member_names`), with the original names
kept in its :data:`REST_MANIFEST` member (member -> tensor name).  Needs NumPy and zipfile only.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np

from ..errors import UnsupportedError
from ..model.names import file_chars

#: The name of the file in a directory output, and the ending beside a one-file output.
NAME = "rest.npz"
#: The rest.npz member that maps each array's name (``np.load(...).files``) to its tensor name.
REST_MANIFEST = "__manifest__.json"
_MEMBER_MAX = 180


def beside(output: Path) -> Path:
    """Where the other tensors go beside the one-file output ``output``."""
    return Path(str(output) + "." + NAME)


def npz_member_names(keys: list) -> list:
    """A safe, unique ``np.load`` name per tensor key (the member is that name + ``.npy``).

    Tensor names come from an untrusted file; zip member names become paths when the archive is
    unpacked (``unzip``, ``zipfile.extractall``).  So: ``/`` becomes ``__`` (as in the ``.keras``
    file names), every byte outside printable ASCII ``[A-Za-z0-9_.-]`` (``\\``, ``:``, spaces,
    control characters, non-ASCII) becomes ``_``, runs of dots and a leading dot become ``_``
    (no ``..``, no hidden file), an empty or over-long name is replaced or shortened with a hash,
    and names equal up to case get ``_2``, ``_3`` ... (case-insensitive file systems).
    """
    import hashlib

    out, used = [], set()
    for key in keys:
        name = file_chars(key)
        name = re.sub(r"\.{2,}", lambda m: "_" * len(m[0]), name)
        if name.startswith("."):
            name = "_" + name[1:]
        if not name or name.lower() == REST_MANIFEST[:-5].lower():
            name = "_" + name
        if len(name) > _MEMBER_MAX:
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            name = f"{name[:_MEMBER_MAX - 13]}_{digest}"
        base, n = name, 1
        while name.lower() in used:
            n += 1
            name = f"{base}_{n}"
        used.add(name.lower())
        out.append(name)
    return out


def _npz_array(arr: np.ndarray, key: str, warnings: list) -> tuple:
    """(array, allow_pickle) for np.lib.format.write_array, keeping the tensor's bytes."""
    if arr.dtype == object:  # TF strings: bytes objects
        items = list(arr.reshape(-1))
        if all(isinstance(v, bytes) and not v.endswith(b"\x00") for v in items):
            width = max((len(v) for v in items), default=1) or 1
            return np.array(items, dtype=f"S{width}").reshape(arr.shape), False
        warnings.append(f"rest.npz: string tensor {key!r} stored as a pickled object array "
                        f"(np.load(..., allow_pickle=True))")
        return arr, True
    if arr.dtype.kind == "V" or arr.dtype.name == "bfloat16":
        warnings.append(f"rest.npz: {arr.dtype.name} tensor {key!r} stored as its raw uint{8 * arr.dtype.itemsize} "
                        f"bit patterns")
        return arr.view(f"<u{arr.dtype.itemsize}"), False
    return arr, False


def write(document, target: Path, warnings: list) -> None:
    """Every tensor of ``document.other_tensors`` into ``target`` (an ``.npz``), under
    :func:`npz_member_names`, plus :data:`REST_MANIFEST`: ``{"tensors": {name: tensor key}}`` for
    the members written.  ``target`` is the temporary path the conversion's output transaction
    hands out (:class:`gruconv.files.outputs.Outputs`), renamed into place by it.

    ``document.view(key)`` gives each tensor (a mapped view, written straight from the file's
    pages), ``document.drop()`` lets it go again after each."""
    keys = list(document.other_tensors)
    written = {}
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for k, member in zip(keys, npz_member_names(keys)):
            try:
                arr = document.view(k)
            except UnsupportedError as e:
                warnings.append(f"rest.npz: tensor {k!r} not copied ({e.message})")
                continue
            arr, pickle = _npz_array(arr, k, warnings)
            with zf.open(member + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=pickle)
            written[member] = k
            del arr
            document.drop()
        manifest = {"about": "gruconv rest.npz: array name (np.load(...).files) -> TensorFlow tensor name",
                    "tensors": written}
        zf.writestr(REST_MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=True) + "\n")
