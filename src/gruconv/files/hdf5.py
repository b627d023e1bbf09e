"""Careful access to untrusted HDF5 files: no links followed, attributes normalised, shapes checked.

Keras 3's own legacy loader refuses HDF5 external and soft links
(``keras/src/legacy/saving/legacy_h5_format.py`` ``safe_get_h5_group``);
gruconv does the same, and reads attributes the way every Keras 2 writer may
have stored them: bytes or str, scalar or array, and split into
``name0``, ``name1``, ... when longer than HDF5's 64 KB attribute limit
(tf_keras ``saving/legacy/hdf5_format.py`` ``save_attributes_to_hdf5_group``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import contextlib
import os
from typing import Optional

from . import inputs
from ..errors import InputError, display, first_line
from .inputs import MAX_EXPANSION, ReadBudget, regular_file, same_file

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Above this declared size, a dataset must actually store its bytes (see :func:`check_dataset`).
BOMB_FLOOR_BYTES = 2**20
# A filtered (compressed) dataset may expand at most :data:`gruconv.files.inputs.MAX_EXPANSION` times
# (deflate's own limit is ~1032:1, and Keras 3's ``saving_lib.safe_get_h5_dataset`` uses 1000 too);
# one weight tensor at most ``inputs.limit("tensor")`` bytes (16 GiB unless ``GRUCONV_MAX_BYTES``).


def is_hdf5(path) -> bool:
    """HDF5 files start with the signature at 0, 512, 1024, 2048, ... (user block).

    False for anything but a regular file (a FIFO is never opened, so this never blocks)."""
    if not inputs.is_regular(path):
        return False
    try:
        head = inputs.head(path, 4096 + 8)
    except (InputError, OSError):
        return False
    return any(head[o:o + 8] == HDF5_SIGNATURE for o in (0, 512, 1024, 2048, 4096))


def _superblock_sizes(f, base: int) -> tuple:
    """(size of offsets, size of lengths) from the superblock at ``base`` (HDF5 spec, Level 0A)."""
    f.seek(base + 8)
    head = f.read(8)
    if len(head) < 7:
        return 8, 8
    version = head[0]
    if version in (0, 1):
        return head[5] or 8, head[6] or 8
    return head[1] or 8, head[2] or 8


#: HDF5 global heap collections (``GCOL``) hold variable-length data: every Keras string attribute.
_GCOL = b"GCOL"
_SCAN_CHUNK = 1 << 20
_checked: dict = {}


def check_global_heaps(path) -> None:
    """Refuse a file whose global heap collections would hang or overrun libhdf5's parser.

    libhdf5 (1.14.6, ``H5HG__cache_heap_deserialize`` in ``H5HGcache.c``) walks a collection's
    objects with ``p = begin + need``, where ``need`` comes from the file: a zeroed object header
    (index 0, size 0) makes ``need`` 0 and the loop never ends (found by ``tests/readers/test_fuzz.py``: a
    zeroed run of bytes over a ``layer_names`` or ``model_config`` string hangs ``attrs[...]``
    forever), and a huge size wraps the pointer.  HDF5 reads a collection the first time any
    variable-length string in it is read, so this walks every collection first, the same way,
    and stops at the first object that does not fit.  The file is scanned in 1 MiB pieces
    (constant memory); a collection is recognised by its signature, version 1 and a size that
    fits the file, so weight bytes that happen to spell ``GCOL`` are not mistaken for one.
    """
    p = Path(path)
    st = inputs.regular_file(p, "an HDF5 file")
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if _checked.get(key):
        return
    try:
        with inputs.open_regular(p, "an HDF5 file") as f:
            _scan_global_heaps(f, st.st_size, path)
    except OSError:
        return  # unreadable: h5py reports it
    _checked[key] = True


def _scan_global_heaps(f, file_size: int, path) -> None:
    """:func:`check_global_heaps`'s walk over the open file ``f`` of ``file_size`` bytes (a whole
    file, or a stored zip member's :class:`gruconv.files.window.Window`)."""
    base = next((o for o in (0, 512, 1024, 2048, 4096) if _sig_at(f, o)), 0)
    _, size_len = _superblock_sizes(f, base)
    if size_len not in (2, 4, 8, 16):
        return  # HDF5 itself refuses such a superblock
    offset, tail = 0, b""
    while True:
        f.seek(offset)
        chunk = f.read(_SCAN_CHUNK)
        if not chunk:
            break
        buf = tail + chunk
        start = offset - len(tail)
        at = buf.find(_GCOL)
        while at >= 0:
            _check_collection(f, start + at, size_len, file_size, path)
            at = buf.find(_GCOL, at + 1)
        tail = buf[-3:]
        offset += len(chunk)


