"""The PyTorch target: canonical stacks -> one ``.safetensors`` file of ``torch.nn.GRU``/``LSTM`` state dicts.

No torch here: the file is written with the ``safetensors`` package's NumPy API, and read back
(:func:`read_document`) with a header parser of our own that validates everything before a byte of
tensor data is touched.  :mod:`gruconv.writers.torch.run` builds the modules (torch imported lazily).

What the file holds:

* per converted RNN, the state dict of one ``torch.nn.GRU`` / ``torch.nn.LSTM`` under the prefix
  ``<safe name>.``: ``weight_ih_l{k}`` ``(G*H, in)``, ``weight_hh_l{k}`` ``(G*H, H)``,
  ``bias_ih_l{k}``, ``bias_hh_l{k}`` ``(G*H,)`` and, for a bidirectional module, the ``_reverse``
  twins (names and shapes: PyTorch docs, ``torch.nn.GRU``/``LSTM`` "Variables"; gate order:
  :mod:`gruconv.model.target_gates`, PyTorch's order is cuDNN's);
* every other tensor of the input under its original name made safe (:func:`safe_names`);
* ``__metadata__["gruconv"]``: a JSON document
  ``{"rnns": [{"name", "prefix", "module", "input_size", "hidden_size", "num_layers",
  "bidirectional", "batch_first", "source"}], "tensors": {safe name: original name}}`` so that
  ``getattr(torch.nn, module)(**args).load_state_dict(...)`` works without guessing.

Skip-input stacks get identity input matrices (exact).  PyTorch has no projection and no skip
input, and the canonical model has no projection either, so nothing else needs refusing here.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Optional

import numpy as np

from ...model.canonical import RNNStack
from ...errors import InputError, OutputError, UnsupportedError
from ...model.target_gates import stacked_blocks

#: The ``__metadata__`` key of gruconv's document.
METADATA_KEY = "gruconv"
#: canonical cell -> torch.nn class name
MODULE = {"gru": "GRU", "lstm": "LSTM"}
CELL_OF_MODULE = {v: k for k, v in MODULE.items()}
#: The keys of one ``rnns`` entry, exactly.
RNN_KEYS = ("name", "prefix", "module", "input_size", "hidden_size", "num_layers", "bidirectional",
            "batch_first", "source")
#: safetensors dtype names for the float dtypes a module may hold, and every dtype a file may hold.
FLOAT_DTYPES = {"F16": "float16", "F32": "float32", "F64": "float64"}
SAFETENSORS_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
                      "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
#: Bounds on module arguments read from a file (far above any real RNN; keeps arithmetic sane).
MAX_SIZE = 2**24
MAX_LAYERS = 4096
_NAME_MAX = 200


# --------------------------------------------------------------------------- writing

def module_args(stack: RNNStack) -> dict:
    """Keyword arguments of the ``torch.nn.GRU``/``LSTM`` that holds ``stack`` (batch-first)."""
    return describe(stack)["args"]


def param_shapes(module: str, args: dict) -> dict:
    """``{state-dict key: shape}`` of ``torch.nn.<module>(**args)``: what a file must hold, no more."""
    G = len(_cell_gates(CELL_OF_MODULE[module]))
    H, I = args["hidden_size"], args["input_size"]
    D = 2 if args["bidirectional"] else 1
    out = {}
    for k in range(args["num_layers"]):
        n_in = I if k == 0 else D * H
        for suffix in ("", "_reverse")[:D]:
            out[f"weight_ih_l{k}{suffix}"] = (G * H, n_in)
            out[f"weight_hh_l{k}{suffix}"] = (G * H, H)
            out[f"bias_ih_l{k}{suffix}"] = (G * H,)
            out[f"bias_hh_l{k}{suffix}"] = (G * H,)
    return out


def _cell_gates(cell: str) -> tuple:
    from ...model.canonical import CELLS

    return CELLS[cell].gates


def state_dict(stack: RNNStack) -> tuple:
    """``(state dict {key: ndarray}, module_args)`` of the ``torch.nn.GRU``/``LSTM`` equal to ``stack``.

    Pseudo-layer ``(k, 0)`` becomes ``*_l{k}``, ``(k, 1)`` ``*_l{k}_reverse``; arrays keep the
    stack's dtype.
    """
    s = stack.shape
    out = {}
    for k in range(s.num_layers):
        for d in range(s.num_directions):
            suffix = "_reverse" if d else ""
            W, R, bW, bR = stacked_blocks(stack.params[s.pseudo_layer(k, d)], "torch", s.cell,
                                          s.layer_input_size(k), s.dtype)
            out[f"weight_ih_l{k}{suffix}"] = W
            out[f"weight_hh_l{k}{suffix}"] = R
            out[f"bias_ih_l{k}{suffix}"] = bW
            out[f"bias_hh_l{k}{suffix}"] = bR
    args = module_args(stack)
    assert {k: v.shape for k, v in out.items()} == param_shapes(MODULE[s.cell], args)
    return out, args


def _safe(name: str, *, dots: bool) -> str:
    """Printable ASCII ``[A-Za-z0-9_/-]`` (and ``.`` where ``dots``); anything else becomes ``_``."""
    keep = r"[^A-Za-z0-9_/\-.]" if dots else r"[^A-Za-z0-9_/\-]"
    out = re.sub(keep, "_", name)
    out = re.sub(r"\.{2,}", lambda m: "_" * len(m[0]), out)  # no "..": keys are sometimes made paths
    out = re.sub(r"/{2,}", "/", out).strip("/") or "_"
    if out.startswith("."):
        out = "_" + out[1:]
    if len(out) > _NAME_MAX:
        import hashlib

        out = f"{out[:_NAME_MAX - 13]}_{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
    return out


def _unique(base: str, taken, prefixes=()) -> str:
    """``base``, moved off every RNN prefix (its dot becomes ``_``: each step removes one dot, so
    this ends) and then made unique with ``_2``, ``_3`` ... (which cannot create a prefix match)."""
    hit = next((p for p in prefixes if base.startswith(p)), None)
    while hit is not None:
        base = hit[:-1] + "_" + base[len(hit):]
        hit = next((p for p in prefixes if base.startswith(p)), None)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def safe_names(rnn_names: list, tensor_names: list) -> tuple:
    """``(prefixes, tensor keys)``: a unique ``<safe name>.`` prefix per RNN and a unique safe key
    per other tensor, none of which starts with an RNN prefix.

    Safe: printable ASCII (letters, digits, ``_``, ``-``, ``/``; ``.`` too in tensor keys, never in
    a prefix's name, where PyTorch reads a dot as a submodule boundary); ``<layer>/<weight>`` names
    stay as they are.  Input names come from untrusted files, so control characters, spaces and
    non-ASCII never reach the header.
    """
    prefixes: list = []
    bases: set = set()
    for name in rnn_names:
        b = _unique(_safe(name, dots=False), bases)
        bases.add(b)
        prefixes.append(b + ".")
    keys: list = []
    taken: set = set()
    for name in tensor_names:
        k = _unique(_safe(name, dots=True), taken, prefixes)
        keys.append(k)
        taken.add(k)
    return prefixes, keys


def write_safetensors(path, stacks: list, other_tensors: Optional[dict] = None, *, force: bool = False) -> dict:
    """Write ``stacks`` (``[(name, RNNStack, source), ...]``) and ``other_tensors`` ``{original name:
    array or weight reference}`` to ``path``, atomically (a temporary file beside it, then renamed).

    A weight reference (:class:`gruconv.model.weights.WeightRef`: ``shape``, ``dtype``, ``blocks``) is
    streamed block by block (:func:`serialize`), so a large other tensor (a wide Dense kernel) is never
    whole in memory.

    Returns ``{"document": the metadata document, "warnings": [...]}``.  Tensors safetensors
    cannot hold (strings, objects) are left out with a warning naming them; nothing is written on
    any error.
    """
    from ...files.outputs import atomic_path

    other_tensors = dict(other_tensors or {})
    warnings: list = []
    names = [n for n, _, _ in stacks]
    if len(set(names)) != len(names):
        raise UnsupportedError(f"two RNNs share one name: {sorted(n for n in names if names.count(n) > 1)[0]!r}")
    storable = {}
    for orig, arr in other_tensors.items():
        a = arr if _is_ref(arr) else np.asarray(arr)
        if _dtype_code(a.dtype) is None:
            warnings.append(f"tensor {orig!r} ({np.dtype(a.dtype) if not _is_ref(a) else a.dtype}) has no "
                            "safetensors dtype; left out")
            continue
        storable[orig] = a
    prefixes, keys = safe_names(names, list(storable))
    tensors: dict = {}
    rnns = []
    for (name, stack, source), prefix in zip(stacks, prefixes):
        sd, args = state_dict(stack)
        for k, v in sd.items():
            tensors[prefix + k] = np.ascontiguousarray(v)
        rnns.append({"name": str(name), "prefix": prefix, "module": MODULE[stack.shape.cell],
                     "input_size": args["input_size"], "hidden_size": args["hidden_size"],
                     "num_layers": args["num_layers"], "bidirectional": args["bidirectional"],
                     "batch_first": True, "source": str(source)})
    tensor_map = {}
    for (orig, arr), key in zip(storable.items(), keys):
        tensors[key] = arr if _is_ref(arr) else np.asarray(arr, order="C")  # not ascontiguousarray: 0-d stays 0-d
        tensor_map[key] = str(orig)
    document = {"rnns": rnns, "tensors": tensor_map}
    text = json.dumps(document, ensure_ascii=True, sort_keys=False)
    with atomic_path(Path(path), force=force, suffix=".safetensors") as tmp:
        try:
            with open(tmp, "wb") as f:
                serialize(tensors, f, metadata={METADATA_KEY: text})
        except OSError as e:
            raise OutputError(f"cannot write output ({e.strerror or e})", path=path) from None
    return {"document": document, "warnings": warnings}


def _is_ref(value) -> bool:
    """A stored weight read on demand (:class:`gruconv.model.weights.WeightRef`), not an array."""
    return hasattr(value, "blocks") and not isinstance(value, np.ndarray)


#: The safetensors dtype codes in the order of the format's ``Dtype`` enum (safetensors 0.8
#: ``safetensors/src/tensor.rs``; its derived ``Ord`` sorts the data section: larger codes first).  The
#: order is checked against the library's own writer, byte for byte (``tests/writers/test_torch_target.py``).
_DTYPE_ORDER = ("BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16",
                "F16", "BF16", "I32", "U32", "F32", "C64", "F64", "I64", "U64")
#: Bytes per block when a weight reference is streamed into the file.
_BLOCK_BYTES = 8 << 20


def serialize(tensors: dict, f, *, metadata: Optional[dict] = None) -> None:
    """``tensors`` (``{key: array or weight reference}``) and ``metadata`` (``{str: str}``) in the safetensors
    format, written to the binary file ``f`` as ``safetensors.numpy.save_file`` lays them out, byte for byte:
    8 bytes little-endian header length; the header, compact JSON (``__metadata__`` first, then each tensor's
    ``dtype``, ``shape``, ``data_offsets`` in data order), padded with spaces to a multiple of 8; then the data,
    little-endian, ordered by dtype (the enum's order, descending) then key (format: safetensors README; layout:
    ``safetensors/src/tensor.rs`` ``prepare``/``serialize``).

    Why our own writer: the library takes every tensor whole (a pointer and a length), so a 1.2 GB Dense
    kernel read from a gzip-compressed input was 1.0x its bytes in memory; here a weight reference is copied
    in blocks of :data:`_BLOCK_BYTES` (``WeightRef.blocks``, C order)."""
    entries = []
    for key, value in tensors.items():
        dtype = np.dtype(value.dtype)
        code = _dtype_code(dtype)
        if code is None:
            raise UnsupportedError(f"tensor {key!r} ({dtype}) has no safetensors dtype")
        shape = tuple(int(n) for n in value.shape)
        entries.append((key, value, dtype, code, shape, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize))
    entries.sort(key=lambda e: (-_DTYPE_ORDER.index(e[3]), e[0]))
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    at = 0
    for key, _, _, code, shape, nbytes in entries:
        header[key] = {"dtype": code, "shape": list(shape), "data_offsets": [at, at + nbytes]}
        at += nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for key, value, dtype, _, _, nbytes in entries:
        little = dtype.newbyteorder("<")
        if _is_ref(value):
            written = 0
            for _, block in value.blocks(_BLOCK_BYTES):
                data = np.ascontiguousarray(block, dtype=little).tobytes()
                f.write(data)
                written += len(data)
            if written != nbytes:  # a store that yields less than its header declares: never a short file
                raise InputError(f"tensor {key!r}: read {written} bytes, its header declares {nbytes}")
        else:
            f.write(np.ascontiguousarray(value, dtype=little).tobytes())


def _dtype_code(dtype) -> Optional[str]:
    dtype = np.dtype(dtype)
    table = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "float16": "F16",
             "int32": "I32", "uint32": "U32", "float32": "F32", "float64": "F64", "int64": "I64", "uint64": "U64"}
    return table.get(dtype.name)


# --------------------------------------------------------------------------- reading (untrusted)

def _header(path) -> tuple:
    """``(header dict, data start, data length)`` of a safetensors file, every entry checked.

    Format (safetensors README): 8 bytes little-endian u64 ``N``, ``N`` bytes of JSON (tensor name
    -> ``{"dtype", "shape", "data_offsets": [begin, end]}`` relative to the byte after the
    header, plus ``"__metadata__"``: str -> str), then the data.
    """
    from ...files.inputs import limit, open_regular, over_limit, parse_json

    with open_regular(path, "a .safetensors file") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise InputError(f"is {size} bytes, too short for a .safetensors header", path=path)
        (n,) = struct.unpack("<Q", head)
        lim = limit("index")
        if n > lim:
            raise InputError(over_limit(".safetensors header", n, lim), path=path)
        if n > size - 8:
            raise InputError(f".safetensors header declares {n} bytes, the file has {size - 8} after its length",
                             path=path)
        raw = f.read(n)
    header = parse_json(raw, ".safetensors header", path=path, max_bytes=n + 1)
    if not isinstance(header, dict):
        raise InputError(".safetensors header is not a JSON object", path=path)
    data_len = size - 8 - n
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        where = f".safetensors tensor {key!r}"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise InputError(f"{where}: entry is not {{dtype, shape, data_offsets}}", path=path)
        dt, shp, off = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dt not in SAFETENSORS_DTYPES:
            raise InputError(f"{where}: unknown dtype {dt!r}", path=path)
        if not (isinstance(shp, list) and all(type(v) is int and 0 <= v < 2**53 for v in shp) and len(shp) <= 64):
            raise InputError(f"{where}: shape {shp!r} is not a list of non-negative integers", path=path)
        if not (isinstance(off, list) and len(off) == 2 and all(type(v) is int for v in off)
                and 0 <= off[0] <= off[1] <= data_len):
            raise InputError(f"{where}: data_offsets {off!r} lie outside the file's {data_len} data bytes",
                             path=path)
        nbytes = SAFETENSORS_DTYPES[dt]
        for v in shp:
            nbytes *= v
        if nbytes != off[1] - off[0]:
            raise InputError(f"{where}: shape {shp} of {dt} needs {nbytes} bytes, data_offsets give "
                             f"{off[1] - off[0]}", path=path)
    return header, 8 + n, data_len


def _positive_int(value, what: str, cap: int, path) -> int:
    if type(value) is not int or not 1 <= value <= cap:
        raise InputError(f"gruconv metadata: {what} must be an integer in 1..{cap}, got {value!r}", path=path)
    return value


def read_document(path) -> dict:
    """The validated gruconv document of a ``.safetensors`` file written by :func:`write_safetensors`.

    Untrusted input: every field's type and range is checked, every RNN's tensors must be present
    with exactly the shapes its module arguments imply, in one float dtype, and nothing else may
    sit under its prefix — all before any tensor data is read.  Returns the document with, per
    RNN, ``"args"`` (the module's keyword arguments), ``"dtype"`` and ``"keys"`` (prefixed names)
    added.  Raises :class:`InputError` (one line).
    """
    from ...files.inputs import parse_json

    header, _, _ = _header(path)
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or METADATA_KEY not in meta:
        raise InputError(f"no gruconv metadata (__metadata__[{METADATA_KEY!r}]); not written by gruconv", path=path)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise InputError("__metadata__ must map strings to strings", path=path)
    doc = parse_json(meta[METADATA_KEY].encode("utf-8", "surrogatepass"), "gruconv metadata", path=path)
    if not isinstance(doc, dict) or not isinstance(doc.get("rnns"), list) or not isinstance(doc.get("tensors"), dict):
        raise InputError('gruconv metadata must be {"rnns": [...], "tensors": {...}}', path=path)
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    names, prefixes, out = set(), [], []
    for i, r in enumerate(doc["rnns"]):
        if not isinstance(r, dict) or set(r) != set(RNN_KEYS):
            got = sorted(r) if isinstance(r, dict) else type(r).__name__
            raise InputError(f"gruconv metadata: rnns[{i}] must have exactly the keys {list(RNN_KEYS)}, got {got}",
                             path=path)
        for key in ("name", "prefix", "source"):
            if not isinstance(r[key], str):
                raise InputError(f"gruconv metadata: rnns[{i}].{key} is not a string", path=path)
        if r["name"] in names:
            raise InputError(f"gruconv metadata: two RNNs named {r['name']!r}", path=path)
        names.add(r["name"])
        prefix = r["prefix"]
        if not prefix.endswith(".") or len(prefix) < 2:
            raise InputError(f"gruconv metadata: rnns[{i}].prefix {prefix!r} must end with '.'", path=path)
        if any(prefix.startswith(p) or p.startswith(prefix) for p in prefixes):
            raise InputError(f"gruconv metadata: rnns[{i}].prefix {prefix!r} overlaps another RNN's", path=path)
        prefixes.append(prefix)
        if r["module"] not in CELL_OF_MODULE:
            raise InputError(f"gruconv metadata: rnns[{i}].module must be GRU or LSTM, got {r['module']!r}", path=path)
        args = {"input_size": _positive_int(r["input_size"], f"rnns[{i}].input_size", MAX_SIZE, path),
                "hidden_size": _positive_int(r["hidden_size"], f"rnns[{i}].hidden_size", MAX_SIZE, path),
                "num_layers": _positive_int(r["num_layers"], f"rnns[{i}].num_layers", MAX_LAYERS, path)}
        if type(r["bidirectional"]) is not bool:
            raise InputError(f"gruconv metadata: rnns[{i}].bidirectional must be true or false", path=path)
        if r["batch_first"] is not True:
            raise InputError(f"gruconv metadata: rnns[{i}].batch_first must be true", path=path)
        args["bidirectional"] = r["bidirectional"]
        args["batch_first"] = True
        want = param_shapes(r["module"], args)
        dtypes = set()
        for key, shp in want.items():
            e = entries.get(prefix + key)
            if e is None:
                raise InputError(f"RNN {r['name']!r}: tensor {prefix + key!r} is missing", path=path)
            if tuple(e["shape"]) != shp:
                raise InputError(f"RNN {r['name']!r}: tensor {prefix + key!r} has shape {tuple(e['shape'])}, "
                                 f"{r['module']}({_args_text(args)}) needs {shp}", path=path)
            if e["dtype"] not in FLOAT_DTYPES:
                raise InputError(f"RNN {r['name']!r}: tensor {prefix + key!r} is {e['dtype']}, "
                                 f"expected F16, F32 or F64", path=path)
            dtypes.add(e["dtype"])
        if len(dtypes) != 1:
            raise InputError(f"RNN {r['name']!r}: tensors mix dtypes {sorted(dtypes)}", path=path)
        extra = sorted(k for k in entries if k.startswith(prefix) and k[len(prefix):] not in want)
        if extra:
            raise InputError(f"RNN {r['name']!r}: unexpected tensor {extra[0]!r} under its prefix", path=path)
        out.append(dict(r, args=args, dtype=FLOAT_DTYPES[dtypes.pop()], keys=[prefix + k for k in want]))
    for key, orig in doc["tensors"].items():
        if not isinstance(orig, str):
            raise InputError(f"gruconv metadata: tensors[{key!r}] is not a string", path=path)
        if key not in entries:
            raise InputError(f"gruconv metadata: tensor {key!r} is named but not stored", path=path)
        if any(key.startswith(p) for p in prefixes):
            raise InputError(f"gruconv metadata: tensor {key!r} lies under an RNN's prefix", path=path)
    return {"rnns": out, "tensors": dict(doc["tensors"])}


def _args_text(args: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items())


def read_tensors(path, keys: list) -> dict:
    """The named tensors of a (validated) safetensors file as NumPy arrays; one-line InputError."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in keys}
    except (OSError, ValueError, RuntimeError, Exception) as e:  # noqa: BLE001 - SafetensorError has no stable base
        if isinstance(e, InputError):
            raise
        raise InputError(f"cannot read .safetensors tensors ({_first_line(e)})", path=path) from None


def _first_line(e: BaseException) -> str:
    from ...files.inputs import display

    text = str(e).strip().splitlines()
    return display(text[0] if text else type(e).__name__)[:200]


def other_tensors(path) -> dict:
    """Every non-RNN tensor of a gruconv ``.safetensors`` file, by its ORIGINAL name (NumPy)."""
    doc = read_document(path)
    arrays = read_tensors(path, list(doc["tensors"]))
    return {doc["tensors"][k]: v for k, v in arrays.items()}


def describe(stack) -> dict:
    """What the PyTorch target makes of ``stack`` (an :class:`RNNStack` or its
    :class:`gruconv.model.canonical.StackShape`; for ``inspect``): module class and arguments."""
    s = getattr(stack, "shape", stack)
    args = {"input_size": int(s.input_size), "hidden_size": int(s.units), "num_layers": int(s.num_layers),
            "bidirectional": bool(s.bidirectional), "batch_first": True}
    return {"module": f"torch.nn.{MODULE[s.cell]}", "args": args, "dtype": str(s.dtype),
            "note": "identity input matrices (skip input)" if s.input_mode == "skip" else ""}
