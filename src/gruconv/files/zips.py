"""``.keras`` zip archives read through guards: the directory bounded before :mod:`zipfile` parses it,
members checked against what Keras writes, nothing extracted or executed.

* :func:`zip_directory`: ``(entries, cd_offset, cd_size)`` from the end-of-central-directory record
  (zip64 too), bounded (:data:`MAX_ZIP_MEMBERS`, :data:`MAX_CENTRAL_DIRECTORY`) before
  :class:`zipfile.ZipFile` reads the whole directory;
* :func:`read_keras_zip`: a ``.keras`` zip's ``config.json`` / ``metadata.json`` only, every member
  checked (names Keras writes, no links, no encryption, no bomb: :data:`MAX_ZIP_RATIO`,
  :data:`MAX_CONFIG_BYTES`);
* :func:`keras_zip_member`: where a *stored* member lies, for reading it in place
  (:func:`gruconv.files.hdf5.open_hdf5_member`, :mod:`gruconv.files.window`), never inflated.
"""

from __future__ import annotations

import os
import stat
import struct
import zipfile
from pathlib import Path
from typing import Any

from ..errors import InputError

MAX_CONFIG_BYTES = 16 * 2**20
MAX_ZIP_MEMBERS = 64
MAX_ZIP_RATIO = 200
_ZIP_OK = {"config.json", "metadata.json", "model.weights.h5", "model.weights.npz", "assets"}
#: Bound on a ``.keras`` zip's central directory, checked from its end record before parsing it.
MAX_CENTRAL_DIRECTORY = 1 << 20
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"


def regular_size(path: Path) -> int:
    """The size of ``path``, a regular file (followed through links), else :class:`InputError`."""
    try:
        st = path.stat()
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror or e})", path=path) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file", path=path)
    return st.st_size


def _json(data: bytes, what: str, path) -> Any:
    from . import inputs

    return inputs.parse_json(data, what, path=path, max_bytes=MAX_CONFIG_BYTES)


def zip_directory(f, size: int, path) -> tuple:
    """``(entries, cd_offset, cd_size)`` from a zip's end-of-central-directory record (zip64 too),
    refusing a directory with more than :data:`MAX_ZIP_MEMBERS` entries, larger
    than :data:`MAX_CENTRAL_DIRECTORY`, or lying outside the file (truncated) -- checked here
    because :class:`zipfile.ZipFile` reads and parses the whole directory as soon as it opens.
    Layout: APPNOTE.TXT 4.3.16 (end record), 4.3.14-15 (zip64 end record and locator)."""
    tail_len = min(size, 22 + 0xFFFF)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        raise InputError("zip archive has no end-of-central-directory record (truncated or not a zip)", path=path)
    _, _, _, _, entries, cd_size, cd_offset, _ = struct.unpack("<4s4H2LH", tail[at:at + 22])
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        loc = at - 20
        if loc < 0 or tail[loc:loc + 4] != _EOCD64_LOCATOR:
            raise InputError("zip64 archive has no zip64 end-record locator (truncated?)", path=path)
        _, _, rec_at, _ = struct.unpack("<4sLQL", tail[loc:loc + 20])
        if rec_at + 56 > size:
            raise InputError("zip64 end record lies outside the file (truncated?)", path=path)
        f.seek(rec_at)
        rec = f.read(56)
        if rec[:4] != _EOCD64:
            raise InputError("zip64 end record not where its locator says (damaged)", path=path)
        _, _, _, _, _, _, _, entries, cd_size, cd_offset = struct.unpack("<4sQ2H2L4Q", rec)
    if entries > MAX_ZIP_MEMBERS:
        raise InputError(f"zip archive lists {entries} members, more than {MAX_ZIP_MEMBERS} "
                         "(a .keras file has 3 and a few assets); refused", path=path)
    if cd_size > MAX_CENTRAL_DIRECTORY:
        raise InputError(f"zip central directory declares {cd_size} bytes, more than {MAX_CENTRAL_DIRECTORY}; "
                         "refused", path=path)
    if cd_offset + cd_size > size:
        raise InputError("zip central directory lies past the end of the file (truncated)", path=path)
    return entries, cd_offset, cd_size