def _sig_at(f, offset: int) -> bool:
    f.seek(offset)
    return f.read(8) == HDF5_SIGNATURE


def _check_collection(f, at: int, size_len: int, file_size: int, path) -> None:
    hdr = 8 + size_len
    f.seek(at)
    head = f.read(hdr)
    if len(head) < hdr or head[4] != 1:
        return
    coll = int.from_bytes(head[8:hdr], "little")
    if coll < hdr or coll > file_size - at:
        return  # not a collection libhdf5 could load either
    f.seek(at)
    image = f.read(coll)
    objhdr = 8 + size_len
    pos = hdr
    while pos < coll:
        if pos + objhdr > coll:
            return  # trailing free space, as libhdf5 treats it
        idx = int.from_bytes(image[pos:pos + 2], "little")
        size = int.from_bytes(image[pos + 8:pos + objhdr], "little")
        need = objhdr + ((size + 7) & ~7) if idx > 0 else size
        if need == 0 or pos + need > coll:
            raise InputError(
                f"corrupt HDF5 global heap (variable-length strings) at byte {at}: object {idx} "
                f"claims {size} bytes at offset {pos} of a {coll}-byte collection", path=path)
        pos += need


def _text(value: Any) -> Any:
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8")
    if isinstance(value, str):
        value.encode("utf-8")  # h5py decodes with surrogateescape: refuse bytes that are not UTF-8
        return value
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return _text(value[()])
        return [_text(v) for v in value.tolist()]
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


#: IEEE 754 layouts libhdf5 writes: size -> (sign pos, exponent pos, exponent size, mantissa pos,
#: mantissa size, exponent bias).  A float type described otherwise is corrupt (or exotic), and
#: libhdf5's soft conversion of such types is where corrupted files crash it.
_IEEE = {2: (15, 10, 5, 0, 10, 15), 4: (31, 23, 8, 0, 23, 127), 8: (63, 52, 11, 0, 52, 1023)}


class _BadType(ValueError):
    """An HDF5 datatype refused by :func:`_check_type` (message: "has ... type ...")."""


def _check_type(tid, *, text: bool, empty: bool) -> None:
    """Refuse an HDF5 datatype gruconv must not hand to libhdf5's converter.

    ``text``: the object should hold strings (fixed or variable length, the only string forms
    HDF5 has); numbers are then accepted only in an empty array (Keras writes an empty float64
    ``weight_names`` for weightless layers).  Otherwise integers and IEEE floats only.
    """
    import h5py

    h5t = h5py.h5t
    cls = tid.get_class()
    if text and cls == h5t.STRING:
        return
    if cls == h5t.INTEGER:
        if tid.get_size() in (1, 2, 4, 8) and (not text or empty):
            return
    elif cls == h5t.FLOAT:
        size = tid.get_size()
        if size in _IEEE and (not text or empty):
            if tuple(tid.get_fields()) + (tid.get_ebias(),) == _IEEE[size]:
                return
            raise _BadType(f"has a non-IEEE {size * 8}-bit float type (corrupt datatype)")
    names = {h5t.STRING: "string", h5t.INTEGER: "integer", h5t.FLOAT: "float", h5t.VLEN: "variable-length sequence",
             h5t.COMPOUND: "compound", h5t.REFERENCE: "reference", h5t.ENUM: "enum", h5t.OPAQUE: "opaque",
             h5t.ARRAY: "array", h5t.BITFIELD: "bitfield", h5t.TIME: "time"}
    want = "text" if text else "integers or floats"
    raise _BadType(f"has HDF5 type class {names.get(cls, cls)}, expected {want}")


