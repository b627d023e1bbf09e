"""Copied (non-cuDNN) weights above ``keras3.archive.STREAM_COPY_BYTES`` are streamed in blocks bounded by
bytes (issue 30; issue 38: pieces of a row when one row is larger): the written file must hold exactly what
the whole-array copy writes.  Here every copied weight is forced through the block route, in blocks of 16
bytes (a few rows, or pieces of a row: most fixture rows are wider), and compared array by array with
the default route on every Keras HDF5 fixture; then a planted fault in the block route (a dropped
block) is shown to change the output, so the comparison can fail."""

from __future__ import annotations

import zipfile

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
from gruconv import api
from gruconv.files import hdf5 as h5safe
from gruconv.keras3 import archive

CASES = sorted(p.relative_to(FIXTURES).as_posix() for d in ("keras", "keras_lstm", "keras_user")
               for p in (FIXTURES / d).glob("*.h5") if "weights" not in p.name)  # weights-only: need --config


def _weights(path) -> dict:
    out = {}
    with zipfile.ZipFile(path) as z, z.open("model.weights.h5") as member:
        with h5py.File(member, "r") as f:
            f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def _convert(name, out, monkeypatch, *, blocks: bool):
    with monkeypatch.context() as m:
        if blocks:
            m.setattr(archive, "STREAM_COPY_BYTES", 0)
            m.setattr(archive, "IN_MEMORY_MAX", 0)  # the on-disk route, where blocks are written as blocks
            m.setattr(archive, "ASSEMBLE_MAX", 0)  # gate-blocked kernels too
            m.setattr(h5safe, "ROW_BLOCK_BYTES", 2)  # copies go in pieces of 8 x this: 16 bytes, a few values
        api.convert(FIXTURES / name, out)
    return _weights(out) if out.exists() else None  # nothing to convert: no output either way


@pytest.mark.parametrize("name", CASES)
def test_block_copies_write_what_whole_copies_write(name, monkeypatch, tmp_path):
    whole = _convert(name, tmp_path / "whole.keras", monkeypatch, blocks=False)
    blocked = _convert(name, tmp_path / "blocks.keras", monkeypatch, blocks=True)
    if whole is None:
        assert blocked is None
        return
    assert whole.keys() == blocked.keys()
    for k in whole:
        assert whole[k].dtype == blocked[k].dtype and whole[k].shape == blocked[k].shape, k
        assert np.array_equal(whole[k], blocked[k]), k


def test_a_dropped_block_is_seen(monkeypatch, tmp_path):
    name = "keras/sequential.h5"
    whole = _convert(name, tmp_path / "whole.keras", monkeypatch, blocks=False)
    real = h5safe.blocks

    def drop_second(ds, path, block_bytes=h5safe.ROW_BLOCK_BYTES):
        for i, (where, b) in enumerate(real(ds, path, block_bytes)):
            yield where, (np.zeros_like(b) if i == 1 else b)

    monkeypatch.setattr(h5safe, "blocks", drop_second)
    blocked = _convert(name, tmp_path / "blocks.keras", monkeypatch, blocks=True)
    assert any(not np.array_equal(whole[k], blocked[k]) for k in whole)
