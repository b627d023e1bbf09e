"""The weight store of a legacy Keras HDF5 file: the only code that walks ``model_weights/<layer>/weight_names``
for the writers (:class:`gruconv.model.weights.WeightStore`).

Layout (tf_keras ``src/saving/legacy/hdf5_format.py`` ``save_weights_to_hdf5_group``): the per-layer groups
sit in ``model_weights`` of a full model file, at the root of a ``save_weights`` file; each group lists its
datasets in the attribute ``weight_names`` (in ``layer.weights`` order); ``top_level_model_weights`` holds
weights of the model object itself (empty for a Sequential/functional model).  Every object is reached
through :mod:`gruconv.files.hdf5`'s guards (hard links only, checked headers, bounded reads).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ...errors import InputError, first_line
from ...files import hdf5 as h5safe


class H5Weight:
    """A :class:`gruconv.model.weights.WeightRef` over one dataset of an open HDF5 file (private to the
    stores: the dataset is never handed out)."""

    __slots__ = ("_ds", "_path", "name")

    def __init__(self, ds, path):
        self._ds, self._path, self.name = ds, path, ds.name

    @property
    def shape(self) -> tuple:
        return tuple(self._ds.shape)

    @property
    def dtype(self):
        return self._ds.dtype

    def check(self, *, numeric: bool = True) -> int:
        return h5safe.check_dataset(self._ds, self._path, numeric=numeric)

    def read(self):
        return h5safe.read_dataset(self._ds, self._path)

    def block(self, key):
        try:
            return np.asarray(self._ds[key])
        except (OSError, RuntimeError, ValueError, TypeError, KeyError) as e:
            raise InputError(f"{self.name} cannot be read ({first_line(e)})", path=self._path) from None

    def blocks(self, block_bytes: int):
        return h5safe.blocks(self._ds, self._path, block_bytes)

    def copy_into(self, group, name: str, transform: Optional[Callable] = None) -> None:
        h5safe.copy_dataset(self._ds, group, name, self._path, transform)


def weight_groups(root, path: Path, layer_names: list) -> dict:
    """``{top-level layer name: [(weight name, WeightRef)]}``, weight order as stored: what the reader's layer
    scan (:func:`gruconv.readers.keras_h5.scan_groups`) reads.  Every weight, GRU or not, is checked from its
    header here: Keras reads the others in full."""
    out = {}
    for lname in layer_names:
        g = h5safe.child(root, lname, path, "group")
        entries = []
        for wname in weight_names_of(g, path):
            ref = H5Weight(h5safe.resolve(g, wname, path, "dataset"), path)
            ref.check(numeric=False)
            entries.append((wname, ref))
        out[lname] = entries
    return out


def weight_names_of(group, path) -> list:
    """A layer group's ``weight_names`` attribute, checked: a list of distinct strings."""
    names = h5safe.read_attr(group, "weight_names", []) or []
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputError(f"{group.name}: attribute 'weight_names' is not a list of strings", path=path)
    dup = first_duplicate(names)
    if dup is not None:
        raise InputError(f"{group.name}: attribute 'weight_names' lists {dup!r} twice", path=path)
    return names


def first_duplicate(names: list) -> Optional[str]:
    seen = set()
    for n in names:
        if n in seen:
            return n
        seen.add(n)
    return None


class LegacyStore:
    """The :class:`gruconv.model.weights.WeightStore` of a legacy Keras HDF5 file (``kind`` ``"model"``:
    groups under ``model_weights``; ``"weights"``: at the root); ``layer_names`` its ``layer_names``."""

    def __init__(self, path: Path, kind: str, layer_names: list, opener: Callable):
        self.path, self.kind, self.layer_names, self._opener = path, kind, layer_names, opener

    @contextlib.contextmanager
    def open(self):
        with self._opener() as f:
            root = h5safe.child(f, "model_weights", self.path, "group") if self.kind == "model" else f
            yield OpenLegacyStore(self, f, root)