def _attr(obj, name: str) -> Any:
    aid = obj.attrs.get_id(name)
    space = aid.get_space()
    _check_type(aid.get_type(), text=True, empty=space.get_simple_extent_npoints() == 0)
    return _text(obj.attrs[name])


def read_attr(obj, name: str, default: Any = None) -> Any:
    """An attribute as str / list of str, joining ``name0``, ``name1``, ... splits.

    Its HDF5 type is checked before anything is read (:func:`_check_type`)."""
    try:
        if name in obj.attrs:
            return _attr(obj, name)
        chunks = []
        while f"{name}{len(chunks)}" in obj.attrs:
            chunks.append(_attr(obj, f"{name}{len(chunks)}"))
    except UnicodeError:
        raise InputError(f"attribute {name!r} of {obj.name} is not valid UTF-8 text") from None
    except _BadType as e:
        raise InputError(f"attribute {name!r} of {obj.name} {e}") from None
    except (OSError, RuntimeError, KeyError, TypeError, ValueError) as e:
        raise InputError(f"attribute {name!r} of {obj.name} cannot be read ({first_line(e)})") from None
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
        if not all(isinstance(r, str) for r in raw):
            raise InputError(f"attribute {name!r} is not text", path=path)
        raw = "".join(raw)
    if not isinstance(raw, (str, bytes)):
        raise InputError(f"attribute {name!r} is not valid JSON (not text)", path=path)
    return inputs.parse_json(raw, f"attribute {name!r}", path=path)


_LINK_WORDS = {"SoftLink": "soft link", "ExternalLink": "external link", "UserDefinedLink": "user-defined link"}


def _join(group, name: str) -> str:
    return f"{group.name.rstrip('/')}/{name}"


def child(group, name: str, path, kind: str = "any"):
    """``group[name]`` only if it is a hard link to an object of the expected kind."""
    import h5py

    if not isinstance(name, str) or not name or name in (".", ".."):
        raise InputError(f"{group.name}: member name {name!r} is not a valid HDF5 name", path=path)
    if "/" not in name:
        # The common case, asked of the link itself (exists, then its type): h5py's ``get(getlink=True)``
        # costs three path lookups and most of a small conversion's reading time (profiled).
        # Anything but an existing hard link takes the careful path below, which says what it is.
        try:
            links = group.id.links
            bname = name.encode("utf-8")
            hard = links.exists(bname) and links.get_info(bname).type == h5py.h5l.TYPE_HARD
        except (OSError, RuntimeError, ValueError, KeyError, TypeError, UnicodeError):
            hard = False
        if hard:
            return _open_member(group, name, path, kind)
    try:
        link = group.get(name, getlink=True)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{_join(group, name)} cannot be read ({first_line(e)})", path=path) from None
    if link is None:
        raise InputError(f"{_join(group, name)} is missing", path=path)
    if not isinstance(link, h5py.HardLink):
        raise InputError(
            f"{_join(group, name)} is an HDF5 {_LINK_WORDS.get(type(link).__name__, type(link).__name__)}; "
            "links are not followed",
            path=path,
        )
    return _open_member(group, name, path, kind)


def _open_member(group, name: str, path, kind: str):
    """``group[name]`` (a hard link), of the expected kind, or :class:`InputError`."""
    import h5py

    try:
        obj = group[name]
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{_join(group, name)} cannot be read ({first_line(e)})", path=path) from None
    if kind == "group" and not isinstance(obj, h5py.Group):
        raise InputError(f"{obj.name} is not a group", path=path)
    if kind == "dataset" and not isinstance(obj, h5py.Dataset):
        raise InputError(f"{obj.name} is not a dataset", path=path)
    return obj


def child_exists(group, name: str, path) -> bool:
    """Whether ``group`` has a member (any link kind) called ``name``; errors become :class:`InputError`."""
    try:
        return group.get(name, getlink=True) is not None
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{_join(group, name)} cannot be read ({first_line(e)})", path=path) from None


