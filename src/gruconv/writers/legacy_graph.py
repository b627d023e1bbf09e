"""The legacy Keras HDF5 file of a Keras graph with every CuDNNGRU / CuDNNLSTM replaced by GRU / LSTM.

Not a registered writer (it is not in :data:`gruconv.writers.registry.WRITERS`): the ``h5-weights``
writer writes a graph's weights with it (the Keras-built route no longer goes through a legacy file: it
builds from :func:`gruconv.keras3.config.translate`, :mod:`gruconv.writers.keras_route`).  The graph is read through its accessors and its legacy
weight store only (:class:`gruconv.model.canonical.KerasGraph` ``store``, ``legacy_config``:
:class:`gruconv.readers.keras_h5.store.OpenLegacyStore` copies what this layout stores); every other
layer, weight and attribute is copied unchanged (tf_keras ``saving/legacy/hdf5_format.py`` layout).
"""

from __future__ import annotations

import os
from typing import Optional

from ..errors import InputError, OutputError, about, first_line
from ..keras3 import config as keras3_config
from ..keras3 import dialects
from ..model.keras_layout import WEIGHT_ROLES
from ..model.keras_layout import to_keras as keras_arrays


def write(doc, out_path, *, include_model: bool = True, include_training: bool = True,
          notes: Optional[list] = None) -> dict:
    """Write a legacy Keras HDF5 file with GRUs / LSTMs in place of CuDNNGRUs / CuDNNLSTMs.

    ``include_model``: write ``model_config`` (a full model file); otherwise a
    weights-only file (what ``save_weights`` writes).  Optimizer state is never
    copied: its slots belong to the cuDNN layers' weight layout.  ``notes`` receives a line per layer whose
    weights are rescaled to keep Keras 2's semantics (:mod:`gruconv.keras3.dialects`).  Returns
    ``{CuDNNGRU/CuDNNLSTM path: number of NaN/Inf weight values}`` (counted on the way,
    so the weights are read once).
    """
    import json

    # dataset name -> (pseudo-layer params, role index); each direction is transformed when its first
    # dataset is written and dropped with the next, so only one layer's GRU arrays exist at a time.
    replaced = {}
    for rnn in doc.rnns:
        for d, roles in enumerate(rnn.datasets):
            for i, role in enumerate(WEIGHT_ROLES):
                replaced[roles[role]] = (rnn, d, i)
    current: dict = {}
    nonfinite: dict = {}
    # weights feeding a function Keras 3 computes otherwise (Keras 2's hard_sigmoid), rescaled so that the
    # architecture with GRU in place of CuDNNGRU computes in Keras 3 what the original did (keras3/dialects.py)
    plan = keras3_config.keras2_plan(doc.model_config) if doc.model_config is not None else []
    scales = dialects.scales(plan)
    if notes is not None:
        notes.extend(dialects.rescale_notes(plan))

    def gru_array(name):
        rnn, d, i = replaced[name]
        if current.get("key") != (id(rnn), d):
            previous = current.get("rnn")
            if previous is not None and previous is not rnn:
                previous.release()
            current.clear()
            current.update(key=(id(rnn), d), rnn=rnn, arrays=keras_arrays(rnn.stack.params[d], rnn.shape.cell))
            nonfinite[rnn.path] = rnn.stack.nonfinite_count()
        return current["arrays"][i]

    from ..files.outputs import hdf5_file

    dst_file = hdf5_file(out_path)  # a full disk is an OSError here, not a crash in libhdf5
    where = "the file's attributes"
    try:
        with about(doc.path), doc.store.open() as src, dst_file as dst:
            if include_model and doc.model_config is not None:
                dst.attrs["keras_version"] = doc.keras_version or "2.x"
                dst.attrs["backend"] = doc.backend or "tensorflow"
                dst.attrs["model_config"] = json.dumps(
                    doc.legacy_config()).encode("utf-8")
                if include_training and doc.training_config:
                    dst.attrs["training_config"] = doc.training_config.encode("utf-8")
                droot = dst.create_group("model_weights")
            else:
                droot = dst
            src.copy_attrs_into(None, droot)
            if scales:
                dialects.stored_counts_agree(plan, {n: len(src.layer_weights(n)) for n in doc.layer_names})
            for lname in doc.layer_names:
                where = f"layer {lname!r}"
                dg = droot.create_group(lname)
                src.copy_attrs_into(lname, dg)
                wnames = src.layer_weights(lname)
                for position, wname in enumerate(wnames):
                    where = f"weight {lname}/{wname}"
                    ref = src.weight(lname, wname)
                    parent = os.path.dirname(wname)
                    dparent = dg.require_group(parent) if parent else dg
                    leaf = os.path.basename(wname)
                    if ref.name in replaced:
                        dparent.create_dataset(leaf, data=gru_array(ref.name))
                    else:
                        # rewritten, not H5Ocopy'd: guarded, checksums verified
                        factors = scales.get((lname, position))
                        transform = None if factors is None else (
                            lambda block, rows, f=factors, shape=ref.shape: dialects.scale_block(block, f, shape, rows))
                        ref.copy_into(dparent, leaf, transform)
            if src.has_top_level():
                where = "top_level_model_weights"
                src.copy_top_level_into(droot)
    except OSError as e:
        import errno

        if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO):  # the output's disk, not the input
            raise OutputError(f"cannot write the converted file ({e.strerror})", path=out_path) from None
        raise InputError(f"cannot copy {where[:200]} into the converted file ({first_line(e)})",
                         path=doc.path) from None
    except (RuntimeError, KeyError, ValueError, TypeError) as e:
        raise InputError(f"cannot copy {where[:200]} into the converted file ({first_line(e)})",
                         path=doc.path) from None
    finally:
        if current.get("rnn") is not None:
            current["rnn"].release()
    return nonfinite
