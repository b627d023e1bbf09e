"""Writing what a TF 1.x checkpoint converts to: one ``.keras`` model per stack, and ``rest.npz``.

Models are built by :func:`gruconv.formats.keras3.build_stack_model` (GRU or
LSTM layers; the one Keras boundary).  Every other tensor of the checkpoint
goes to ``rest.npz``: a plain NumPy archive whose member names are derived
from the tensor names but made safe (no ``/`` or ``\\``, no ``..``, printable
ASCII, unique; :func:`npz_member_names`), with the original names kept in
its ``__manifest__.json`` member (member -> tensor name).

Weights instead of a model (one stack): a ``.h5``/``.hdf5`` name or ``--format h5-weights``
writes the legacy Keras weights layout with h5py alone (no Keras, no TensorFlow:
:func:`_write_legacy_weights`); a ``.weights.h5`` name or ``--format keras-weights`` writes Keras 3's
own weights file from the built model, as for Keras HDF5 inputs.
"""

from __future__ import annotations

import contextlib
import json
import re
import zipfile
from pathlib import Path
from typing import Optional

import numpy as np

from ...errors import OutputError, UnsupportedError, UsageError
from ...results import ConvertResult, Options
from .names import FORMAT, file_stem
from .reading import CheckpointDoc, CheckpointStack, _Reader, _cells_text, _require_shape, _rnn_entry, input_files

#: The rest.npz member that maps each array's name (``np.load(...).files``) to its tensor name.
REST_MANIFEST = "__manifest__.json"
_MEMBER_MAX = 180


def npz_member_names(keys: list) -> list:
    """A safe, unique ``np.load`` name per tensor key (the member is that name + ``.npy``).

    Tensor names come from an untrusted file; zip member names become paths when the archive is
    unpacked (``unzip``, ``zipfile.extractall``).  So: ``/`` becomes ``__`` (as in the ``.keras``
    file names), every byte outside printable ASCII ``[A-Za-z0-9_.-]`` (``\\``, ``:``, spaces,
    control characters, non-ASCII) becomes ``_``, runs of dots and a leading dot become ``_``
    (no ``..``, no hidden file), an empty or over-long name is replaced or shortened with a hash,
    and names equal up to case get ``_2``, ``_3`` ... (case-insensitive file systems).
    """
    import hashlib

    out, used = [], set()
    for key in keys:
        name = re.sub(r"[^A-Za-z0-9_.\-]", "_", key.replace("/", "__"))
        name = re.sub(r"\.{2,}", lambda m: "_" * len(m[0]), name)
        if name.startswith("."):
            name = "_" + name[1:]
        if not name or name.lower() == REST_MANIFEST[:-5].lower():
            name = "_" + name
        if len(name) > _MEMBER_MAX:
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            name = f"{name[:_MEMBER_MAX - 13]}_{digest}"
        base, n = name, 1
        while name.lower() in used:
            n += 1
            name = f"{base}_{n}"
        used.add(name.lower())
        out.append(name)
    return out


def _npz_array(arr: np.ndarray, key: str, warnings: list) -> tuple:
    """(array, allow_pickle) for np.lib.format.write_array, keeping the tensor's bytes."""
    if arr.dtype == object:  # TF strings: bytes objects
        items = list(arr.reshape(-1))
        if all(isinstance(v, bytes) and not v.endswith(b"\x00") for v in items):
            width = max((len(v) for v in items), default=1) or 1
            return np.array(items, dtype=f"S{width}").reshape(arr.shape), False
        warnings.append(f"rest.npz: string tensor {key!r} stored as a pickled object array "
                        f"(np.load(..., allow_pickle=True))")
        return arr, True
    if arr.dtype.kind == "V" or arr.dtype.name == "bfloat16":
        warnings.append(f"rest.npz: {arr.dtype.name} tensor {key!r} stored as its raw uint{8 * arr.dtype.itemsize} "
                        f"bit patterns")
        return arr.view(f"<u{arr.dtype.itemsize}"), False
    return arr, False


