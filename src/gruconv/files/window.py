"""A window onto part of an open file, as a file of its own (moved from :mod:`gruconv.keras3.archive`).

Two users, one class: the ``.keras`` writer writes its weights HDF5 file through h5py's file-object
driver in place inside the archive (unbounded, writable), and readers open a *stored* zip member
(``ZIP_STORED``: its bytes lie contiguous after the local header, APPNOTE 4.3.7) read-only without
extracting it (:func:`stored_member`: a tf_keras ``.keras`` file's ``model.weights.h5``).
"""

from __future__ import annotations

import io
import struct
from typing import Optional


class Window(io.RawIOBase):
    """Bytes ``base`` onwards of an open file, as a file of its own.  Unbounded and writable: what h5py's
    file-object driver writes the weights HDF5 file through, in place inside the archive.  With
    ``size``: those ``size`` bytes only, read-only (a stored zip member: ``keras3.archive._stored_member``, :func:`stored_member`).
    ``owns``: closing the window closes ``raw`` (else its owner, the ``ZipFile``, does)."""

    def __init__(self, raw, base: int, *, size: Optional[int] = None, owns: bool = False):
        super().__init__()
        self._raw, self._base, self._pos, self._size, self._owns = raw, base, 0, size, owns
        # The writable window's end, tracked rather than asked of ``raw``: h5py's file-object driver asks
        # for the end of file (``seek(0, SEEK_END)``) around every write, and each ask was two seeks of the
        # archive (46,487 on the bench's 180 MiB model: 0.7 s of a 3.4 s conversion).  Exact because
        # nothing else writes ``raw`` past ``base`` while the window is open (the zip's directory is
        # written after the window is closed).
        self._end = None if size is not None else max(0, raw.seek(0, io.SEEK_END) - base)

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return self._size is None

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size if self._size is not None else self._end

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size()}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, b) -> int:
        view = memoryview(b)
        if self._size is not None:
            view = view[:max(0, min(len(view), self._size - self._pos))]
            if len(view) == 0:
                return 0
        self._raw.seek(self._base + self._pos)
        got = self._raw.readinto(view)
        self._pos += got or 0
        return got

    def write(self, b) -> int:
        if self._size is not None:
            raise io.UnsupportedOperation("read-only window")
        self._raw.seek(self._base + self._pos)
        n = self._raw.write(b)
        self._pos += n
        self._end = max(self._end, self._pos)
        return n

    def truncate(self, size=None) -> int:
        if self._size is not None:
            raise io.UnsupportedOperation("read-only window")
        size = self._pos if size is None else size
        self._raw.truncate(self._base + size)
        self._end = size
        return size

    def flush(self) -> None:
        if self._size is None:
            self._raw.flush()

    def close(self) -> None:
        try:
            if self._owns and not self._raw.closed:
                self._raw.close()
        finally:
            super().close()


def stored_member(raw, header_offset: int, size: int) -> Optional[Window]:
    """A read-only :class:`Window` over a stored zip member of the open archive ``raw`` whose local
    header is at ``header_offset``; ``raw`` is then owned by the window.  None when no local header
    is there (the caller says what is wrong)."""
    raw.seek(header_offset)
    head = raw.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return Window(raw, header_offset + 30 + name_len + extra_len, size=size, owns=True)