def resolve(root, dotted: str, path, kind: str = "any"):
    """Walk a ``a/b/c`` path one hard link at a time."""
    obj = root
    parts = [p for p in dotted.split("/") if p]
    if not parts:
        raise InputError(f"{root.name}: member name {dotted!r} names no object", path=path)
    fast = _resolve_hard(root, parts, kind)
    if fast is not None:
        return fast
    for i, part in enumerate(parts):
        obj = child(obj, part, path, kind if i == len(parts) - 1 else "group")
    return obj


def _resolve_hard(root, parts: list, kind: str):
    """:func:`resolve`'s common case in libhdf5's C: every prefix ``a``, ``a/b``, ``a/b/c`` asked
    whether it is a hard link (``H5Lget_info`` checks the last link of the path it is given), then the
    object opened once.  ~85 us against ~270 us for the component-by-component walk through h5py's
    high-level objects (a small conversion resolves each weight two or three times).  None
    for anything else (a missing member, a soft/external link anywhere, ``.``/``..``, the wrong kind,
    any error): the careful walk then says exactly what it is."""
    import h5py

    if kind not in ("any", "dataset", "group") or any(p in (".", "..") for p in parts):
        return None
    try:
        links = root.id.links
        prefix = b""
        for part in parts:
            prefix = prefix + b"/" + part.encode("utf-8") if prefix else part.encode("utf-8")
            if links.get_info(prefix).type != h5py.h5l.TYPE_HARD:
                return None
        oid = h5py.h5o.open(root.id, prefix)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, UnicodeError):
        return None
    if isinstance(oid, h5py.h5d.DatasetID):
        return h5py.Dataset(oid) if kind in ("any", "dataset") else None
    if isinstance(oid, h5py.h5g.GroupID):
        return h5py.Group(oid) if kind in ("any", "group") else None
    return None


def check_dataset(ds, path, *, max_bytes: int | None = None, numeric: bool = True) -> int:
    """Refuse a dataset that would be unsafe to read in full; return its declared size in bytes.

    Checked from the header alone, before anything is allocated: external raw
    storage (other files' bytes) and virtual datasets (other HDF5 files) are
    refused as Keras 3 refuses them; the declared size must stay under
    ``max_bytes``; and above :data:`BOMB_FLOOR_BYTES` the declared size must be
    backed by stored bytes (all of them without filters, 1/:data:`MAX_EXPANSION`
    of them with compression) — a chunked dataset that declares terabytes and
    stores nothing is a "shape bomb" that reading would turn into fill values.
    Below that floor, a file opened with :func:`open_hdf5` has one
    budget for all its datasets: their unbacked bytes together may not exceed 1 MiB
    (so ten thousand small bombs are refused like one big one).  ``max_bytes``
    defaults to :func:`gruconv.files.inputs.limit` ``("tensor")`` (16 GiB, ``GRUCONV_MAX_BYTES``).
    """
    try:
        dtype = ds.dtype
        shape = ds.shape
        external = ds.external
        virtual = ds.is_virtual
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"{ds.name} cannot be read ({first_line(e)})", path=path) from None
    if external:
        raise InputError(f"{ds.name} keeps its data in external file(s) {[x[0] for x in external]!r}; "
                         "refused", path=path)
    if virtual:
        raise InputError(f"{ds.name} is a virtual dataset (data from other files); refused", path=path)
    if shape is None:
        raise InputError(f"{ds.name} has no data (null dataspace)", path=path)
    if numeric and dtype.kind not in "fiub":
        raise InputError(f"{ds.name} has dtype {dtype}, expected a numeric tensor", path=path)
    if numeric:
        try:
            _check_type(ds.id.get_type(), text=False, empty=False)
        except _BadType as e:
            raise InputError(f"{ds.name} {e}", path=path) from None
        except (OSError, RuntimeError, TypeError) as e:
            raise InputError(f"{ds.name} cannot be read ({first_line(e)})", path=path) from None
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if max_bytes is None:
        max_bytes = inputs.limit("tensor")
    if nbytes > max_bytes:
        raise InputError(f"{ds.name} claims {nbytes} bytes (shape {shape}); refused (limit {max_bytes}; set "
                         f"{inputs.ENV_MAX_BYTES} to raise it if the file is trusted)", path=path)
    if nbytes == 0:
        return 0
    try:
        stored = ds.id.get_storage_size()
        filtered = ds.id.get_create_plist().get_nfilters() > 0
    except (OSError, RuntimeError, ValueError) as e:
        raise InputError(f"{ds.name} cannot be read ({first_line(e)})", path=path) from None
    allowed = stored * (MAX_EXPANSION if filtered else 1)
    if nbytes > BOMB_FLOOR_BYTES and nbytes > allowed:
        raise InputError(
            f"{ds.name} declares {nbytes} bytes (shape {shape}) but the file stores only {stored} "
            "bytes of it (a sparse or truncated dataset, or a shape bomb); refused", path=path)
    budget = budget_for(ds)
    if budget is not None and budget.first_time(ds):
        budget.charge(nbytes, min(nbytes, allowed), ds.name)
    return nbytes


