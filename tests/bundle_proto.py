"""Protobuf/SSTable primitives for crafting TensorBundle files in tests (valid and hostile).

Shared by ``test_tfbundle.py`` and ``make_bad_inputs.py``.  Wire format: protobuf varints and
length-delimited fields; TensorFlow's masked crc32c (``tensorflow/core/lib/hash/crc32c.h``).
"""

from __future__ import annotations


def _vint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _fv(field: int, value: int) -> bytes:
    """A varint field; zero values are omitted, as protobuf writers do."""
    return _vint(field << 3) + _vint(value) if value else b""


def _fb(field: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _vint(field << 3 | 2) + _vint(len(payload)) + payload


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
