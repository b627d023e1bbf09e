"""``files.hdf5.blocks``: blocks bounded by bytes for any shape (issue 38 point 5), in C order, each
``ds[index] == block``; a row wider than the bound is cut, a narrow one is read whole-row as before."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from gruconv.files import hdf5 as h5safe


@pytest.mark.parametrize("shape,chunks", [((5, 1000), None), ((5, 1000), (1, 64)), ((3, 4, 50), None),
                                          ((7,), None), ((), None), ((0, 4), None), ((40, 3), None)])
def test_blocks_are_bounded_and_cover_the_tensor_in_order(tmp_path, shape, chunks):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    p = tmp_path / "t.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=a, chunks=chunks)
    bound = 256  # bytes: 64 float32
    with h5py.File(p, "r") as f:
        ds = f["x"]
        got = list(h5safe.blocks(ds, p, bound))
        flat = b"".join(b.tobytes() for _, b in got)
        for where, b in got:
            assert np.array_equal(a[where] if where else a[()], b)
            if a.size and chunks is None:
                assert b.nbytes <= max(bound, a.dtype.itemsize)
    assert flat == a.tobytes()  # C order: the digest of the blocks is the digest of the tensor


def test_a_wide_row_is_cut_and_a_planted_whole_row_reader_breaks_the_bound(tmp_path):
    """The bound holds on a (2, 10_000) tensor (40 kB rows, 4 kB bound); the whole-row rule it replaced
    (one row a block) would not: shown on the same tensor."""
    a = np.ones((2, 10_000), np.float32)
    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        f["x"] = a
    with h5py.File(p, "r") as f:
        sizes = [b.nbytes for _, b in h5safe.blocks(f["x"], p, 4096)]
        whole_rows = [f["x"][i:i + max(1, 4096 // (10_000 * 4))].nbytes for i in range(2)]
    assert max(sizes) <= 4096 and sum(sizes) == a.nbytes
    assert max(whole_rows) > 4096