def _write_rest(r: _Reader, keys: list, target: Path, force: bool, warnings: list) -> None:
    """Every tensor of ``keys`` into ``target`` (an ``.npz``), under :func:`npz_member_names`, plus
    :data:`REST_MANIFEST`: ``{"tensors": {name: tensor key}}`` for the members written."""
    from ...outputs import atomic_path

    written = {}
    with atomic_path(target, force=force, suffix=".npz") as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for k, member in zip(keys, npz_member_names(keys)):
                try:
                    arr = r.bundle.view(k)  # mapped; written straight from the file's pages
                except UnsupportedError as e:
                    warnings.append(f"rest.npz: tensor {k!r} not copied ({e.message})")
                    continue
                arr, pickle = _npz_array(arr, k, warnings)
                with zf.open(member + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=pickle)
                written[member] = k
                del arr
                r.release()
            manifest = {"about": "gruconv rest.npz: array name (np.load(...).files) -> TensorFlow tensor name",
                        "tensors": written}
            zf.writestr(REST_MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=True) + "\n")


def _layer_weights(r: _Reader, e: CheckpointStack):
    """``layer_weights`` for :func:`gruconv.formats.keras3.build_stack_model`: one Keras array at a time.

    The arrays come from the stack's params through the one gate reorder
    (:func:`gruconv.keras_layout.to_keras_gru` / ``to_keras_lstm``); the params may be views of
    the mapped checkpoint, whose pages are dropped as soon as an array is
    built, so about one array's worth of checkpoint data is resident at a time."""
    from ...formats.keras3 import _params_weights

    default = _params_weights(e.stack)

    def weight(layer: int, d: int, i: int) -> np.ndarray:
        value = default(layer, d, i)
        r.release()
        return value

    return weight


def _output_format(output: Path, opts: Options) -> Optional[str]:
    """``keras``, ``h5-weights`` (legacy Keras weights layout), ``keras-weights`` (Keras 3's
    ``.weights.h5``), or None: a directory of ``.keras`` models.  ``--format`` decides, else the
    output's name (as for Keras HDF5 inputs: :func:`gruconv.readers.keras_h5.output_format`)."""
    lower = output.name.lower()
    fmt = opts.format
    if fmt is None and not output.is_dir():
        if lower.endswith(".weights.h5"):  # Keras 3 reserves this name for its own format
            fmt = "keras-weights"
        elif lower.endswith((".h5", ".hdf5")):
            fmt = "h5-weights"
    if fmt in ("h5-weights", "keras-weights"):
        return fmt
    return None if output.is_dir() or not lower.endswith(".keras") else "keras"


def _legacy_weight_names(e: CheckpointStack, lname: str) -> list:
    """The ``weight_names`` tf_keras's ``save_weights`` gives layer ``lname`` of the stack: a
    ``GRU``/``LSTM`` or its ``Bidirectional`` wrapper (forward weights, then backward)."""
    cell = e.stack.shape.cell
    roles = ("kernel", "recurrent_kernel", "bias")
    if not e.stack.shape.bidirectional:
        return [f"{lname}/{cell}_cell/{r}:0" for r in roles]
    return [f"{lname}/{side}_{cell}/{cell}_cell/{r}:0" for side in ("forward", "backward") for r in roles]


def _write_legacy_weights(r: _Reader, e: CheckpointStack, target: Path, name: str) -> None:
    """The stack's Keras weights in the legacy layout (tf_keras ``model.save_weights("x.h5")``), with
    h5py alone: root attrs ``layer_names``/``backend``/``keras_version``, one group per layer of the
    model :func:`gruconv.formats.keras3.build_stack_model` builds (its names; the input layer with
    no weights), attr ``weight_names``, datasets under those names.  tf_keras's and Keras 3's
    ``load_weights`` read it into that architecture (they match layers by order)."""
    import h5py

    from ...keras_layout import to_keras as keras_arrays

    s = e.stack.shape
    base = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "gru_stack"  # keras3._identifier
    layer_names = ["inputs"] + [f"{base}_l{layer}" for layer in range(s.num_layers)]
    try:
        f = h5py.File(target, "w")
    except (OSError, RuntimeError, ValueError) as err:
        raise OutputError(f"cannot create output ({err})", path=target) from None
    with f:
        f.attrs["layer_names"] = np.array([n.encode("utf-8") for n in layer_names])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.x"
        f.create_group("inputs").attrs["weight_names"] = np.array([], dtype="S1")
        for layer in range(s.num_layers):
            lname = layer_names[layer + 1]
            g = f.create_group(lname)
            wnames = _legacy_weight_names(e, lname)
            g.attrs["weight_names"] = np.array([w.encode("utf-8") for w in wnames])
            for d in range(s.num_directions):
                arrays = keras_arrays(e.stack.params[s.pseudo_layer(layer, d)], s.cell, s.layer_input_size(layer))
                r.release()
                for wname, arr in zip(wnames[3 * d:3 * d + 3], arrays):
                    g.create_dataset(wname, data=np.asarray(arr))
                del arrays


