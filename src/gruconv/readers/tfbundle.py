"""Read TensorFlow "TensorBundle V2" checkpoints with NumPy only (no TensorFlow).

Why this exists: gruconv must read TF1 ``cudnn_rnn`` checkpoints on machines
where TensorFlow is not installed, and must treat those files as untrusted
input.  TensorFlow's own reader ``CHECK``-fails or allocates from claimed sizes
on some malformed inputs; this reader validates every length against the bytes
actually present and raises :class:`gruconv.errors.InputError` /
:class:`gruconv.errors.UnsupportedError` with one readable message naming the
file and the tensor key.

A checkpoint with prefix ``P`` is two kinds of files
(``tensorflow/core/util/tensor_bundle/naming.cc``):

* ``P.index`` -- an SSTable (LevelDB table format, see
  ``tensorflow/core/lib/io/table_format.txt``) mapping tensor keys to
  serialized ``BundleEntryProto`` messages, plus the key ``""`` mapping to a
  ``BundleHeaderProto`` (``tensorflow/core/protobuf/tensor_bundle.proto``,
  ``kHeaderEntryKey`` in ``tensorflow/core/util/tensor_bundle/tensor_bundle.cc``).
* ``P.data-%05d-of-%05d`` -- raw tensor bytes; each entry names its shard,
  ``offset`` and ``size``.

SSTable layout as written by ``tensorflow/core/lib/io/table_builder.cc``:
data blocks, a metaindex block (empty in TF), an index block, then a 48-byte
footer (``tensorflow/core/lib/io/format.h``: two varint ``BlockHandle``s
padded to 40 bytes, then the 64-bit magic ``0xdb4775248b80fb57`` as two
little-endian fixed32).  Every block is followed by a 5-byte trailer: one
compression-type byte (0 none, 1 snappy; ``table_options.h``) and the masked
crc32c of block contents *plus* that type byte (``TableBuilder::WriteRawBlock``,
checked in ``ReadBlock`` in ``format.cc``).  A block is a run of entries
``varint32 shared, varint32 non_shared, varint32 value_len, key_delta, value``
(prefix-compressed keys), then ``uint32 restarts[n]`` and ``uint32 n``
(``block_builder.cc`` / ``block.cc``); each restart point starts an entry with
``shared == 0``.  Index-block values are ``BlockHandle``s (``varint64 offset,
varint64 size``; ``BlockHandle::EncodeTo`` in ``format.cc``).

TensorFlow never compresses bundle indexes (``TableBuilderOptions()`` and
``BundleWriter::Finish`` in ``tensor_bundle.cc`` set ``kNoCompression``), so a
snappy block is refused with :class:`UnsupportedError` rather than decoded.

All protobufs are decoded by hand with a small wire-format parser; unknown
fields are skipped as protobuf requires.

Checksums (``tensorflow/core/lib/hash/crc32c.h``): crc32c (Castagnoli) values
are stored *masked*: ``((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)``.
:attr:`TensorInfo.crc32c` holds the **unmasked** value, i.e. exactly what
``google_crc32c.value(tensor_bytes)`` returns.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import google_crc32c
import numpy as np

from ..files import inputs as _inputs
from ..errors import InputError, UnsupportedError

#: bfloat16's two bytes until a bfloat16 tensor is read (:func:`_numpy`): ml_dtypes, a TF/JAX dependency that gives
#: it a NumPy dtype, takes 0.5-0.7 s to import here (``python -X importtime``: its C++ extension), which was 40% of
#: ``inspect big_ckpt``'s first call (1.4 s; the bench's inspect section) for a checkpoint that holds no bfloat16.
_BFLOAT16 = np.dtype("<u2")

__all__ = [
    "Bundle",
    "Malformed",
    "TensorInfo",
    "TensorNotFound",
    "checkpoint_files",
    "open_bundle",
    "proto_fields",
    "resolve_prefix",
    "unescape_text_bytes",
]

# --- constants, each from the TF source file named ---------------------------

#: ``Footer::kEncodedLength`` = 2 * ``BlockHandle::kMaxEncodedLength`` (20) + 8
#: (``tensorflow/core/lib/io/format.h``).
_FOOTER_LEN = 48
#: ``kTableMagicNumber`` (``format.h``).
_TABLE_MAGIC = 0xDB4775248B80FB57
#: ``kBlockTrailerSize``: 1 type byte + fixed32 masked crc (``format.h``).
_BLOCK_TRAILER = 5
#: ``CompressionType`` (``tensorflow/core/lib/io/table_options.h``).
_NO_COMPRESSION, _SNAPPY = 0, 1
#: ``kTensorBundleVersion`` / ``kTensorBundleMinProducer`` (``tensor_bundle.cc``).
_BUNDLE_CONSUMER_VERSION = 1
_BUNDLE_MIN_PRODUCER = 0
#: ``TensorShape::MaxDimensions()`` (``tensorflow/core/framework/tensor_shape.h``).
_MAX_RANK = 254
#: Index and ``checkpoint`` state files are read whole, after a size check from ``fstat``:
#: a bundle index holds ~50 bytes per tensor, so even a model with millions of variables stays
#: far below ``inputs.LIMITS["index"]`` (256 MiB); the state file is a few lines of text
#: (``inputs.LIMITS["state"]``, 1 MiB).  ``GRUCONV_MAX_BYTES`` raises both
#: (:func:`gruconv.files.inputs.limit`).
#: crc32c is computed in chunks because ``google_crc32c`` only accepts ``bytes``; 2 MiB, so a mapped
#: tensor's check holds a chunk's copy and its pages (not 2 x 8 MiB) whatever the tensor: the TF2 reader
#: checks each weight it streams this way (measured: a 19 M-parameter checkpoint's ``.keras`` conversion
#: peaked 87 MB with 8 MiB chunks, 78 MB with these; the staged route it replaced, 76 MB).
_CRC_CHUNK = 1 << 21

_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF

#: ``DataType`` enum (``tensorflow/core/framework/types.proto``) -> (name, dtype).
#: Explicitly little-endian: the header check below admits only LITTLE bundles.
_DTYPES: dict[int, tuple[str, np.dtype | None]] = {
    1: ("float32", np.dtype("<f4")),
    2: ("float64", np.dtype("<f8")),
    3: ("int32", np.dtype("<i4")),
    4: ("uint8", np.dtype("u1")),
    5: ("int16", np.dtype("<i2")),
    6: ("int8", np.dtype("i1")),
    7: ("string", None),
    8: ("complex64", np.dtype("<c8")),
    9: ("int64", np.dtype("<i8")),
    10: ("bool", np.dtype("u1")),  # one byte per element, 0 or 1
    14: ("bfloat16", _BFLOAT16),
    17: ("uint16", np.dtype("<u2")),
    18: ("complex128", np.dtype("<c16")),
    19: ("float16", np.dtype("<f2")),
    22: ("uint32", np.dtype("<u4")),
    23: ("uint64", np.dtype("<u8")),
}
_NP_BY_NAME = {name: dt for name, dt in _DTYPES.values()}


def _numpy(name: str) -> np.dtype | None:
    """The NumPy dtype a tensor of dtype ``name`` is read as: ``ml_dtypes.bfloat16`` for bfloat16 where ml_dtypes
    is installed (imported now, not with this module), its raw ``uint16`` bit patterns where not."""
    if name == "bfloat16":
        try:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:  # pragma: no cover - depends on the environment
            return _BFLOAT16
    return _NP_BY_NAME.get(name)


#: Names of the enum values we refuse, for messages only.
_TF_DTYPE_NAMES = {
    0: "DT_INVALID", 11: "DT_QINT8", 12: "DT_QUINT8", 13: "DT_QINT32",
    15: "DT_QINT16", 16: "DT_QUINT16", 20: "DT_RESOURCE", 21: "DT_VARIANT",
    24: "DT_FLOAT8_E5M2", 25: "DT_FLOAT8_E4M3FN", 26: "DT_FLOAT8_E4M3FNUZ",
    27: "DT_FLOAT8_E4M3B11FNUZ", 28: "DT_FLOAT8_E5M2FNUZ", 29: "DT_INT4",
    30: "DT_UINT4", 31: "DT_INT2", 32: "DT_UINT2", 33: "DT_FLOAT4_E2M1FN",
}

_DATA_FILE_RE = re.compile(r"^(?P<prefix>.+)\.data-(?P<shard>\d{5,})-of-(?P<num>\d{5,})$")


def _mask(crc: int) -> int:
    """``crc32c::Mask``: stored checksums are rotated and offset (``crc32c.h``)."""
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def _unmask(masked: int) -> int:
    """``crc32c::Unmask``: inverse of :func:`_mask`."""
    rot = (masked - _MASK_DELTA) & _U32
    return ((rot >> 17) | (rot << 15)) & _U32


def _crc32c(buf) -> int:
    """crc32c of a bytes-like object without copying it whole at once."""
    if isinstance(buf, bytes):
        return google_crc32c.value(buf)
    mv = memoryview(buf).cast("B")
    crc = 0
    for i in range(0, len(mv), _CRC_CHUNK):
        crc = google_crc32c.extend(crc, bytes(mv[i:i + _CRC_CHUNK]))
    return crc


def _crc32c_dropping(raw: np.ndarray, mm, offset: int) -> int:
    """:func:`_crc32c` of ``raw`` (a view of ``mm`` at ``offset``), dropping each chunk's mapped pages
    from the resident set once it is summed (``MADV_DONTNEED`` on the read-only shared file mapping; the
    pages stay in the page cache).  Without it, checking a large tensor (a 180 MiB opaque buffer) made the
    whole tensor resident at once: the streaming writer's peak was the checksum's."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None or not hasattr(mm, "madvise") or raw.size <= _CRC_CHUNK:
        return _crc32c(raw)
    mv = memoryview(raw).cast("B")
    crc = 0
    for i in range(0, len(mv), _CRC_CHUNK):
        crc = google_crc32c.extend(crc, bytes(mv[i:i + _CRC_CHUNK]))
        start = offset + i
        aligned = start - start % mmap.PAGESIZE
        end = min(offset + len(mv), start + _CRC_CHUNK)
        try:
            mm.madvise(advice, aligned, end - aligned)
        except (OSError, ValueError):
            pass  # only a hint: the chunk stays resident until release()
    return crc


