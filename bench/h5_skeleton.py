#!/usr/bin/env python
"""Carry a large legacy Keras HDF5 file to a machine without TensorFlow: strip its weights, refill them.

The GPU machines have no TensorFlow (so no tf_keras writer) and take at most 64 MiB of files, while the
45.7 M-parameter benchmark model (``bench/make_large.py h5``) is 189 MB.  ``shrink`` copies the file
that tf_keras wrote with every dataset replaced by an empty placeholder carrying its shape and dtype
(all groups and attributes, ``model_config`` and ``weight_names`` included, unchanged); ``inflate``
writes the datasets back with seeded uniform(-0.1, 0.1) values (recurrent blocks scaled so the GRU is
not chaotic).  The refilled file has the writer's structure and the benchmark's size; only the values
differ from ``make_large.py``'s, which no timing depends on.

    python bench/h5_skeleton.py shrink big.h5 big.skel.h5
    python bench/h5_skeleton.py inflate big.skel.h5 big.h5 [--seed 0]
"""

from __future__ import annotations

import argparse

import h5py
import numpy as np


def _copy_attrs(src, dst) -> None:
    for k, v in src.attrs.items():
        dst.attrs[k] = v


def shrink(src_path: str, dst_path: str) -> None:
    with h5py.File(src_path, "r") as src, h5py.File(dst_path, "w") as dst:
        _copy_attrs(src, dst)

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                _copy_attrs(obj, dst.require_group(name))
            else:
                parent = dst.require_group(name.rsplit("/", 1)[0]) if "/" in name else dst
                d = parent.create_dataset(name.rsplit("/", 1)[-1], shape=(0,), dtype=obj.dtype)
                d.attrs["skeleton_shape"] = np.asarray(obj.shape, dtype=np.int64)
                _copy_attrs(obj, d)

        src.visititems(visit)


def inflate(src_path: str, dst_path: str, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with h5py.File(src_path, "r") as src, h5py.File(dst_path, "w") as dst:
        _copy_attrs(src, dst)

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                _copy_attrs(obj, dst.require_group(name))
                return
            shape = tuple(int(n) for n in obj.attrs["skeleton_shape"])
            scale = 0.03 if "recurrent" in name else 0.1
            data = rng.uniform(-scale, scale, size=shape).astype(obj.dtype)
            parent = dst.require_group(name.rsplit("/", 1)[0]) if "/" in name else dst
            d = parent.create_dataset(name.rsplit("/", 1)[-1], data=data)
            for k, v in obj.attrs.items():
                if k != "skeleton_shape":
                    d.attrs[k] = v

        src.visititems(visit)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["shrink", "inflate"])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.command == "shrink":
        shrink(a.src, a.dst)
    else:
        inflate(a.src, a.dst, a.seed)


if __name__ == "__main__":
    main()