#: Bytes of a dataset :func:`row_blocks` holds in memory at a time (about).
ROW_BLOCK_BYTES = 4 << 20


def blocks(ds, path, block_bytes: int = ROW_BLOCK_BYTES):
    """A dataset's values as ``(index, block)``: C-contiguous arrays of about ``block_bytes`` each, in C
    order (their bytes, one after the other, are the dataset's), ``ds[index]`` being ``block``.  Whole
    leading-axis rows when a row fits (whole chunk rows when chunked: a filtered chunk is then
    decompressed once); when one row alone is larger, each row is cut along the first axis whose
    sub-blocks fit (a ``(5, 50_000_000)`` float32 kernel: 200 MB rows, read about ``block_bytes`` at a
    time, not a row), so memory never grows with a tensor's shape.  A 0-d or empty dataset is one block
    (index ``()``).  The caller has checked ``ds`` (:func:`check_dataset`); a read error is an
    :class:`InputError`."""
    shape = tuple(ds.shape)
    if ds.ndim == 0 or ds.size == 0:
        spans = [()]
    else:
        spans = block_spans(shape, ds.dtype.itemsize, block_bytes, ds.chunks)
    for span in spans:
        try:
            block = np.ascontiguousarray(ds[span]) if span else np.asarray(ds[()])  # 0-d stays 0-d
        except (OSError, RuntimeError, ValueError, TypeError, KeyError) as e:
            raise InputError(f"{ds.name} cannot be read ({first_line(e)})", path=path) from None
        yield span, block
        del block


def block_spans(shape: tuple, itemsize: int, block_bytes: int, chunks: Optional[tuple] = None):
    """The index expressions :func:`blocks` reads, in C order, for a non-empty array of ``shape``: whole
    leading-axis rows when a row fits in ``block_bytes`` (whole ``chunks`` along the cut axis when
    chunked), else each row cut along the first axis whose sub-blocks fit.  One rule for every bounded
    read and copy (:func:`blocks`, :func:`write_array`)."""
    axis = 0  # the first axis along which one step fits in block_bytes
    while axis < len(shape) - 1 and int(np.prod(shape[axis + 1:], dtype=np.int64)) * itemsize > block_bytes:
        axis += 1
    inner = max(1, int(np.prod(shape[axis + 1:], dtype=np.int64)) * itemsize)
    step = max(1, block_bytes // inner)
    if chunks:  # whole chunks along the cut axis per read
        c = chunks[axis]
        step = max(c, step - step % c)
    return (outer + (slice(a, a + step),) for outer in np.ndindex(*shape[:axis])
            for a in range(0, shape[axis], step))


def row_blocks(ds, path, block_bytes: int = ROW_BLOCK_BYTES):
    """:func:`blocks` without their indices: for the reads that must not hold a large weight at once and
    only need the values in order (the self-check's digests, ``inspect``'s NaN/Inf count)."""
    for _, block in blocks(ds, path, block_bytes):
        yield block


def read_dataset(ds, path, *, max_bytes: int | None = None) -> np.ndarray:
    """Read a numeric dataset after checking its dtype and declared size (:func:`check_dataset`),
    in native byte order (:func:`native`: big-endian weights are valid data)."""
    check_dataset(ds, path, max_bytes=max_bytes)
    try:
        return native(np.asarray(ds[()]))
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"{ds.name} cannot be read ({first_line(e)})", path=path) from None