def _targets(doc: CheckpointDoc, output: Path, opts: Options) -> tuple:
    """(as_dir, model targets, rest.npz target), every target checked before any work."""
    from ...outputs import check_target

    from ...outputs import check_outputs as never_an_input

    input = Path(doc.path)
    force = opts.force
    never_an_input([output], input_files(doc.path))  # first: whatever else is wrong, say this
    fmt = _output_format(output, opts)
    as_dir = fmt is None
    if fmt in ("h5-weights", "keras-weights") and output.is_dir():
        raise OutputError(f"--format {fmt} writes one file: OUTPUT is a directory", path=output)
    if not as_dir and len(doc.stacks) > 1:
        scopes = ", ".join(repr(e.scope) for e in doc.stacks)
        raise UsageError(f"the checkpoint holds {len(doc.stacks)} {_cells_text(doc.stacks)} stacks ({scopes}): "
                         f"pass --rnn SCOPE to "
                         f"convert one into {output.name}, or a directory as OUTPUT for all", path=input)
    if as_dir and output.suffix.lower() in (".h5", ".hdf5", ".npz", ".json"):  # (.h5 here: --format keras)
        raise UsageError(f"a TF1 checkpoint converts to Keras 3 .keras models (or weights: *.h5 legacy layout, "
                         f"*.weights.h5 Keras 3): name OUTPUT *.keras, *.h5, or a directory "
                         f"(got {output.name!r})", path=input)
    if as_dir:
        if output.exists() and not output.is_dir():
            raise OutputError("output exists and is not a directory", path=output)
        parent = output.parent if str(output.parent) else Path(".")
        if not output.exists() and not parent.is_dir():
            raise OutputError(f"output directory {str(parent)!r} does not exist", path=output)
        if output.is_dir() and any(output.iterdir()) and not force:
            raise OutputError("output directory is not empty; pass --force to write into it", path=output)
        names, targets = set(), []
        for e in doc.stacks:
            default = f"{e.stack.shape.cell}_stack"
            stem, n = file_stem(e.scope, default), 1
            while stem.lower() in names:
                n += 1
                stem = f"{file_stem(e.scope, default)}_{n}"
            names.add(stem.lower())
            targets.append(output / f"{stem}.keras")
        rest_target = output / "rest.npz"
    else:
        targets = [output]
        rest_target = Path(str(output) + ".rest.npz")
        check_target(output, force=force)
        if doc.other_keys:
            check_target(rest_target, force=force)
    never_an_input(targets + [rest_target], input_files(doc.path))
    return as_dir, targets, rest_target


def check_outputs(doc: CheckpointDoc, output: Path, opts: Options) -> None:
    """Refuse what this conversion cannot or must not write, before any work is done."""
    if doc.stacks:
        for e in doc.stacks:
            _require_shape(e, doc.reader.where)
        _targets(doc, Path(output), opts)


def to_keras(doc: CheckpointDoc, opts: Optional[Options] = None) -> list:
    """``[(stack entry, model)]``: each stack as the Keras 3 model ``convert`` saves, in memory.

    Built with every optional input and output (initial states, final states)
    so verification can drive them all; ``convert`` adds only what was asked."""
    from ...formats import keras3

    out = []
    for e in doc.stacks:
        _require_shape(e, doc.reader.where)
        out.append((e, keras3.build_stack_model(e.stack, initial_state=True, return_state=True, name=e.scope)))
    return out


