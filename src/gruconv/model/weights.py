"""A Keras graph's stored weights as data: :class:`WeightRef` and :class:`WeightStore`.

A reader that hands the writers a Keras graph (:class:`gruconv.model.canonical.KerasGraph`) gives it one
store, the only code that walks the format's storage (the legacy HDF5 groups of ``readers/keras_h5/store.py``,
the ``model.weights.h5`` object paths of ``readers/tf_keras_zip.py``, a TF2 object checkpoint's TensorBundle in
``readers/tf2/store.py``).  The writers and :mod:`gruconv.keras3`
see references, never an open file: no attribute here returns an h5py, zipfile or bundle object.  A store
is opened once per pass (``with graph.store.open() as view``); its references are valid inside that block.

Why one interface for every store: :mod:`gruconv.keras3.archive` streams a graph's weights into Keras 3's
slots with one loop (``weight_arrays``) whatever the input's layout; what differs between layouts -- which
stored weight fills which Keras 3 slot -- is the store's own fact (:meth:`OpenStore.fill`): the legacy
file pairs a top-level layer's ``weight_names`` with the slots in the order Keras 3's legacy loader uses
(``keras/src/legacy/saving/legacy_h5_format.py`` ``load_weights_from_hdf5_group``), a tf_keras ``.keras``
names every variable by object path (``tf_keras/src/saving/saving_lib.py`` ``_save_state``).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional, Protocol


class WeightRef(Protocol):
    """One stored tensor, read on demand through the store's guards (bounded, checked, native byte order)."""

    #: the stored name as messages say it (an HDF5 object path)
    name: str
    shape: tuple
    dtype: object

    def check(self, *, numeric: bool = True) -> int:
        """Validate the stored tensor from its header (storage, declared size, dtype); its byte size."""

    def read(self):
        """The whole tensor (a NumPy array)."""

    def block(self, key):
        """``tensor[key]`` (a NumPy array), e.g. one gate's columns: the gate-block streaming of the large
        conversion reads a CuDNN kernel one ``(rows, units)`` block at a time."""

    def blocks(self, block_bytes: int) -> Iterator:
        """The tensor as ``(index, block)`` in C order, each block about ``block_bytes`` whatever the shape
        (whole leading-axis rows when a row fits, else pieces of a row: :func:`gruconv.files.hdf5.blocks`),
        in the stored byte order."""

    def copy_into(self, group, name: str, transform: Optional[Callable] = None) -> None:
        """Rewrite the tensor, with its stored attributes and compression, as ``group[name]`` of an HDF5
        output (``transform(block, rows)`` maps each block): a legacy ``.h5`` output keeps what the input
        stored (:func:`gruconv.files.hdf5.copy_dataset`)."""


class OpenStore(Protocol):
    """A store opened for one pass (what ``WeightStore.open()`` yields)."""

    def layer_weights(self, layer: str) -> list:
        """The names of the weights top-level ``layer`` stores, in stored order (checked)."""

    def weight(self, layer: str, name: str) -> WeightRef:
        """Weight ``name`` (one :meth:`layer_weights` lists) of top-level ``layer``."""

    def rnn(self, rnn, direction: int) -> dict:
        """``{role: WeightRef}`` of one CuDNN layer's direction (``rnn`` a reader's cuDNN layer)."""

    def fill(self, tops: list, config: dict) -> Iterable:
        """``(top, entries)`` per top-level layer of the Keras 3 plan ``tops``
        (:class:`gruconv.keras3.config.TopLayer`), ``entries`` yielding ``(slot, label, WeightRef)``: the
        stored weight that fills each slot of ``top.legacy_order`` (``label``: its name in messages).
        ``config``: the converted model's Keras 3 config (a layout that pairs by object path needs it).
        A stored weight with no slot, or a slot with none, is one :class:`gruconv.errors.InputError`."""


class WeightStore(Protocol):
    """Where a Keras graph's weights are stored; opened once per pass."""

    def open(self):
        """A context manager yielding an :class:`OpenStore`."""