class Malformed(Exception):
    """A low-level decoding failure, re-raised as InputError with context (by this module, and by
    :mod:`gruconv.readers.protos`, which walks GraphDefs with :func:`proto_fields`)."""


class TensorNotFound(InputError, KeyError):
    """The requested key is not in the bundle (also a :class:`KeyError`)."""


# --- wire-format primitives ---------------------------------------------------


def _varint(buf: bytes, pos: int, end: int, what: str, bits: int = 64) -> tuple[int, int]:
    """Decode one base-128 varint (``core::GetVarint64Ptr`` in ``coding.cc``)."""
    result = 0
    shift = 0
    max_shift = 7 * ((bits + 6) // 7)  # 10 bytes for 64 bits, 5 for 32
    while True:
        if pos >= end:
            raise Malformed(f"{what}: varint runs past the end of its data")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= max_shift:
            raise Malformed(f"{what}: varint longer than {max_shift // 7} bytes")
    if result >> bits:
        raise Malformed(f"{what}: varint value {result} does not fit in {bits} bits")
    return result, pos


def _signed(value: int, bits: int) -> int:
    """Two's-complement view of a protobuf int32/int64 varint."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def proto_fields(buf: bytes, what: str) -> Iterator[tuple[int, int, object]]:
    """Yield ``(field_number, wire_type, value)`` of a serialized protobuf.

    Wire types 0 (varint), 1 (fixed64), 2 (length-delimited) and 5 (fixed32)
    are supported; groups (3/4) never occur in TF's proto3 messages.  ``buf`` may be a
    ``memoryview``: length-delimited values are then views, not copies (a GraphDef walk of a large
    file copies nothing; :mod:`gruconv.readers.protos`).  Every length is checked against the
    bytes present before it is used, so a declared length past the end is :class:`Malformed`.
    """
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos, end, f"{what} field tag")
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise Malformed(f"{what}: field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos, end, f"{what} field {field}")
        elif wire == 1:
            if end - pos < 8:
                raise Malformed(f"{what} field {field}: fixed64 runs past the end")
            value = int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos, end, f"{what} field {field} length")
            if length > end - pos:
                raise Malformed(
                    f"{what} field {field}: length {length} runs past the end "
                    f"({end - pos} bytes left)")
            value = buf[pos:pos + length]
            pos += length
        elif wire == 5:
            if end - pos < 4:
                raise Malformed(f"{what} field {field}: fixed32 runs past the end")
            value = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise Malformed(f"{what} field {field}: unsupported wire type {wire}")
        yield field, wire, value


def _expect(wire: int, want: int, what: str, field: int) -> None:
    if wire != want:
        raise Malformed(f"{what} field {field}: wire type {wire}, expected {want}")


# --- protobuf messages --------------------------------------------------------


@dataclass
class _Header:
    num_shards: int = 0
    endianness: int = 0
    producer: int = 0
    min_consumer: int = 0
    bad_consumers: tuple = ()


def _parse_header(buf: bytes) -> _Header:
    """``BundleHeaderProto`` {1 num_shards int32, 2 endianness enum, 3 version
    VersionDef} (``tensor_bundle.proto``); ``VersionDef`` {1 producer int32,
    2 min_consumer int32, 3 repeated bad_consumers int32}
    (``tensorflow/core/framework/versions.proto``)."""
    h = _Header()
    version = b""
    for field, wire, value in proto_fields(buf, "BundleHeaderProto"):
        if field == 1:
            _expect(wire, 0, "BundleHeaderProto", field)
            h.num_shards = _signed(value, 32)
        elif field == 2:
            _expect(wire, 0, "BundleHeaderProto", field)
            h.endianness = _signed(value, 32)
        elif field == 3:
            _expect(wire, 2, "BundleHeaderProto", field)
            version += value  # repeated occurrences of a message field merge
    bad: list[int] = []
    for field, wire, value in proto_fields(version, "VersionDef"):
        if field == 1:
            _expect(wire, 0, "VersionDef", field)
            h.producer = _signed(value, 32)
        elif field == 2:
            _expect(wire, 0, "VersionDef", field)
            h.min_consumer = _signed(value, 32)
        elif field == 3:
            if wire == 0:
                bad.append(_signed(value, 32))
            else:  # proto3 packs repeated scalars
                _expect(wire, 2, "VersionDef", field)
                pos = 0
                while pos < len(value):
                    v, pos = _varint(value, pos, len(value), "VersionDef bad_consumers")
                    bad.append(_signed(v, 32))
    h.bad_consumers = tuple(bad)
    return h


@dataclass
class _Entry:
    dtype: int = 0
    shape: tuple = ()
    shard: int = 0
    offset: int = 0
    size: int = 0
    crc32c_masked: int = 0
    slices: int = 0


def _parse_shape(buf: bytes) -> tuple:
    """``TensorShapeProto`` {2 repeated Dim dim, 3 bool unknown_rank}; ``Dim``
    {1 int64 size, 2 string name} (``tensorflow/core/framework/tensor_shape.proto``).
    A stored tensor must have a known rank and non-negative dims (TF checks
    ``TensorShape::IsValid`` in ``BundleReader::GetBundleEntryProto``)."""
    dims: list[int] = []
    for field, wire, value in proto_fields(buf, "TensorShapeProto"):
        if field == 2:
            _expect(wire, 2, "TensorShapeProto", field)
            size = 0
            for f2, w2, v2 in proto_fields(value, "TensorShapeProto.Dim"):
                if f2 == 1:
                    _expect(w2, 0, "TensorShapeProto.Dim", f2)
                    size = _signed(v2, 64)
            if size < 0:
                raise Malformed(f"shape has an unknown or negative dimension ({size})")
            dims.append(size)
            if len(dims) > _MAX_RANK:
                raise Malformed(f"shape has more than {_MAX_RANK} dimensions")
        elif field == 3:
            _expect(wire, 0, "TensorShapeProto", field)
            if value:
                raise Malformed("shape has unknown rank")
    return tuple(dims)


def _parse_entry(buf: bytes) -> _Entry:
    """``BundleEntryProto`` {1 dtype enum, 2 shape TensorShapeProto, 3 shard_id
    int32, 4 offset int64, 5 size int64, 6 crc32c fixed32 (masked), 7 repeated
    TensorSliceProto slices} (``tensor_bundle.proto``)."""
    e = _Entry()
    shape = b""
    for field, wire, value in proto_fields(buf, "BundleEntryProto"):
        if field == 1:
            _expect(wire, 0, "BundleEntryProto", field)
            e.dtype = _signed(value, 32)
        elif field == 2:
            _expect(wire, 2, "BundleEntryProto", field)
            shape += value
        elif field == 3:
            _expect(wire, 0, "BundleEntryProto", field)
            e.shard = _signed(value, 32)
        elif field == 4:
            _expect(wire, 0, "BundleEntryProto", field)
            e.offset = _signed(value, 64)
        elif field == 5:
            _expect(wire, 0, "BundleEntryProto", field)
            e.size = _signed(value, 64)
        elif field == 6:
            _expect(wire, 5, "BundleEntryProto", field)
            e.crc32c_masked = value
        elif field == 7:
            _expect(wire, 2, "BundleEntryProto", field)
            e.slices += 1
    e.shape = _parse_shape(shape)
    return e


# --- SSTable ------------------------------------------------------------------


def _read_block(data: bytes, offset: int, size: int, limit: int, what: str) -> bytes:
    """Return the contents of the block at ``offset`` after checking its trailer.

    Mirrors ``ReadBlock`` (``tensorflow/core/lib/io/format.cc``): the masked
    crc32c in the trailer covers the block contents and the type byte.
    """
    if offset > limit or size > limit - offset or limit - offset - size < _BLOCK_TRAILER:
        raise Malformed(
            f"{what} (offset {offset}, {size} bytes + {_BLOCK_TRAILER}-byte trailer) "
            f"extends past the {limit} bytes before the footer; the file is truncated "
            f"or corrupt")
    end = offset + size
    stored = _unmask(int.from_bytes(data[end + 1:end + 5], "little"))
    actual = google_crc32c.value(data[offset:end + 1])
    if stored != actual:
        raise Malformed(
            f"{what} (offset {offset}, {size} bytes): block checksum mismatch "
            f"(stored {stored:#010x}, computed {actual:#010x}); the file is corrupt")
    ctype = data[end]
    if ctype == _SNAPPY:
        raise UnsupportedError(
            f"{what} is snappy-compressed; TensorFlow never writes compressed "
            f"bundle indexes (tensor_bundle.cc uses kNoCompression), so this file "
            f"was produced by another tool -- rewrite it with TensorFlow")
    if ctype != _NO_COMPRESSION:
        raise Malformed(f"{what}: unknown block compression type {ctype}")
    return data[offset:end]


def _block_entries(block: bytes, what: str) -> list[tuple[bytes, bytes]]:
    """Decode all ``(key, value)`` entries of one block (``block.cc``)."""
    n = len(block)
    if n < 4:
        raise Malformed(f"{what}: {n} bytes is too small for a block")
    num_restarts = int.from_bytes(block[n - 4:], "little")
    if num_restarts > (n - 4) // 4:
        raise Malformed(f"{what}: claims {num_restarts} restart points in {n} bytes")
    if num_restarts == 0:  # Block::NewIterator returns an empty iterator
        return []
    restarts_at = n - 4 * (1 + num_restarts)
    restarts = struct.unpack_from(f"<{num_restarts}I", block, restarts_at)

    out: list[tuple[bytes, bytes]] = []
    fresh_starts = set()  # offsets of entries with shared == 0
    key = b""
    pos = 0
    while pos < restarts_at:
        start = pos
        if restarts_at - pos >= 3 and (block[pos] | block[pos + 1] | block[pos + 2]) < 128:
            shared, non_shared, vlen = block[pos], block[pos + 1], block[pos + 2]
            pos += 3
        else:
            shared, pos = _varint(block, pos, restarts_at, f"{what} entry", 32)
            non_shared, pos = _varint(block, pos, restarts_at, f"{what} entry", 32)
            vlen, pos = _varint(block, pos, restarts_at, f"{what} entry", 32)
        if shared > len(key):
            raise Malformed(
                f"{what}: entry at offset {start} shares {shared} bytes with a "
                f"{len(key)}-byte previous key")
        if non_shared + vlen > restarts_at - pos:
            raise Malformed(f"{what}: entry at offset {start} runs past the end of the block")
        if shared == 0:
            fresh_starts.add(start)
        key = key[:shared] + block[pos:pos + non_shared]
        pos += non_shared
        out.append((key, block[pos:pos + vlen]))
        pos += vlen
    for r in restarts:
        if r not in fresh_starts and not (r == 0 and restarts_at == 0):
            raise Malformed(f"{what}: restart point {r} is not the start of an entry")
    return out


def _read_table(data: bytes) -> list[tuple[bytes, bytes]]:
    """All ``(key, value)`` pairs of an SSTable, in file order.

    Walks the index block (``Table::Open`` / ``two_level_iterator.cc``) and
    every data block it points to; checks keys are strictly increasing, as
    ``TableBuilder::Add`` asserts when writing.
    """
    n = len(data)
    if n < _FOOTER_LEN:
        raise Malformed(
            f"file is {n} bytes, shorter than the {_FOOTER_LEN}-byte SSTable footer "
            f"(empty or truncated)")
    limit = n - _FOOTER_LEN
    footer = data[limit:]
    magic = int.from_bytes(footer[40:48], "little")
    if magic != _TABLE_MAGIC:
        raise Malformed(
            f"not a TensorFlow checkpoint index: footer magic is {magic:#018x}, "
            f"expected {_TABLE_MAGIC:#018x} (truncated, or not an SSTable)")
    meta_off, p = _varint(footer, 0, 40, "footer metaindex handle")
    meta_size, p = _varint(footer, p, 40, "footer metaindex handle")
    idx_off, p = _varint(footer, p, 40, "footer index handle")
    idx_size, p = _varint(footer, p, 40, "footer index handle")

    # TF writes an empty metaindex and never reads it back; checking its
    # trailer anyway means every byte outside the footer padding is covered
    # by a checksum, so damage anywhere is reported instead of ignored.
    _block_entries(_read_block(data, meta_off, meta_size, limit, "metaindex block"),
                   "metaindex block")
    index = _read_block(data, idx_off, idx_size, limit, "index block")
    entries: list[tuple[bytes, bytes]] = []
    prev: bytes | None = None
    for sep, handle in _block_entries(index, "index block"):
        off, q = _varint(handle, 0, len(handle), "block handle")
        size, q = _varint(handle, q, len(handle), "block handle")
        if q != len(handle):
            raise Malformed("index block: block handle has trailing bytes")
        what = f"data block at offset {off}"
        for key, value in _block_entries(_read_block(data, off, size, limit, what), what):
            if prev is not None and key <= prev:
                raise Malformed(
                    f"{what}: keys are not in strictly increasing order "
                    f"({prev!r} then {key!r})")
            if key > sep:
                raise Malformed(f"{what}: key {key!r} is beyond its index entry {sep!r}")
            entries.append((key, value))
            prev = key
    return entries


# --- public API -----------------------------------------------------------------


#: Parsed indexes, keyed by the index file's bytes: a batch parses each checkpoint's index while
#: discovering it (the readers' sniffers), again when naming its output (the TF1 reader counts stacks)
#: and again in the conversion, ~1-3 ms each (profiled), and a forked batch worker inherits
#: the main process's parses.  The bytes are read every time (~0.1 ms for a small index) and are the
#: key, so a rewritten index can never get an old parse (a file identity with mtime/ctime could:
#: timestamps are coarser than an in-place rewrite).  Only a parse that succeeded is kept (a bad index
#: is refused every time); :class:`TensorInfo` is frozen, so the entries are shared safely.
_parsed_indexes: dict = {}
_parsed_bytes = 0
_PARSED_MAX = 1024
_PARSED_MAX_BYTES = 32 << 20  # index bytes kept at most (an index above an eighth of it: never kept)


@dataclass(frozen=True)
class TensorInfo:
    """Metadata of one tensor, from the index alone.

    ``dtype`` is a NumPy-style name (``'float32'``, ``'bfloat16'``, ``'bool'``,
    ``'string'`` ...) or ``'unsupported:<DataType enum>'``.  ``shard``,
    ``offset`` and ``size`` locate the bytes in ``PREFIX.data-<shard>-of-N``.
    ``crc32c`` is the **unmasked** crc32c of those bytes (what
    ``google_crc32c.value`` returns).  ``slices`` is non-zero for a partitioned
    variable (``BundleEntryProto.slices``), whose shard/offset/size/crc are
    meaningless (``tensor_bundle.proto``) and which :meth:`Bundle.read` refuses.
    """

    key: str
    dtype: str
    shape: tuple
    shard: int
    offset: int
    size: int
    crc32c: int
    slices: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes of this tensor in its data file (equals the in-memory size for
        fixed-width dtypes; for strings it includes the length prefix)."""
        return self.size

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def _unescape_text_proto(raw: str) -> str:
    """Undo C-style escapes of a text-format protobuf string literal (a UTF-8 text)."""
    return unescape_text_bytes(raw).decode("utf-8")


def unescape_text_bytes(raw: str) -> bytes:
    """The bytes of a text-format protobuf string literal's body (C-style escapes undone); ``ValueError``
    for a broken escape.  Also :mod:`gruconv.readers.protos`' (``.pbtxt`` graphs)."""
    out = bytearray()
    src = raw.encode("utf-8")
    simple = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("a"): 7, ord("b"): 8,
              ord("f"): 12, ord("v"): 11, ord("\\"): 92, ord("'"): 39, ord('"'): 34,
              ord("?"): 63}
    i = 0
    while i < len(src):
        c = src[i]
        if c != 92 or i + 1 >= len(src):
            out.append(c)
            i += 1
            continue
        c = src[i + 1]
        if c in simple:
            out.append(simple[c])
            i += 2
        elif 48 <= c <= 55:  # octal, up to 3 digits
            j = i + 1
            while j < len(src) and j < i + 4 and 48 <= src[j] <= 55:
                j += 1
            out.append(int(src[i + 1:j], 8) & 0xFF)
            i = j
        elif c in (ord("x"), ord("X")):
            j = i + 2
            while j < len(src) and j < i + 4 and chr(src[j]) in "0123456789abcdefABCDEF":
                j += 1
            if j == i + 2:
                raise ValueError("\\x without hex digits")
            out.append(int(src[i + 2:j], 16))
            i = j
        else:
            raise ValueError(f"unknown escape \\{chr(c)}")
    return bytes(out)