def convert(doc: CheckpointDoc, output: Path, opts: Optional[Options] = None) -> ConvertResult:
    """Convert the checkpoint's GRU/LSTM stack(s) into Keras 3 ``.keras`` model(s) plus ``rest.npz``.

    One stack: ``output`` is a ``.keras`` file and the other tensors go to
    ``<output>.rest.npz``.  Several stacks (and no ``rnn``): ``output`` is a
    directory that receives ``<scope with / as __>.keras`` per stack and
    ``rest.npz``.  Everything is written atomically.
    """
    from ...outputs import atomic_path
    from ...formats import keras3

    opts = opts or Options()
    force, prefer = opts.force, opts.prefer
    input, output = Path(doc.path), Path(output)
    r = doc.reader
    result = ConvertResult(input=str(input), format=FORMAT)
    result.warnings.extend(doc.warnings)
    if not doc.stacks:
        if doc.possible_buffers:
            cand = ", ".join(f"{p['key']} ({p['size']} {p['dtype']} values)" for p in doc.possible_buffers[:5])
            raise UsageError(f"no cuDNN GRU or LSTM stack identified (no opaque_kernel, no canonical cell "
                             f"tensors); "
                             f"1-D tensors that may be an opaque buffer: {cand}. Pass --variable KEY and "
                             f"shape hints (--num-units, --input-size, --num-layers, --direction, --input-mode)",
                             path=r.where)
        result.nothing_to_convert = True
        return result
    for e in doc.stacks:
        _require_shape(e, r.where)

    as_dir, targets, rest_target = _targets(doc, output, opts)

    half = [e.scope for e in doc.stacks if e.stack.shape.dtype in ("float16", "bfloat16")]
    if half:
        result.warnings.append(keras3.LOW_PRECISION_NOTE.format(layers=", ".join(half)))
    for e in doc.stacks:
        cc = e.cross_check
        if cc.status == "disagree":
            used = "opaque buffer" if prefer == "opaque" else "canonical tensors"
            diff = (f"max abs diff {cc.max_abs_diff:.6g} at {cc.where}" if cc.max_abs_diff is not None
                    else cc.detail)
            result.warnings.append(
                f"{e.scope}: opaque buffer {e.opaque_key!r} disagrees with the canonical tensors ({diff}); "
                f"it is not in cuDNN 9.19 layout. Weights taken from the {used}")
        if e.slots:
            result.warnings.append(
                f"{e.scope}: optimizer slots of the opaque buffer dropped (they follow the cuDNN layout; the "
                f"converted model starts with a fresh optimizer): {', '.join(e.slots)}")

    created = False
    if as_dir and not output.exists():
        try:
            output.mkdir()
        except OSError as err:
            raise OutputError(f"cannot create output directory ({err.strerror or err})", path=output) from None
        created = True
    try:
        fmt = _output_format(output, opts)
        for e, target in zip(doc.stacks, targets):
            name = e.scope or f"{e.stack.shape.cell}_stack"
            if fmt == "h5-weights":
                with atomic_path(target, force=force, suffix=".h5") as tmp:
                    _write_legacy_weights(r, e, tmp, name)
                result.outputs.append(str(target))
                result.rnns.append(dict(_rnn_entry(e), output=str(target)))
                continue
            model = keras3.build_stack_model(e.stack, initial_state=opts.initial_state,
                                             return_state=opts.return_state, mask_input=opts.mask_input,
                                             name=name,
                                             layer_weights=_layer_weights(r, e))
            r.release()
            if fmt == "keras-weights":
                with atomic_path(target, force=force, suffix=".weights.h5") as tmp:
                    keras3.save_weights(model, tmp)
                del model
                result.outputs.append(str(target))
                result.rnns.append(dict(_rnn_entry(e), output=str(target)))
                continue
            with atomic_path(target, force=True if as_dir else force, suffix=".keras") as tmp:
                digests = keras3.save(model, tmp)
                del model  # the load-back check holds Keras's copy; never two at once
                keras3.check_reload(tmp, digests)
            result.outputs.append(str(target))
            result.rnns.append(dict(_rnn_entry(e), output=str(target)))
        if doc.other_keys:
            _write_rest(r, doc.other_keys, rest_target, True if as_dir else force, result.warnings)
            result.outputs.append(str(rest_target))
    except BaseException:
        # All or nothing: a model placed before a later output (rest.npz) failed is removed again.
        for f in result.outputs:
            with contextlib.suppress(OSError):
                Path(f).unlink()
        if created:  # leave no half-filled directory behind
            with contextlib.suppress(OSError):
                output.rmdir()
        raise
    return result