# --------------------------------------------------------------------------- guarded opening
# The one way an HDF5 input is opened (moved here from :mod:`gruconv.files.inputs`, which knows no HDF5:
# so the two modules no longer import each other).

#: Budgets of the HDF5 files opened by :func:`open_hdf5`, by HDF5 file number (``ObjectID.fileno``).
_budgets: dict = {}


def budget_for(obj) -> Optional[ReadBudget]:
    """The :class:`ReadBudget` of the file ``obj`` (an h5py object) was opened from by :func:`open_hdf5`."""
    try:
        return _budgets.get(obj.id.fileno)
    except Exception:  # noqa: BLE001 - a closed or foreign object has no budget
        return None


def open_hdf5(path, what: str = "an HDF5 file"):
    """Open an HDF5 file read-only with every guard: regular file, global-heap check, same inode.

    Returns an ``h5py.File`` (usable as a context manager); datasets read through
    :func:`gruconv.files.hdf5.check_dataset` / ``read_dataset`` are charged to its
    :class:`ReadBudget` until it is closed.
    """
    st = regular_file(path, what)
    check_global_heaps(path)
    try:
        f = _GuardedFile(path, "r")
    except (OSError, RuntimeError, ValueError) as e:
        raise InputError(f"not a readable HDF5 file ({display(first_line(e))})", path=path) from None
    try:
        try:
            st2 = os.fstat(f.id.get_vfd_handle())
        except (OSError, RuntimeError, ValueError, TypeError):
            st2 = None
        if st2 is not None and not same_file(st, st2):
            raise InputError(f"changed while being opened, expected {what}", path=path)
        try:
            _budgets[f.id.fileno] = ReadBudget(path)
        except RuntimeError as e:  # libhdf5 cannot describe its own file handle: a damaged file
            raise InputError(f"not a readable HDF5 file ({display(first_line(e))})", path=path) from None
    except BaseException:
        f.close()
        raise
    return f


def open_hdf5_member(path, header_offset: int, size: int, what: str = "an HDF5 file"):
    """:func:`open_hdf5` for an HDF5 file stored uncompressed inside a zip archive at ``path`` (a
    tf_keras ``.keras`` file's ``model.weights.h5``), read in place through a read-only
    :class:`gruconv.files.window.Window`: nothing is extracted.  The same guards: regular file and
    same inode (:func:`gruconv.files.inputs.open_regular`), the global-heap walk over the member's
    bytes, and a :class:`ReadBudget` charged by :func:`check_dataset` / :func:`read_dataset`."""
    from .window import stored_member

    raw = inputs.open_regular(path, what)
    try:
        window = stored_member(raw, header_offset, size)
        if window is None:
            raise InputError(f"{what} has no local zip header where the archive's directory says", path=path)
    except BaseException:
        raw.close()
        raise
    try:
        st = os.fstat(raw.fileno())
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, header_offset)
        if not _checked.get(key):  # a conversion opens the member several times: walked once
            _scan_global_heaps(window, size, path)
            _checked[key] = True
        try:
            f = _GuardedFile(window, "r")
        except (OSError, RuntimeError, ValueError) as e:
            raise InputError(f"not a readable HDF5 file ({display(first_line(e))})", path=path) from None
        _windows[f.id.fileno] = window
        try:
            _budgets[f.id.fileno] = ReadBudget(path)
        except RuntimeError as e:
            f.close()
            raise InputError(f"not a readable HDF5 file ({display(first_line(e))})", path=path) from None
    except BaseException:
        window.close()
        raise
    return f


#: The windows :func:`open_hdf5_member` opened, by HDF5 file number: closed with their file.
_windows: dict = {}


def _hdf5_file_class():
    import h5py

    class GuardedFile(h5py.File):
        """An ``h5py.File`` whose :class:`ReadBudget` is dropped when it is closed."""

        def close(self):
            window = None
            with contextlib.suppress(Exception):
                _budgets.pop(self.id.fileno, None)
                window = _windows.pop(self.id.fileno, None)
            super().close()
            if window is not None:
                window.close()

    return GuardedFile