class LegacyPairing:
    """Keras 3's legacy loader's pairing of stored weights with slots, for a store in the legacy layout's
    terms (top-level layer groups, each listing its weights in stored order): the legacy HDF5 file here,
    a TF2 object checkpoint's bundle (:mod:`gruconv.readers.tf2.store`).  A subclass gives ``path``,
    ``layer_names`` (the stored groups), :meth:`layer_weights`, :meth:`weight` and
    :meth:`refuse_top_level_weights`."""

    def fill(self, tops: list, config: dict):
        """Keras 3's legacy loader's pairing: a top-level layer's stored weights, in ``weight_names`` order,
        fill its slots in :attr:`gruconv.keras3.config.TopLayer.legacy_order`; the layer's group must exist
        and hold as many weights as Keras 3's layer has.  ``top_level_model_weights`` must be empty
        (:meth:`refuse_top_level_weights`)."""
        self.refuse_top_level_weights()
        names = set(self.layer_names)
        for top in tops:
            yield top, self._entries(top, names)

    def _entries(self, top, names: set):
        order = top.legacy_order
        if not order:
            return
        if top.name not in names:
            raise InputError(f"layer {top.name!r} has {len(order)} weight(s) but no weight group in the file",
                             path=self.path)
        wnames = self.layer_weights(top.name)
        if len(wnames) != len(order):
            raise InputError(f"layer {top.name!r}: the file holds {len(wnames)} weight(s), Keras 3's "
                             f"{top.name} has {len(order)}", path=self.path)
        for slot, wname in zip(order, wnames):
            yield slot, wname, self.weight(top.name, wname)


class OpenLegacyStore(LegacyPairing):
    """A :class:`LegacyStore` opened for one pass."""

    def __init__(self, store: LegacyStore, f, root):
        self._store, self._f, self._root, self.path = store, f, root, store.path
        self.layer_names = store.layer_names

    def _group(self, layer: str):
        return h5safe.child(self._root, layer, self.path, "group")

    def layer_weights(self, layer: str) -> list:
        return weight_names_of(self._group(layer), self.path)

    def weight(self, layer: str, wname: str) -> H5Weight:
        """Weight ``wname`` of top-level ``layer`` (a name its ``weight_names`` lists)."""
        return H5Weight(h5safe.resolve(self._group(layer), wname, self.path, "dataset"), self.path)

    def rnn(self, rnn, direction: int) -> dict:
        return {role: H5Weight(h5safe.resolve(self._f, name, self.path, "dataset"), self.path)
                for role, name in rnn.datasets[direction].items()}

    def refuse_top_level_weights(self) -> None:
        """A legacy file's ``top_level_model_weights`` group holds weights of the model object itself
        (tf_keras writes it, empty, for every Sequential/functional model:
        ``tf_keras/src/saving/legacy/hdf5_format.py`` ``save_weights_to_hdf5_group``).  A Keras 3
        Sequential/functional model has no weights of its own, and Keras 3's legacy loader refuses a
        non-empty group for it ("top-level weight count mismatch"), so a member there is refused here too,
        named, before anything is written (such a member can also be a link or external storage pointing
        outside the file).  Only names are listed: nothing is resolved or read."""
        if not h5safe.child_exists(self._root, "top_level_model_weights", self.path):
            return
        group = h5safe.child(self._root, "top_level_model_weights", self.path, "group")
        members = sorted(group.keys())
        if members:
            raise InputError(f"top_level_model_weights/{members[0]}: the file holds {len(members)} weight(s) of "
                             "the model object itself, which a Keras 3 Sequential/functional model has no place "
                             "for; refused", path=self.path)

    # The legacy ``.h5`` output (:mod:`gruconv.writers.legacy_graph`) keeps this layout: what it copies.

    def copy_attrs_into(self, layer: Optional[str], dst) -> None:
        """The attributes of the weights root (``layer`` None) or of top-level ``layer``'s group, copied to
        the HDF5 object ``dst`` (:func:`gruconv.files.hdf5.copy_attrs`)."""
        h5safe.copy_attrs(self._root if layer is None else self._group(layer), dst, self.path)

    def has_top_level(self) -> bool:
        """Whether ``top_level_model_weights`` is stored (and is not a layer's group)."""
        return (h5safe.child_exists(self._root, "top_level_model_weights", self.path)
                and "top_level_model_weights" not in self._store.layer_names)

    def copy_top_level_into(self, dst_root) -> None:
        """``top_level_model_weights`` copied under ``dst_root`` (:func:`gruconv.files.hdf5.copy_group`)."""
        h5safe.copy_group(h5safe.child(self._root, "top_level_model_weights", self.path, "group"), dst_root,
                          self.path)
