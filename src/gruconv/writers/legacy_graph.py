"""The legacy Keras HDF5 file of a Keras graph with every CuDNNGRU / CuDNNLSTM replaced by GRU / LSTM.

Not a registered writer (it is not in :data:`gruconv.writers.registry.WRITERS`): the ``h5-weights``
writer writes a graph's weights with it (the Keras-built route no longer goes through a legacy file: it
builds from :func:`gruconv.keras3.config.translate`, :mod:`gruconv.writers.keras_route`).  The graph is read through its accessors only
(:class:`gruconv.model.canonical.KerasGraph`: ``open_file``, ``weight_group``, ``weight_names``,
``legacy_config``); every other layer, weight and attribute is copied unchanged (tf_keras
``saving/legacy/hdf5_format.py`` layout).
"""

from __future__ import annotations

import os
from typing import Optional

from ..errors import GruconvError, InputError, OutputError, first_line
from ..files import hdf5 as h5safe
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

    import h5py

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

    dst_file = hdf5_file(out_path)  # a full disk is an OSError here, not a crash in libhdf5 (issue 23)
    where = "the file's attributes"
    try:
        with doc.open_file() as src, dst_file as dst:
            sroot = doc.weight_group(src)
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
            h5safe.copy_attrs(sroot, droot, doc.path)
            if scales:
                dialects.stored_counts_agree(plan, {n: len(doc.weight_names(h5safe.child(sroot, n, doc.path, "group")))
                                                    for n in doc.layer_names})
            for lname in doc.layer_names:
                where = f"layer {lname!r}"
                sg = h5safe.child(sroot, lname, doc.path, "group")
                dg = droot.create_group(lname)
                h5safe.copy_attrs(sg, dg, doc.path)
                for position, wname in enumerate(doc.weight_names(sg)):
                    where = f"weight {lname}/{wname}"
                    sds = h5safe.resolve(sg, wname, doc.path, "dataset")
                    parent = os.path.dirname(wname)
                    dparent = dg.require_group(parent) if parent else dg
                    leaf = os.path.basename(wname)
                    if sds.name in replaced:
                        dparent.create_dataset(leaf, data=gru_array(sds.name))
                    else:
                        # rewritten, not H5Ocopy'd: guarded, checksums verified (issue 23)
                        factors = scales.get((lname, position))
                        transform = None if factors is None else (
                            lambda block, rows, f=factors, shape=sds.shape: dialects.scale_block(block, f, shape, rows))
                        h5safe.copy_dataset(sds, dparent, leaf, doc.path, transform)
            if (h5safe.child_exists(sroot, "top_level_model_weights", doc.path)
                    and "top_level_model_weights" not in doc.layer_names):
                where = "top_level_model_weights"
                h5safe.copy_group(h5safe.child(sroot, "top_level_model_weights", doc.path, "group"), droot,
                                  doc.path)
    except GruconvError as e:
        if e.path is None:
            raise type(e)(e.message, path=doc.path) from None
        raise
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