_STATE_RE = re.compile(
    r"""^[ \t]*model_checkpoint_path[ \t]*:[ \t]*(?:"((?:[^"\\\n]|\\.)*)"|'((?:[^'\\\n]|\\.)*)')""",
    re.MULTILINE)


def _is_file(path: Path) -> bool:
    """``Path.is_file`` that treats every OS error (name too long, embedded NUL,
    permission) as "no such file" instead of raising."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _index_exists(prefix: Path) -> bool:
    return _is_file(Path(str(prefix) + ".index"))


def _strip_suffix(path: Path, suffix: str) -> Path | None:
    """``path`` without ``suffix``, or None when nothing would be left of the name."""
    if path.name.endswith(suffix) and len(path.name) > len(suffix):
        return path.with_name(path.name[:-len(suffix)])
    return None


def _from_state_file(directory: Path, state: Path) -> Path:
    """Prefix named by a ``checkpoint`` file (a text-format ``CheckpointState``,
    ``tensorflow/python/checkpoint/checkpoint_management.py``); relative paths
    are relative to the directory, as ``get_checkpoint_state`` does."""
    raw = _inputs.read_bytes(state, "a `checkpoint` state file (CheckpointState text)", kind="state")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text; expected a CheckpointState text proto "
                         "with a model_checkpoint_path line", path=state) from None
    m = _STATE_RE.search(text)
    if not m:
        raise InputError("has no model_checkpoint_path entry; expected a CheckpointState "
                         "text proto such as `model_checkpoint_path: \"model.ckpt-100\"`",
                         path=state)
    try:
        name = _unescape_text_proto(m.group(1) if m.group(1) is not None else m.group(2))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"model_checkpoint_path is not a valid string literal ({e})",
                         path=state) from None
    if not name:
        raise InputError("model_checkpoint_path is empty", path=state)
    if "\0" in name:
        raise InputError("model_checkpoint_path contains a NUL byte", path=state)
    named = Path(name)
    target = named if named.is_absolute() else directory / named
    explicit = ("; pass the checkpoint prefix explicitly (e.g. DIR/model.ckpt-100) if you mean to "
                "read it")
    inside = _inside(directory, target)
    if not named.is_absolute() and not inside:
        raise InputError(
            f"model_checkpoint_path '{_inputs.display(name)}' points outside the checkpoint's "
            f"directory; refused" + explicit, path=state)
    if inside and _index_exists(target):
        return target
    # A checkpoint directory copied from another machine keeps absolute paths
    # that no longer exist; the files usually sit beside the state file.
    beside = directory / named.name
    if named.name and _index_exists(beside):
        return beside
    if not inside:
        raise InputError(
            f"model_checkpoint_path '{_inputs.display(name)}' is outside the checkpoint's directory "
            f"and {_inputs.display(beside)}.index does not exist; refused" + explicit, path=state)
    raise InputError(
        f"model_checkpoint_path names '{_inputs.display(name)}', but {_inputs.display(target)}.index "
        f"does not exist (nor {_inputs.display(beside)}.index)", path=state)


def _inside(directory: Path, target: Path) -> bool:
    """Whether prefix ``target`` lies in ``directory`` or below it, symlinks and ``..`` resolved
    (the prefix's own name is not resolved: it names files, not a directory)."""
    try:
        base = os.path.realpath(directory)
        parent = os.path.realpath(target.parent)
    except (OSError, ValueError):
        return False
    return parent == base or parent.startswith(base.rstrip(os.sep) + os.sep)


def checkpoint_files(path) -> list[Path]:
    """Every file of the checkpoint ``path`` names (any form :func:`resolve_prefix` accepts):
    the ``checkpoint`` state file when ``path`` is a directory holding one, ``P.index``,
    every ``P.data-*`` shard and ``P.meta`` where they exist.  For output-overlap checks."""
    p = Path(os.fspath(path))
    prefix = resolve_prefix(p)
    files = []
    if _is_dir(p) and _is_file(p / "checkpoint"):
        files.append(p / "checkpoint")
    files.append(Path(str(prefix) + ".index"))
    try:
        names = sorted(os.listdir(prefix.parent if str(prefix.parent) else "."))
    except OSError:
        names = []
    for n in names:
        m = _DATA_FILE_RE.match(n)
        if (m and m.group("prefix") == prefix.name) or n == prefix.name + ".meta":
            files.append(prefix.parent / n)
    return files


def saved_model_variables(directory) -> Path | None:
    """``DIR/variables/variables`` when ``directory`` is a SavedModel (``saved_model.pb`` or
    ``saved_model.pbtxt`` and the variables bundle's index), else None."""
    from ..model.saved_model import SAVED_MODEL_FILES, VARIABLES_PREFIX

    d = Path(os.fspath(directory))
    if not any(_is_file(d / name) for name in SAVED_MODEL_FILES):
        return None
    prefix = d / VARIABLES_PREFIX
    return prefix if _index_exists(prefix) else None


def resolve_prefix(path) -> Path:
    """Return the checkpoint prefix ``P`` (so ``P.index`` exists) for ``path``.

    Accepts the prefix itself, ``P.index``, any ``P.data-NNNNN-of-NNNNN``,
    ``P.meta`` (TF1 graph file saved beside it), or a directory: one holding a
    ``checkpoint`` state file (its ``model_checkpoint_path`` is used), else one
    holding exactly one ``*.index`` file (e.g. a SavedModel's ``variables/``), or a SavedModel
    directory (``saved_model.pb`` beside ``variables/variables.index``: its variables bundle,
    ``tensorflow/python/saved_model/constants.py``).
    Raises :class:`InputError` otherwise.
    """
    p = Path(os.fspath(path))
    if _is_dir(p) and (sm := saved_model_variables(p)) is not None:
        return sm
    if _is_dir(p):
        state = p / "checkpoint"
        if _is_file(state):
            return _from_state_file(p, state)
        try:
            indexes = sorted(i for i in p.glob("*.index")
                             if _is_file(i) and _strip_suffix(i, ".index"))
        except OSError as e:
            raise InputError(f"cannot list directory: {e.strerror or e}", path=p) from None
        if len(indexes) == 1:
            return _strip_suffix(indexes[0], ".index")
        if indexes:
            names = ", ".join(i.name for i in indexes[:5]) + (" ..." if len(indexes) > 5 else "")
            raise InputError(
                f"directory has no `checkpoint` file and {len(indexes)} .index files "
                f"({names}); pass one checkpoint prefix", path=p)
        raise InputError("directory has no `checkpoint` file and no *.index file; "
                         "not a TensorFlow checkpoint directory", path=p)

    candidates = [p]
    m = _DATA_FILE_RE.match(p.name)
    stripped = (_strip_suffix(p, ".index") or _strip_suffix(p, ".meta")
                or (p.with_name(m.group("prefix")) if m else None))
    if stripped is not None:
        candidates.insert(0, stripped)
    for prefix in candidates:
        if _index_exists(prefix):
            return prefix
    prefix = candidates[0]
    if _is_file(p):
        raise InputError(
            f"not a TensorFlow V2 checkpoint: {prefix}.index does not exist (expected a "
            f"checkpoint prefix, its .index or .data-NNNNN-of-NNNNN file, or a directory "
            f"with a `checkpoint` file; TF1 V1 single-file checkpoints are not supported)",
            path=p)
    raise InputError(f"no checkpoint found: neither this path nor {prefix}.index exists",
                     path=p)


class Bundle:
    """A TensorBundle opened for reading: index parsed eagerly, data read lazily.

    Opening reads only ``PREFIX.index`` (the whole file, which is small) and
    validates every entry: dtype/shape/size consistency, shard ids, header
    endianness and version.  Data files are opened per :meth:`read` and only
    ``[offset, offset + size)`` is read, after checking it lies inside the
    file.  No file handles stay open between calls, so :meth:`close` and the
    context-manager protocol only mark the bundle closed.

    Keys produced by partitioned saves for individual slices (binary keys
    starting with ``\\x00``, ``EncodeTensorNameSlice`` in
    ``tensorflow/core/util/saved_tensor_slice_util.cc``) are hidden, as
    ``tf.train.list_variables`` hides them; the full variable's key is listed
    with ``TensorInfo.slices > 0``.
    """

    def __init__(self, path, *, max_tensor_bytes: int | None = None):
        self.prefix: Path = resolve_prefix(path)
        self.index_path: Path = Path(str(self.prefix) + ".index")
        self.max_tensor_bytes = max_tensor_bytes
        self.closed = False
        self._infos: dict[str, TensorInfo] = {}
        self._hidden_bytes = 0
        self._maps: dict = {}  # shard -> mmap (view)
        self._load_index()

    # -- index --------------------------------------------------------------

    def _index_error(self, message: str, cls=InputError) -> Exception:
        return cls(message, path=self.index_path)

    def _load_index(self) -> None:
        data = _inputs.read_bytes(self.index_path, "a checkpoint index file", kind="index")
        hit = _parsed_indexes.get(data)
        if hit is not None:
            self.num_shards, infos, self._hidden_bytes = hit
            self._infos = dict(infos)
            return
        self._parse_index(data)
        global _parsed_bytes
        if len(data) <= _PARSED_MAX_BYTES // 8:
            if len(_parsed_indexes) >= _PARSED_MAX or _parsed_bytes + len(data) > _PARSED_MAX_BYTES:
                _parsed_indexes.clear()
                _parsed_bytes = 0
            _parsed_indexes[data] = (self.num_shards, dict(self._infos), self._hidden_bytes)
            _parsed_bytes += len(data)

    def _parse_index(self, data: bytes) -> None:
        if len(data) == 0:
            raise self._index_error("index file is empty (0 bytes)")
        try:
            entries = _read_table(data)
        except Malformed as e:
            raise self._index_error(str(e)) from None
        except UnsupportedError as e:
            raise self._index_error(e.message, UnsupportedError) from None

        if not entries or entries[0][0] != b"":
            raise self._index_error(
                "has no header entry (key \"\" holding BundleHeaderProto); not a "
                "TensorBundle index")
        try:
            header = _parse_header(entries[0][1])
        except Malformed as e:
            raise self._index_error(f"header entry: {e}") from None
        self._check_header(header)
        self.num_shards: int = header.num_shards

        for raw_key, value in entries[1:]:
            if raw_key.startswith(b"\x00"):
                # Slice of a partitioned variable; see the class docstring.
                try:
                    e = _parse_entry(value)
                except Malformed as err:
                    raise self._index_error(
                        f"slice entry {raw_key!r}: {err}") from None
                self._hidden_bytes += max(e.size, 0)
                continue
            try:
                key = raw_key.decode("utf-8")
            except UnicodeDecodeError:
                raise self._index_error(f"tensor key {raw_key!r} is not valid UTF-8") from None
            try:
                e = _parse_entry(value)
            except Malformed as err:
                raise self._index_error(f"tensor {key!r}: {err}") from None
            self._infos[key] = self._make_info(key, e)

    def _check_header(self, h: _Header) -> None:
        """Endianness and version as ``BundleReader::BundleReader`` checks them
        (``tensor_bundle.cc``; ``CheckVersions`` in
        ``tensorflow/core/framework/versions.cc``)."""
        if h.endianness == 1:
            raise self._index_error(
                "checkpoint was written on a big-endian machine; only little-endian "
                "bundles are supported", UnsupportedError)
        if h.endianness != 0:
            raise self._index_error(f"header has invalid endianness value {h.endianness}")
        if h.producer < _BUNDLE_MIN_PRODUCER:
            raise self._index_error(
                f"header producer version {h.producer} is below {_BUNDLE_MIN_PRODUCER}")
        if h.min_consumer > _BUNDLE_CONSUMER_VERSION:
            raise self._index_error(
                f"bundle requires reader version >= {h.min_consumer}; this reader "
                f"implements version {_BUNDLE_CONSUMER_VERSION} (written by a newer "
                f"TensorFlow with format changes)", UnsupportedError)
        if _BUNDLE_CONSUMER_VERSION in h.bad_consumers:
            raise self._index_error(
                f"bundle marks reader version {_BUNDLE_CONSUMER_VERSION} as incompatible",
                UnsupportedError)
        if h.num_shards < 0:
            raise self._index_error(f"header claims {h.num_shards} shards")

    def _make_info(self, key: str, e: _Entry) -> TensorInfo:
        name, np_dtype = _DTYPES.get(e.dtype, (f"unsupported:{e.dtype}", None))
        info = TensorInfo(key=key, dtype=name, shape=e.shape, shard=e.shard,
                          offset=e.offset, size=e.size, crc32c=_unmask(e.crc32c_masked),
                          slices=e.slices)
        if e.slices:  # shard/offset/size/crc are ignored for partitioned entries
            return info
        if e.dtype == 0:
            raise self._index_error(f"tensor {key!r}: dtype is DT_INVALID (0)")
        if e.offset < 0 or e.size < 0:
            raise self._index_error(
                f"tensor {key!r}: negative offset {e.offset} or size {e.size}")
        if not 0 <= e.shard < self.num_shards:
            raise self._index_error(
                f"tensor {key!r}: shard id {e.shard} is outside the header's "
                f"{self.num_shards} shard(s)")
        nelem = info.num_elements
        if np_dtype is not None:
            need = nelem * np_dtype.itemsize
            if need != e.size:
                raise self._index_error(
                    f"tensor {key!r}: shape {list(e.shape)} of {name} needs {need} bytes "
                    f"but the entry's size is {e.size}")
        elif name == "string":
            # Each element has at least a 1-byte varint length, and the lengths are
            # followed by their 4-byte checksum (WriteStringTensor).
            if e.size < (nelem + 4 if nelem else 0):
                raise self._index_error(
                    f"tensor {key!r}: string tensor of {nelem} elements cannot fit in "
                    f"{e.size} bytes")
        return info

    # -- mapping-like access ----------------------------------------------------

    def keys(self) -> list[str]:
        """Tensor keys in index (bytewise) order, header key ``""`` excluded."""
        return list(self._infos)

    def info(self, key: str) -> TensorInfo:
        try:
            return self._infos[key]
        except KeyError:
            raise TensorNotFound(f"tensor {key!r} is not in the checkpoint "
                                 f"({len(self._infos)} tensors)",
                                 path=self.index_path) from None

    def __contains__(self, key) -> bool:
        return key in self._infos

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(list(self._infos.values()))

    def __len__(self) -> int:
        return len(self._infos)

    def total_bytes(self) -> int:
        """Sum of the data-file bytes of all tensors, including the slices of
        partitioned variables (which are not listed as keys)."""
        return sum(i.size for i in self._infos.values() if not i.slices) + self._hidden_bytes

    def data_path(self, shard: int) -> Path:
        """``DataFilename`` (``naming.cc``): ``PREFIX.data-%05d-of-%05d``."""
        return Path(f"{self.prefix}.data-{shard:05d}-of-{self.num_shards:05d}")

    def close(self) -> None:
        self.closed = True
        self._maps.clear()  # arrays from view() keep their mapping alive

    def __enter__(self) -> "Bundle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Bundle({str(self.prefix)!r}, {len(self)} tensors, {self.num_shards} shard(s))"

    # -- data ---------------------------------------------------------------------

    def read(self, key: str, verify: bool = True) -> np.ndarray:
        """Return tensor ``key`` as a new, writable array of its dtype and shape.

        * ``bfloat16`` comes back as ``ml_dtypes.bfloat16`` when ``ml_dtypes`` is
          importable, otherwise as the raw ``uint16`` bit patterns.
        * ``bool`` bytes are normalized (any non-zero byte is ``True``).
        * ``string`` tensors come back as an object array of ``bytes``
          (layout from ``WriteStringTensor`` in ``tensor_bundle.cc``:
          varint64 lengths, masked crc32c of the lengths, then the bytes).
        * Partitioned variables and other dtypes raise :class:`UnsupportedError`.

        With ``verify`` the crc32c stored in the index is checked, as
        ``BundleReader::GetValue`` does; a mismatch raises :class:`InputError`
        naming the key.  The claimed byte range is checked against the data
        file's real size before anything is allocated.
        """
        info = self.info(key)
        if info.slices:
            raise UnsupportedError(
                f"tensor {key!r} is a partitioned variable saved as {info.slices} "
                f"slices; partitioned variables are not supported (re-save it "
                f"unpartitioned)", path=self.index_path)
        if info.dtype not in _NP_BY_NAME:
            enum = int(info.dtype.split(":")[1])
            raise UnsupportedError(
                f"tensor {key!r} has dtype {_TF_DTYPE_NAMES.get(enum, 'enum')} ({enum}), "
                f"which gruconv does not read", path=self.index_path)
        np_dtype = _numpy(info.dtype)
        if self.max_tensor_bytes is not None and info.size > self.max_tensor_bytes:
            raise InputError(
                f"tensor {key!r} is {info.size} bytes, over the limit of "
                f"{self.max_tensor_bytes} bytes (max_tensor_bytes)", path=self.index_path)

        raw = self._read_range(info)
        if info.dtype == "string":
            return self._decode_strings(info, raw, verify)
        if verify:
            self._check_crc(info, _crc32c(raw))
        if info.dtype == "bool":
            return np.not_equal(raw, 0).reshape(info.shape)
        return raw.view(np_dtype).reshape(info.shape)

    def view(self, key: str, verify: bool = True) -> np.ndarray:
        """Tensor ``key`` as a read-only array mapped from its data file (no copy).

        The same checks as :meth:`read` (size against the file, crc32c over the
        mapped bytes when ``verify``); ``string``, ``bool``, empty, partitioned
        and refused tensors go through :meth:`read`.  The data file must not
        change while the array is in use.  Pages it touches count in the
        process's RSS until :meth:`release`.
        """
        info = self.info(key)
        np_dtype = _numpy(info.dtype)
        if (info.slices or np_dtype is None or info.dtype == "bool" or info.size == 0
                or (self.max_tensor_bytes is not None and info.size > self.max_tensor_bytes)
                or info.size > _inputs.limit("tensor")):
            return self.read(key, verify)
        mm = self._mapped(info)
        raw = np.frombuffer(mm, dtype=np.uint8, count=info.size, offset=info.offset)
        if verify:
            self._check_crc(info, _crc32c_dropping(raw, mm, info.offset))
        return raw.view(np_dtype).reshape(info.shape)

    def release(self) -> None:
        """Drop the mapped data pages from this process's resident set.

        They stay in the page cache; arrays from :meth:`view` read them again
        when touched (``MADV_DONTNEED`` on a shared read-only file mapping)."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        for mm in self._maps.values():
            if mm is not None and advice is not None and hasattr(mm, "madvise"):
                mm.madvise(advice)

    def _open_shard(self, info: TensorInfo):
        path = self.data_path(info.shard)
        try:
            os.stat(path)
        except FileNotFoundError:
            raise InputError(
                f"data shard {info.shard} of {self.num_shards} is missing; it holds "
                f"tensor '{_inputs.display(info.key)}'", path=path) from None
        except (OSError, ValueError):
            pass  # open_regular says what is wrong
        try:
            return _inputs.open_regular(path, f"a checkpoint data shard (holding tensor "
                                              f"'{_inputs.display(info.key)}')")
        except InputError as e:
            if "Permission denied" in e.message or "cannot be read" in e.message:
                raise InputError(f"cannot open data file for tensor '{_inputs.display(info.key)}': "
                                 f"{e.message}", path=path) from None
            raise

    def _check_range(self, info: TensorInfo, file_size: int) -> None:
        """Refuse a claimed byte range beyond the data file before anything is allocated."""
        if info.offset > file_size or info.size > file_size - info.offset:
            raise InputError(
                f"tensor {info.key!r} claims bytes [{info.offset}, "
                f"{info.offset + info.size}) but the file is only {file_size} "
                f"bytes (truncated data file or corrupt index)", path=self.data_path(info.shard))

    def _mapped(self, info: TensorInfo):
        if info.shard not in self._maps:
            with self._open_shard(info) as f:
                try:
                    size = os.fstat(f.fileno()).st_size
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
                except (OSError, ValueError) as e:
                    raise InputError(f"cannot map data file for tensor {info.key!r}: {e}",
                                     path=self.data_path(info.shard)) from None
            self._maps[info.shard] = mm
        mm = self._maps[info.shard]
        self._check_range(info, len(mm) if mm is not None else 0)
        return mm

    def _read_range(self, info: TensorInfo) -> np.ndarray:
        path = self.data_path(info.shard)
        with self._open_shard(info) as f:
            try:
                self._check_range(info, os.fstat(f.fileno()).st_size)
                lim = _inputs.limit("tensor")
                if info.size > lim:  # a sparse data file can back any claim: bound the allocation
                    raise InputError(_inputs.over_limit(f"tensor '{_inputs.display(info.key)}'",
                                                        info.size, lim), path=path)
                buf = np.empty(info.size, dtype=np.uint8)
                f.seek(info.offset)
                got = 0
                view = memoryview(buf)
                while got < info.size:
                    n = f.readinto(view[got:])
                    if not n:
                        break
                    got += n
            except OSError as e:
                raise InputError(f"cannot read tensor {info.key!r}: {e.strerror or e}",
                                 path=path) from None
        if got != info.size:
            raise InputError(
                f"tensor {info.key!r}: read {got} of {info.size} bytes at offset "
                f"{info.offset}; the file shrank or is truncated", path=path)
        return buf

    def _check_crc(self, info: TensorInfo, actual: int) -> None:
        if actual != info.crc32c:
            raise InputError(
                f"tensor {info.key!r}: checksum mismatch (index says crc32c "
                f"{info.crc32c:#010x}, data bytes give {actual:#010x}); the data "
                f"file is corrupt", path=self.data_path(info.shard))

    def _decode_strings(self, info: TensorInfo, raw: np.ndarray, verify: bool) -> np.ndarray:
        """Decode ``WriteStringTensor``'s layout (``tensor_bundle.cc``); the
        checksum covers each length as uint32 LE (uint64 if it exceeds 2**32-1),
        then the 4 stored length-checksum bytes, then the string bytes."""
        nelem = info.num_elements
        out = np.empty(nelem, dtype=object)
        path = self.data_path(info.shard)
        if info.size == 0:  # ReadStringTensor returns early on size 0
            if verify:
                self._check_crc(info, 0)
            out[:] = [b""] * nelem
            return out.reshape(info.shape)
        data = raw.tobytes()
        size = len(data)
        lengths: list[int] = []
        packed = bytearray()
        pos = 0
        try:
            for _ in range(nelem):
                length, pos = _varint(data, pos, size, "string length")
                lengths.append(length)
                packed += length.to_bytes(4 if length <= _U32 else 8, "little")
        except Malformed as e:
            raise InputError(f"tensor {info.key!r}: {e}", path=path) from None
        if size - pos < 4:
            raise InputError(f"tensor {info.key!r}: string lengths leave no room for "
                             f"their checksum", path=path)
        crc = google_crc32c.value(bytes(packed))
        stored_len_crc = _unmask(int.from_bytes(data[pos:pos + 4], "little"))
        if verify and stored_len_crc != crc:
            raise InputError(
                f"tensor {info.key!r}: string-length checksum mismatch (stored "
                f"{stored_len_crc:#010x}, computed {crc:#010x}); the data file is corrupt",
                path=path)
        crc = google_crc32c.extend(crc, data[pos:pos + 4])
        pos += 4
        if sum(lengths) != size - pos:
            raise InputError(
                f"tensor {info.key!r}: string lengths add up to {sum(lengths)} bytes "
                f"but {size - pos} remain in the entry", path=path)
        if verify:
            self._check_crc(info, google_crc32c.extend(crc, data[pos:]))
        for i, length in enumerate(lengths):
            out[i] = data[pos:pos + length]
            pos += length
        return out.reshape(info.shape)


def numpy_dtype(info: TensorInfo) -> np.dtype | None:
    """The NumPy dtype :meth:`Bundle.read` returns for ``info``'s tensor (``bool`` for a bool tensor, object
    for a string one), or None for a dtype gruconv does not read."""
    if info.dtype == "bool":
        return np.dtype(bool)
    if info.dtype == "string":
        return np.dtype(object)
    return _numpy(info.dtype)


def open_bundle(path, *, max_tensor_bytes: int | None = None) -> Bundle:
    """Open a checkpoint given any form :func:`resolve_prefix` accepts.

    Reads only the ``.index`` file.  ``max_tensor_bytes``, if given, makes
    :meth:`Bundle.read` refuse any tensor whose stored size exceeds it.
    """
    return Bundle(path, max_tensor_bytes=max_tensor_bytes)