class _LazyClass:
    cls = None

    def __call__(self, *a, **kw):
        if _LazyClass.cls is None:
            _LazyClass.cls = _hdf5_file_class()
        return _LazyClass.cls(*a, **kw)


_GuardedFile = _LazyClass()


# --------------------------------------------------------------------------- guarded copying
# The legacy writer used ``h5py.Group.copy`` (libhdf5's H5Ocopy) for the weights it does
# not transform.  H5Ocopy copies object headers verbatim: a dataset whose raw data lives in another
# file (external storage, ``H5Pset_external``), a virtual dataset (``H5Pset_virtual``) or an
# external/soft link arrives in the output unchecked, and tf_keras's ``load_weights`` on the output
# then reads whatever file it names.  It also copies filtered chunks without decoding them, so a
# fletcher32 chunk whose checksum fails reaches the output and only its reader finds out.  Every
# copied object therefore passes the guards a read one passes and is *rewritten*: values read (which
# runs the filters and verifies the checksums), byte order made native, written as plain data.

#: Rows are copied in blocks of about this many bytes, so copying a large tensor holds one block.
COPY_BLOCK_BYTES = 64 * 2**20
#: Deepest group nesting a copied group may have (Keras writes two or three levels).
MAX_COPY_DEPTH = 64


def native(arr: np.ndarray) -> np.ndarray:
    """``arr`` in the machine's byte order (a ``>f4`` dataset holds valid values: HDF5 describes its
    byte order, and h5py returns it as stored)."""
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def _check_attr_type(tid) -> None:
    """An attribute copied into an output: text, integers or IEEE floats only (a reference, compound,
    variable-length sequence ... has no place in Keras weights and could point anywhere)."""
    import h5py

    if tid.get_class() == h5py.h5t.STRING:
        return
    _check_type(tid, text=False, empty=False)


def copy_attrs(src, dst, path) -> None:
    """Copy ``src``'s attributes to ``dst``, each type-checked first (:func:`_check_attr_type`)."""
    try:
        names = list(src.attrs.keys())
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"attributes of {src.name} cannot be read ({first_line(e)})", path=path) from None
    for name in names:
        try:
            _check_attr_type(src.attrs.get_id(name).get_type())
            value = src.attrs[name]
        except _BadType as e:
            raise InputError(f"attribute {name!r} of {src.name} {e}", path=path) from None
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"attribute {name!r} of {src.name} cannot be read ({first_line(e)})",
                             path=path) from None
        if isinstance(value, np.ndarray):
            value = native(value)
        _write(lambda: dst.attrs.__setitem__(name, value), dst, f"attribute {name!r}")


def _write(action, dst, what: str):
    """Run a write into the output; libhdf5's failures there (a full disk, a file-size limit: EFBIG,
    ENOSPC) are :class:`OutputError` -- the input is fine."""
    from ..errors import OutputError

    try:
        return action()
    except (OSError, RuntimeError, ValueError, TypeError) as e:
        from .outputs import write_failure

        raise OutputError(f"cannot write {what[:100]} of {dst.name[:100]} ({write_failure(e)})",
                          path=getattr(dst.file, "filename", None)) from None


def copy_dataset(ds, dst_group, name: str, path, transform=None) -> None:
    """Rewrite dataset ``ds`` as ``dst_group[name]``: guarded (:func:`check_dataset`: no external
    storage, no virtual dataset, sizes bounded), read block by block (so the filters run and
    checksums are verified: a failing fletcher32 chunk is an :class:`InputError`), native byte
    order, plain data (gzip/lzf compression kept, nothing else of the source's storage).
    ``transform(block, rows)`` (numeric data only), when given, maps each block of leading-axis
    ``rows`` (a slice; ``slice(None)`` for a scalar) before it is written."""
    import h5py

    try:
        is_text = ds.id.get_type().get_class() == h5py.h5t.STRING
    except (OSError, RuntimeError, ValueError, TypeError) as e:
        raise InputError(f"{ds.name} cannot be read ({first_line(e)})", path=path) from None
    check_dataset(ds, path, numeric=not is_text)

    def read(sel):
        try:
            return ds[sel]
        except (OSError, RuntimeError, ValueError, TypeError, KeyError) as e:
            raise InputError(f"{ds.name} cannot be read ({first_line(e)})", path=path) from None

    kw = {}
    if not is_text and len(ds.shape) and 0 not in ds.shape and ds.compression in ("gzip", "lzf"):
        kw = dict(compression=ds.compression, compression_opts=ds.compression_opts,
                  shuffle=bool(ds.shuffle), chunks=True)
    out = write_array(read, tuple(ds.shape), ds.dtype, dst_group, name, transform, is_text=is_text, **kw)
    copy_attrs(ds, out, path)