def read_keras_zip(path) -> tuple:
    """(config, metadata) of a ``.keras`` zip, reading only ``config.json``/``metadata.json``.

    Nothing is extracted or executed; the archive is refused (InputError) if its central directory is
    out of bounds (:func:`zip_directory`, before :mod:`zipfile` parses it), has too many members,
    a symbolic-link member,
    odd member names (absolute, ``..``, backslashes, not Keras's own), a member whose declared size or
    compression ratio is out of bounds (a zip bomb), or a member that inflates past its declared size.
    """
    from . import inputs

    path = Path(path)
    regular_size(path)
    with inputs.open_regular(path, "a .keras file") as fh:
        zip_directory(fh, os.fstat(fh.fileno()).st_size, path)
        fh.seek(0)
        return _read_keras_zip(fh, path)


def _read_keras_zip(fh, path) -> tuple:
    try:
        zf = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise InputError(f"not a readable .keras zip ({e})", path=path) from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ZIP_MEMBERS:
            raise InputError(f".keras zip has {len(infos)} members, more than {MAX_ZIP_MEMBERS}; refused", path=path)
        names = set()
        for zi in infos:
            n = zi.filename
            top = n.split("/", 1)[0]
            if (n.startswith("/") or "\\" in n or ".." in n.split("/") or "\x00" in n or top not in _ZIP_OK
                    or (top != "assets" and "/" in n)):
                raise InputError(f".keras zip member {n!r} is not one Keras writes; refused", path=path)
            if n in names:
                raise InputError(f".keras zip has member {n!r} twice; refused", path=path)
            names.add(n)
            if stat.S_ISLNK(zi.external_attr >> 16) or stat.S_ISDIR(zi.external_attr >> 16) and top != "assets":
                # a Unix mode in the high 16 bits (APPNOTE 4.4.15, what zip -y writes): Keras writes
                # plain files; a link is harmless unextracted, but it is not a Keras archive's
                raise InputError(f".keras zip member {n!r} is a "
                                 f"{'symbolic link' if stat.S_ISLNK(zi.external_attr >> 16) else 'directory'}, "
                                 "not a file Keras writes; refused", path=path)
            if zi.flag_bits & 0x1:
                raise InputError(f".keras zip member {n!r} is encrypted; refused", path=path)
            # only config.json / metadata.json are ever inflated, so only they can bomb this reader
            if n in ("config.json", "metadata.json") and zi.file_size > 4096 \
                    and zi.file_size > MAX_ZIP_RATIO * max(zi.compress_size, 1):
                raise InputError(f".keras zip member {n!r} expands {zi.file_size} bytes from {zi.compress_size} "
                                 f"(more than {MAX_ZIP_RATIO}:1): a zip bomb; refused", path=path)
        if "config.json" not in names:
            raise InputError(".keras zip has no config.json", path=path)

        def member(name):
            zi = zf.getinfo(name)
            if zi.file_size > MAX_CONFIG_BYTES:
                raise InputError(f".keras zip member {name} declares {zi.file_size} bytes, more than "
                                 f"{MAX_CONFIG_BYTES}; refused", path=path)
            try:
                with zf.open(zi) as f:
                    data = f.read(zi.file_size + 1)
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
                raise InputError(f".keras zip member {name} cannot be read ({e})", path=path) from None
            if len(data) != zi.file_size:
                raise InputError(f".keras zip member {name} inflates to a size other than declared; refused",
                                 path=path)
            return _json(data, f".keras {name}", path)

        config = member("config.json")
        meta = member("metadata.json") if "metadata.json" in names else {}
    return config, meta if isinstance(meta, dict) else {}


def keras_zip_member(path, name: str) -> tuple:
    """``(local header offset, size)`` of the *stored* member ``name`` of a ``.keras`` zip, its
    directory bounded first (:func:`zip_directory`).  A compressed member is refused: Keras and
    tf_keras write ``model.weights.h5`` stored (``saving_lib``: zipfile's default ``ZIP_STORED``), and
    a stored member is read in place (:func:`gruconv.files.hdf5.open_hdf5_member`), never inflated."""
    from . import inputs

    path = Path(path)
    with inputs.open_regular(path, "a .keras file") as fh:
        size = os.fstat(fh.fileno()).st_size
        zip_directory(fh, size, path)
        fh.seek(0)
        try:
            with zipfile.ZipFile(fh) as zf:
                zi = zf.getinfo(name)
        except KeyError:
            raise InputError(f".keras zip has no {name}", path=path) from None
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
            raise InputError(f"not a readable .keras zip ({e})", path=path) from None
    if zi.compress_type != zipfile.ZIP_STORED or zi.file_size != zi.compress_size:
        raise InputError(f".keras zip member {name} is compressed (Keras writes it stored); refused", path=path)
    if zi.header_offset + 30 + zi.file_size > size:
        raise InputError(f".keras zip member {name} lies past the end of the file (truncated)", path=path)
    return zi.header_offset, zi.file_size
