"""The weight store of a TF2 object checkpoint: its Keras variables read straight from the TensorBundle
(:class:`gruconv.model.weights.WeightStore`), the only code that reads them for the writers.

The store speaks the legacy layout's terms (:class:`gruconv.readers.keras_h5.store.LegacyPairing`): one
group per top-level layer, each listing its weights in the order and under the names tf_keras's legacy
HDF5 writer gives them (``layer/kernel:0``, ``forward_<inner>/...``), so the layer scan, the Keras 3 slot
pairing and the legacy ``.h5`` output are the HDF5 reader's.  Which bundle key each weight is, is the
object mapping's fact (:func:`gruconv.readers.tf2.objects.weight_groups`); a weight's name in messages is
``/<group>/<weight name>``, what the legacy file would call it.  Nothing is written: the bundle is read in
place (:meth:`gruconv.readers.tfbundle.Bundle.view`, a block at a time where a writer streams gate blocks).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ...errors import InputError
from ...files import hdf5 as h5safe
from ..keras_h5.store import LegacyPairing
from ..tfbundle import numpy_dtype, open_bundle

#: The attributes of the legacy weights root this store's layout stands for, in HDF5's (name) order: what
#: tf_keras ``save_weights`` writes beside ``layer_names`` (the keras version says where the weights came from).
ROOT_ATTRS = (("backend", "tensorflow"), ("keras_version", "tf2-checkpoint"))


class BundleWeight:
    """A :class:`gruconv.model.weights.WeightRef` over one tensor of an open bundle."""

    __slots__ = ("_bundle", "key", "name", "_path", "_info", "_mapped")

    def __init__(self, bundle, key: str, name: str, path):
        self._bundle, self.key, self.name, self._path = bundle, key, name, path
        self._info = bundle.info(key)
        self._mapped = None

    @property
    def shape(self) -> tuple:
        return tuple(self._info.shape)

    @property
    def dtype(self):
        dt = numpy_dtype(self._info)
        return dt if dt is not None else np.dtype("V1")  # refused by check() and read()

    def check(self, *, numeric: bool = True) -> int:
        if numpy_dtype(self._info) is None:
            self._bundle.read(self.key)  # the bundle's own refusal of a dtype it does not read
        if numeric and self.dtype.kind not in "fiub":
            raise InputError(f"{self.name} has dtype {self.dtype}, expected a numeric tensor", path=self._path)
        return self._info.size

    def read(self):
        return self._bundle.read(self.key)

    def _view(self):
        if self._mapped is None:
            self._mapped = self._bundle.view(self.key)  # crc32c checked once, then read in place
        return self._mapped

    def block(self, key):
        """``tensor[key]``; a block of whole leading-axis extent (a gate's columns of a kernel) is gathered
        :data:`gruconv.files.hdf5.ROW_BLOCK_BYTES` of rows at a time, the mapped pages released after each,
        so the resident set holds the block and a few MiB of the mapping, never the whole tensor."""
        view = self._view()
        k = key if isinstance(key, tuple) else (key,)
        if view.ndim < 2 or not k or k[0] != slice(None) or Ellipsis in k:
            out = np.array(view[key])
            self._bundle.release()
            return out
        step = max(1, (h5safe.ROW_BLOCK_BYTES // 4) // max(1, view[0].nbytes))
        out = None
        for a in range(0, view.shape[0], step):
            part = view[(slice(a, a + step),) + k[1:]]
            if out is None:
                out = np.empty((view.shape[0],) + part.shape[1:], part.dtype)
            out[a:a + step] = part
            self._bundle.release()
        return out if out is not None else np.array(view[key])

    def blocks(self, block_bytes: int):
        yield from h5safe.blocks(_Tensor(self._view(), self.name), self._path, block_bytes)
        self._bundle.release()

    def copy_into(self, group, name: str, transform: Optional[Callable] = None) -> None:
        self.check(numeric=False)
        text = self.dtype.kind == "O"
        h5safe.write_array(lambda sel: self.read() if sel == () else self._view()[sel], self.shape, self.dtype,
                           group, name, transform, is_text=text)
        self._bundle.release()


class _Tensor:
    """A mapped tensor seen as :func:`gruconv.files.hdf5.blocks` reads a dataset (no chunks)."""

    chunks = None

    def __init__(self, array, name: str):
        self._a, self.name = array, name
        self.shape, self.ndim, self.size, self.dtype = array.shape, array.ndim, array.size, array.dtype

    def __getitem__(self, key):
        return self._a[key]


class BundleStore:
    """The :class:`gruconv.model.weights.WeightStore` of a TF2 object checkpoint: ``groups`` is
    ``[(group, [(weight name, bundle key)])]`` (:func:`gruconv.readers.tf2.objects.weight_groups`), ``path``
    what messages name (the input)."""

    def __init__(self, prefix: Path, groups: list, path: Path):
        self.prefix, self.groups, self.path = prefix, groups, path
        self.layer_names = [g for g, _ in groups]

    @contextlib.contextmanager
    def open(self):
        with open_bundle(self.prefix) as bundle:
            yield OpenBundleStore(self, bundle)


class OpenBundleStore(LegacyPairing):
    """A :class:`BundleStore` opened for one pass."""

    def __init__(self, store: BundleStore, bundle):
        self._bundle, self.path, self.layer_names = bundle, store.path, store.layer_names
        self._groups = {g: ws for g, ws in store.groups}
        self._keys = {f"/{g}/{w}": key for g, ws in store.groups for w, key in ws}

    def _layer(self, layer: str) -> list:
        if layer not in self._groups:
            raise InputError(f"no layer group {layer!r} among the checkpoint's layers", path=self.path)
        return self._groups[layer]

    def layer_weights(self, layer: str) -> list:
        return [w for w, _ in self._layer(layer)]

    def weight(self, layer: str, name: str) -> BundleWeight:
        key = dict(self._layer(layer)).get(name)
        if key is None:
            raise InputError(f"layer {layer!r} has no weight {name!r}", path=self.path)
        return BundleWeight(self._bundle, key, f"/{layer}/{name}", self.path)

    def rnn(self, rnn, direction: int) -> dict:
        return {role: BundleWeight(self._bundle, self._keys[name], name, self.path)
                for role, name in rnn.datasets[direction].items()}

    def refuse_top_level_weights(self) -> None:
        """A checkpoint's layout has no ``top_level_model_weights``: nothing to refuse."""

    # The legacy ``.h5`` output (:mod:`gruconv.writers.legacy_graph`) writes this layout as tf_keras's
    # ``save_weights`` would: the attributes its root and groups would carry.

    def copy_attrs_into(self, layer: Optional[str], dst) -> None:
        if layer is None:
            for name, value in ROOT_ATTRS:
                dst.attrs[name] = value
            dst.attrs["layer_names"] = np.array([g.encode() for g in self.layer_names], dtype="S")
        else:
            dst.attrs["weight_names"] = np.array([w.encode() for w in self.layer_weights(layer)], dtype="S")

    def has_top_level(self) -> bool:
        return False

    def copy_top_level_into(self, dst_root) -> None:
        raise InputError("a checkpoint has no top_level_model_weights", path=self.path)