def write_array(read, shape: tuple, dtype, dst_group, name: str, transform=None, *, is_text: bool = False,
                **kw):
    """Write a stored tensor as dataset ``dst_group[name]`` of an HDF5 output, leading-axis rows of about
    :data:`COPY_BLOCK_BYTES` at a time: ``read(selection)`` gives the stored values (``()`` for all of a text,
    0-d or empty tensor), ``transform(block, rows)`` maps each block (numeric data only), ``kw`` are
    h5py's storage arguments (compression kept by :func:`copy_dataset`).  The one way a stored weight is
    rewritten into an output, whatever store it comes from; returns the new dataset."""
    if is_text or len(shape) == 0 or 0 in shape:
        data = read(())
        if isinstance(data, np.ndarray):
            data = native(data)
        if transform is not None and not is_text:
            data = transform(data, slice(None))
        return _write(lambda: dst_group.create_dataset(name, data=data), dst_group, f"dataset {name!r}")
    dtype = np.dtype(dtype).newbyteorder("=")
    out = _write(lambda: dst_group.create_dataset(name, shape=shape, dtype=dtype, **kw), dst_group,
                 f"dataset {name!r}")
    row = max(1, int(np.prod(shape[1:], dtype=object)) * dtype.itemsize)
    if transform is None and row > COPY_BLOCK_BYTES:
        # one row alone is over the block: copied in sub-row blocks (:func:`block_spans`), so a (5, 50 M)
        # kernel holds one block, not a 200 MB row (a 5 MB gzip file declaring 1.2 GB, written as legacy .h5:
        # tests/files/test_memory.py)
        for span in block_spans(shape, dtype.itemsize, COPY_BLOCK_BYTES, out.chunks):
            block = native(read(span))
            _write(lambda: out.__setitem__(span, block), dst_group, f"dataset {name!r}")
            del block
        return out
    step = max(1, COPY_BLOCK_BYTES // row)
    for start in range(0, shape[0], step):
        block = native(read(np.s_[start:start + step]))
        if transform is not None:
            block = transform(block, np.s_[start:start + step])
        _write(lambda: out.__setitem__(np.s_[start:start + step], block), dst_group, f"dataset {name!r}")
    return out


def copy_group(group, dst_parent, path, name: Optional[str] = None, *, _depth: int = 0):
    """Rewrite ``group`` (attributes, subgroups, datasets) as ``dst_parent[name]``, every member
    reached through :func:`child` (a soft, external or user-defined link is refused, never
    followed or copied) and every dataset through :func:`copy_dataset`."""
    import h5py

    if _depth > MAX_COPY_DEPTH:
        raise InputError(f"{group.name} is nested more than {MAX_COPY_DEPTH} groups deep", path=path)
    name = name if name is not None else group.name.rsplit("/", 1)[-1]
    dst = _write(lambda: dst_parent.create_group(name), dst_parent, f"group {name!r}")
    copy_attrs(group, dst, path)
    try:
        members = list(group.keys())
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{group.name} cannot be listed ({first_line(e)})", path=path) from None
    for member in members:
        obj = child(group, member, path)
        if isinstance(obj, h5py.Group):
            copy_group(obj, dst, path, member, _depth=_depth + 1)
        elif isinstance(obj, h5py.Dataset):
            copy_dataset(obj, dst, member, path)
        else:
            raise InputError(f"{obj.name} is an HDF5 {type(obj).__name__}, not a group or dataset", path=path)
    return dst
