"""Generate a corpus of bad (and a few deliberately awkward but valid) inputs from the valid fixtures.

Nothing here is committed as data: every case is derived, in a second or two, from
``fixtures/keras`` and ``fixtures/tf1`` into a directory you name::

    .venv/bin/python tests/make_bad_inputs.py /tmp/bad      # writes the corpus, prints one line per case

``tests/files/test_bad_inputs.py`` calls :func:`make_corpus` into ``tmp_path`` and holds
the expected outcome of every case in a table.  Each :class:`Case` says what to
run (``command``, ``input``, ``extra`` options, which kind of ``output`` target)
and notes anything environment-dependent — e.g. ``chmod 000`` does not stop
root from reading a file, so the "unreadable" case is marked
``blocked=False`` when the generator finds it can still open the file, and
its expected outcome changes accordingly (documented, not faked).

Case families (names are stable; the test table keys on them):

* ``gen_*``      generic: empty file, directory, unreadable, missing, wrong format behind a model extension
* ``h5_*``       legacy Keras HDF5: truncations, header bit flips, broken ``model_config``, weight
                 shape/dtype inconsistencies, NaN/Inf, shape bombs, links, Lambda code, custom layers,
                 bytes-vs-str attributes (valid)
* ``tf1_*``      TF1 checkpoints: truncated/flipped index and data, missing shards, dangling
                 ``checkpoint`` files, opaque buffers no GRU fits, hints that contradict the buffer,
                 canonical tensors with missing pieces or wrong dtypes, NaN/Inf, huge claims
* ``out_*``      output problems: read-only directory, missing parent, existing output, output is a
                 directory, unknown output extension
* ``batch_*``    batch-mode path mirroring with ``..`` and absolute names (only run when
                 ``gruconv.batch`` exists)
"""

from __future__ import annotations

import base64
import json
import marshal
import os
import shutil
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bundle_proto import _fb, _fv, _mask, _vint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
KERAS = FIXTURES / "keras"
TF1 = FIXTURES / "tf1"


@dataclass
class Case:
    """One corpus entry: what to run, and what the environment did to it."""

    name: str
    input: Path                      # the path handed to gruconv
    command: str = "convert"         # convert | inspect | verify
    extra: tuple = ()                # extra CLI options
    output: str = "fresh"            # fresh | readonly_dir | missing_parent | exists | is_dir | bad_ext | none
    requires: tuple = ()             # "tf1" (gruconv.readers.tf1), "batch" (gruconv.batch)
    note: str = ""
    blocked: Optional[bool] = None   # for permission cases: did chmod really block access here?
    marker: Optional[Path] = None    # a file that must never appear (code-execution cases)
    outputs_dir: Optional[Path] = None  # where the harness may put outputs for this case
    argv: Optional[tuple] = None     # the whole command line ("{out}" -> the harness's output path)
    env: dict = field(default_factory=dict)   # extra environment of the run
    limited: bool = False            # run as a child with RLIMIT_AS and a timeout (hang/memory cases)
    watch: tuple = ()                # further inputs that must stay byte-identical


# --------------------------------------------------------------------------- helpers

def flip_bit(data: bytes, offset: int, bit: int = 0) -> bytes:
    b = bytearray(data)
    b[offset] ^= 1 << bit
    return bytes(b)


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def _h5_edit(src: Path, dst: Path, fn: Callable) -> Path:
    import h5py

    _copy(src, dst)
    with h5py.File(dst, "r+") as f:
        fn(f)
    return dst


def _replace_dataset(f, path: str, data=None, **kw) -> None:
    """Replace dataset ``path`` by a new one (any shape/dtype)."""
    parent, leaf = path.rsplit("/", 1)
    del f[path]
    f[parent].create_dataset(leaf, data=data, **kw)


def _config(f) -> dict:
    raw = f.attrs["model_config"]
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def _set_config(f, cfg: dict) -> None:
    f.attrs["model_config"] = json.dumps(cfg).encode("utf-8")


def _can_read(path: Path) -> bool:
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            with open(path, "rb") as fh:
                fh.read(1)
        return True
    except OSError:
        return False


def _can_write_dir(path: Path) -> bool:
    probe = path / ".write-probe"
    try:
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


SEQ = KERAS / "sequential.h5"
K1 = "model_weights/cu_dnngru/cu_dnngru"        # 6 -> 8
K2 = "model_weights/cu_dnngru_1/cu_dnngru_1"    # 8 -> 5

# --------------------------------------------------------------------------- TF bundle writer

_TF_ENUM = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "int64": 9,
            "float16": 19}


def _entry(dtype: int, shape, shard: int, offset: int, size: int, crc: int) -> bytes:
    shp = b"".join(_fb(2, _fv(1, d)) for d in shape)
    return (_fv(1, dtype) + _fb(2, shp) + _fv(3, shard) + _fv(4, offset) + _fv(5, size)
            + _vint(6 << 3 | 5) + struct.pack("<I", _mask(crc)))


def _block(items) -> bytes:
    out, restarts = bytearray(), []
    for k, v in items:
        restarts.append(len(out))
        out += _vint(0) + _vint(len(k)) + _vint(len(v)) + k + v
    restarts = restarts or [0]
    return bytes(out) + struct.pack(f"<{len(restarts)}I", *restarts) + struct.pack("<I", len(restarts))


def _trailer(block: bytes) -> bytes:
    import google_crc32c

    return block + b"\0" + struct.pack("<I", _mask(google_crc32c.value(block + b"\0")))


def write_bundle(prefix: Path, tensors: dict, *, override: Optional[dict] = None) -> None:
    """Write ``{key: ndarray}`` as a one-shard TensorBundle V2 (index + data), the way TF lays it out.

    ``override[key] = (shape, size)`` writes an entry that *claims* another shape/size
    than the bytes stored (for shape-bomb cases).  The layout (data blocks, empty
    metaindex, index block, 48-byte footer) is that of ``tests/readers/test_tfbundle.py``'s
    writer, which TensorFlow itself reads back.
    """
    import google_crc32c

    data, items = bytearray(), []
    for key in sorted(tensors, key=str.encode):
        a = np.ascontiguousarray(tensors[key])
        raw = a.tobytes()
        shape, size = a.shape, len(raw)
        if override and key in override:
            shape, size = override[key]
        items.append((key.encode(), _entry(_TF_ENUM[a.dtype.name], shape, 0, len(data), size,
                                           google_crc32c.value(raw))))
        data += raw
    header = _fv(1, 1) + _fb(3, _fv(1, 1))
    items.insert(0, (b"", header))
    out = bytearray()
    index_items = []
    for i in range(0, len(items), 8):
        blk = _block(items[i:i + 8])
        index_items.append((items[i:i + 8][-1][0] + b"\xff", _vint(len(out)) + _vint(len(blk))))
        out += _trailer(blk)
    meta = _block([])
    meta_handle = _vint(len(out)) + _vint(len(meta))
    out += _trailer(meta)
    idx = _block(index_items)
    idx_handle = _vint(len(out)) + _vint(len(idx))
    out += _trailer(idx)
    out += (meta_handle + idx_handle).ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.index").write_bytes(bytes(out))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(data))
    (prefix.parent / "checkpoint").write_text(
        f'model_checkpoint_path: "{prefix.name}"\nall_model_checkpoint_paths: "{prefix.name}"\n')


def read_bundle(case_dir: Path) -> dict:
    from gruconv.readers import tfbundle

    with tfbundle.open_bundle(case_dir) as b:
        return {k: b.read(k) for k in b.keys()}


def _tf1_copy(case: str, dst: Path) -> Path:
    shutil.copytree(TF1 / case, dst)
    return dst


def _tf1_rewrite(case: str, dst: Path, fn: Callable[[dict], Optional[dict]]) -> Path:
    tensors = read_bundle(TF1 / case)
    override = fn(tensors)
    write_bundle(dst / "model.ckpt", tensors, override=override)
    return dst


_L0 = "rnn/cudnn_gru/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/"
_L1 = "rnn/cudnn_gru/rnn/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/"
_OPAQUE = "rnn/cudnn_gru/opaque_kernel"


# --------------------------------------------------------------------------- the corpus

def _lambda_layer(marker: Path) -> dict:
    """A Keras 2 ``Lambda`` config whose function, if ever unmarshalled and called, creates ``marker``."""
    fn = eval(f"lambda x: (open({str(marker)!r}, 'w').write('code ran'), x)[1]")  # noqa: S307 - the bait
    code = base64.b64encode(marshal.dumps(fn.__code__)).decode("ascii")
    return {"class_name": "Lambda", "config": {
        "name": "evil_lambda", "trainable": True, "dtype": "float32",
        "function": [code, None, None], "function_type": "lambda", "module": "__main__",
        "output_shape": None, "output_shape_type": "raw", "output_shape_module": None, "arguments": {}}}


def _tfsm_layer(filepath: Path) -> dict:
    """A Keras 3 ``TFSMLayer`` config: building it loads the SavedModel at ``filepath`` (outside the input)."""
    return {"class_name": "TFSMLayer", "config": {"name": "tfsm", "trainable": False, "dtype": "float32",
                                                 "filepath": str(filepath), "call_endpoint": "serve"}}


def _namespace_wrapper(function: str, layer: dict) -> dict:
    """A layer entry whose class is a function of Keras's layer namespace (``deserialize``), its config
    holding a whole layer config: what ``keras.layers.deserialize(config)`` would build."""
    return {"class_name": function, "config": {"name": "evil_deser", "config": layer}}


def _insert_layer(f, layer: dict, at: int = 1, group: Optional[str] = None) -> None:
    cfg = _config(f)
    cfg["config"]["layers"].insert(at, layer)
    _set_config(f, cfg)
    if group:
        import h5py

        g = f["model_weights"].create_group(group)
        g.attrs["weight_names"] = np.array([], dtype=np.float64)
        names = [n for n in f["model_weights"].attrs["layer_names"]]
        names.insert(at - 1, group)
        f["model_weights"].attrs["layer_names"] = np.array(names, dtype=h5py.string_dtype())


def _all_attrs(f, conv) -> None:
    """Rewrite every string attribute in the file with ``conv`` (bytes or str forms)."""
    import h5py

    objs = [f]
    f.visititems(lambda n, o: objs.append(o))
    for o in objs:
        for k in list(o.attrs):
            v = o.attrs[k]
            new = conv(v)
            if new is not None:
                del o.attrs[k]
                o.attrs[k] = new


def _to_bytes(v):
    """Fixed-length byte strings, as Keras 2 with h5py 2.x wrote them."""
    if isinstance(v, str):
        return np.bytes_(v.encode("utf-8"))
    if isinstance(v, bytes):
        return np.bytes_(v)
    if isinstance(v, np.ndarray) and v.dtype == object:
        return np.array([x.encode("utf-8") if isinstance(x, str) else x for x in v.tolist()], dtype="S")
    return None


def _to_str(v):
    import h5py

    if isinstance(v, (bytes, np.bytes_)):
        return v.decode("utf-8")
    if isinstance(v, np.ndarray) and v.dtype.kind in "OS" and v.size:
        return np.array([x.decode("utf-8") if isinstance(x, bytes) else x for x in v.tolist()],
                        dtype=h5py.string_dtype("utf-8"))
    return None


def make_corpus(dest) -> list:
    """Write every case under ``dest``; return the list of :class:`Case`."""
    import h5py

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cases: list = []

    def add(name, input, **kw):
        c = Case(name, Path(input), **kw)
        cases.append(c)
        return c

    # ------------------------------------------------------------------ generic
    g = dest / "gen"
    g.mkdir()
    (g / "empty.h5").write_bytes(b"")
    add("gen_empty_file", g / "empty.h5")
    (g / "empty_dir").mkdir()
    add("gen_empty_directory", g / "empty_dir")
    add("gen_missing_file", g / "does_not_exist.h5")
    unreadable = _copy(SEQ, g / "unreadable.h5")
    os.chmod(unreadable, 0)
    blocked = not _can_read(unreadable)
    add("gen_unreadable_file", unreadable, blocked=blocked,
        note="chmod 000" + ("" if blocked else "; running as root (or with CAP_DAC_OVERRIDE): the file stays "
                                                 "readable, so it converts"))
    png = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + os.urandom(0) + bytes(range(64))
    (g / "image.h5").write_bytes(png)
    add("gen_png_named_h5", g / "image.h5")
    (g / "notes.h5").write_text("this is a text file, not a model\n" * 20)
    add("gen_text_named_h5", g / "notes.h5")
    (g / "zip.keras").write_bytes(b"PK\x03\x04" + bytes(100))
    add("gen_zip_named_keras", g / "zip.keras", note="zip magic and a .keras name, no zip directory: the Keras 3 reader refuses it")
    gi = g / "garbage_index"
    gi.mkdir()
    (gi / "model.ckpt.index").write_bytes(bytes((i * 37 + 11) % 256 for i in range(500)))
    shutil.copyfile(TF1 / "layer_uni" / "model.ckpt.data-00000-of-00001", gi / "model.ckpt.data-00000-of-00001")
    add("gen_garbage_index", gi / "model.ckpt.index", requires=("tf1",))
    (g / "text.index").write_text("not an sstable\n")
    add("gen_text_index", g / "text.index", requires=("tf1",))

    # ------------------------------------------------------------------ Keras HDF5
    h = dest / "h5"
    h.mkdir()
    raw = SEQ.read_bytes()
    n = len(raw)
    for off in (4, 8, 64, 512, 1024, 2048, 4096, n // 2, n - 100, n - 1):
        p = h / f"trunc_{off}.h5"
        p.write_bytes(raw[:off])
        add(f"h5_truncated_at_{off}", p)
    # header bit flips: superblock version, the root symbol table entry, structure signatures
    flips = {"superblock_version": 8, "superblock_offset_size": 13, "root_header_address": 64 + 8}
    for sig in (b"TREE", b"HEAP", b"SNOD", b"GCOL"):
        at = raw.find(sig)
        if at >= 0:
            flips[f"signature_{sig.decode().lower()}"] = at
    for label, off in flips.items():
        p = h / f"flip_{label}.h5"
        p.write_bytes(flip_bit(raw, off, 1))
        add(f"h5_flip_{label}", p)
    at = raw.find(b'"class_name": "Sequential"')
    p = h / "flip_model_config_json.h5"
    p.write_bytes(raw[:at] + b"{" + raw[at + 1:])  # '"class_name"' -> '{class_name"': invalid JSON in place
    add("h5_flip_model_config_json", p)
    with h5py.File(SEQ, "r") as f:
        k_off = f[K1 + "/kernel:0"].id.get_offset()
    p = h / "flip_weight_data.h5"
    p.write_bytes(flip_bit(raw, k_off + 3, 6))  # exponent bit of the first kernel value
    add("h5_flip_weight_data", p, note="HDF5 keeps no checksum of contiguous data: a flipped weight bit "
                                       "converts silently (a different number), like the original file would load")

    def nothing(f):
        for k in list(f.attrs):
            del f.attrs[k]
        del f["model_weights"]
        f.create_dataset("x", data=np.arange(4))
    add("h5_no_model_config_no_weights", _h5_edit(SEQ, h / "no_config.h5", nothing))
    add("h5_model_config_not_json",
        _h5_edit(SEQ, h / "cfg_not_json.h5", lambda f: f.attrs.__setitem__("model_config", b"{not json")))
    add("h5_model_config_json_list",
        _h5_edit(SEQ, h / "cfg_list.h5", lambda f: f.attrs.__setitem__("model_config", b"[1, 2, 3]")))
    add("h5_model_config_json_no_class",
        _h5_edit(SEQ, h / "cfg_no_class.h5",
                 lambda f: f.attrs.__setitem__("model_config", b'{"config": {"layers": []}}')))
    add("h5_model_config_layer_not_object",
        _h5_edit(SEQ, h / "cfg_bad_layer.h5", lambda f: f.attrs.__setitem__(
            "model_config", b'{"class_name": "Sequential", "config": {"layers": [42]}}')))

    def no_model_weights(f):
        del f["model_weights"]
    add("h5_missing_model_weights", _h5_edit(SEQ, h / "no_model_weights.h5", no_model_weights))

    def units_mismatch(f):
        cfg = _config(f)
        cfg["config"]["layers"][1]["config"]["units"] = 9
        _set_config(f, cfg)
    add("h5_units_disagree_with_weights", _h5_edit(SEQ, h / "units.h5", units_mismatch))

    def rk_mismatch(f):  # recurrent kernel for 7 units, kernel for 8
        _replace_dataset(f, K1 + "/recurrent_kernel:0", np.zeros((7, 21), np.float32))
    add("h5_kernel_vs_recurrent_kernel", _h5_edit(SEQ, h / "rk.h5", rk_mismatch))
    add("h5_kernel_not_3h", _h5_edit(SEQ, h / "k3h.h5", lambda f: _replace_dataset(
        f, K1 + "/kernel:0", np.zeros((6, 23), np.float32))))
    add("h5_kernel_3d", _h5_edit(SEQ, h / "k3d.h5", lambda f: _replace_dataset(
        f, K1 + "/kernel:0", np.zeros((2, 3, 24), np.float32))))
    add("h5_bias_wrong_length", _h5_edit(SEQ, h / "bias.h5", lambda f: _replace_dataset(
        f, K1 + "/bias:0", np.zeros((47,), np.float32))))

    def layer_input_mismatch(f):  # second GRU consumes 7 features, the first one produces 8
        rng = np.random.default_rng(1)
        _replace_dataset(f, K2 + "/kernel:0", rng.uniform(-.5, .5, (7, 15)).astype(np.float32))
    add("h5_layer_sizes_disagree", _h5_edit(SEQ, h / "chain.h5", layer_input_mismatch),
        note="each CuDNNGRU is self-consistent; the chain is not (layer 1 gives 8 features, layer 2 takes 7)")
    def int_weights(f):
        for w in ("kernel:0", "recurrent_kernel:0", "bias:0"):
            _replace_dataset(f, K1 + "/" + w, (f[K1 + "/" + w][()] * 100).astype(np.int32))
    add("h5_int_weights", _h5_edit(SEQ, h / "int.h5", int_weights))
    add("h5_mixed_dtypes", _h5_edit(SEQ, h / "mixed.h5", lambda f: _replace_dataset(
        f, K1 + "/bias:0", f[K1 + "/bias:0"][()].astype(np.float64))))
    add("h5_string_weights", _h5_edit(SEQ, h / "strw.h5", lambda f: _replace_dataset(
        f, K1 + "/bias:0", np.array([b"x"] * 48))))

    def nan_inf(f):
        k = f[K1 + "/kernel:0"][()]
        k[0, 0], k[1, 2], k[2, 5] = np.nan, np.inf, -np.inf
        f[K1 + "/kernel:0"][...] = k
    add("h5_nan_inf_weights", _h5_edit(SEQ, h / "nan.h5", nan_inf),
        note="valid input: converts with a warning (exit 0); verify must report the NaN/Inf")
    add("h5_nan_inf_weights_verify", h / "nan.h5", command="verify", output="none")

    def missing_weight(f):
        del f[K1 + "/recurrent_kernel:0"]
    add("h5_missing_weight_dataset", _h5_edit(SEQ, h / "missing_w.h5", missing_weight))

    def missing_weight_name(f):
        g1 = f["model_weights/cu_dnngru"]
        g1.attrs["weight_names"] = np.array(["cu_dnngru/kernel:0", "cu_dnngru/bias:0"],
                                            dtype=h5py.string_dtype())
    add("h5_weight_names_incomplete", _h5_edit(SEQ, h / "wn.h5", missing_weight_name))

    def missing_layer_group(f):
        del f["model_weights/cu_dnngru_1"]
    add("h5_layer_group_missing", _h5_edit(SEQ, h / "nogroup.h5", missing_layer_group))

    def weight_is_group(f):
        del f[K1 + "/bias:0"]
        f[K1].create_group("bias:0")
    add("h5_weight_is_a_group", _h5_edit(SEQ, h / "wgroup.h5", weight_is_group))

    # shape bombs: declared sizes with nothing stored (chunked, no chunk written)
    def terabytes(f):
        del f[K1 + "/kernel:0"]
        f[K1].create_dataset("kernel:0", shape=(2**38, 24), dtype="f4", chunks=(1, 24))
    add("h5_kernel_claims_terabytes", _h5_edit(SEQ, h / "tb.h5", terabytes),
        note="declared 24 TiB, nothing stored: refused from the header")

    def sparse_gigabytes(f):  # a self-consistent GRU of 20000 units: 4.8 GB declared, 0 bytes stored
        H = 20000
        cfg = _config(f)
        cfg["config"]["layers"][1]["config"]["units"] = H
        _set_config(f, cfg)
        for w, shape in (("kernel:0", (6, 3 * H)), ("recurrent_kernel:0", (H, 3 * H)), ("bias:0", (6 * H,))):
            del f[K1 + "/" + w]
            f[K1].create_dataset(w, shape=shape, dtype="f4", chunks=True)
    add("h5_sparse_gigabytes_gru", _h5_edit(SEQ, h / "sparse_gb.h5", sparse_gigabytes),
        note="under the 16 GiB cap but nothing stored: must be refused before 4.8 GB are allocated")

    def dense_terabytes(f):
        del f["model_weights/dense/dense/kernel:0"]
        f["model_weights/dense/dense"].create_dataset("kernel:0", shape=(2**38, 3), dtype="f4", chunks=(1, 3))
    add("h5_dense_claims_terabytes", _h5_edit(SEQ, h / "dense_tb.h5", dense_terabytes),
        note="a non-GRU weight that Keras itself would read in full")

    # links
    target = _copy(SEQ, h / "link_target.h5")

    def external(f):
        del f[K1 + "/kernel:0"]
        f[K1]["kernel:0"] = h5py.ExternalLink(str(target), "/" + K1 + "/kernel:0")
    add("h5_external_link_weight", _h5_edit(SEQ, h / "extlink.h5", external))

    def soft(f):
        del f[K1 + "/kernel:0"]
        f[K1]["kernel:0"] = h5py.SoftLink("/" + K1 + "/recurrent_kernel:0")
    add("h5_soft_link_weight", _h5_edit(SEQ, h / "softlink.h5", soft))

    def soft_group(f):
        f["real_weights"] = f["model_weights"]  # hard link under another name
        del f["model_weights"]
        f["model_weights"] = h5py.SoftLink("/real_weights")
    add("h5_soft_link_model_weights", _h5_edit(SEQ, h / "softgroup.h5", soft_group))

    def external_layer(f):
        del f["model_weights/dense"]
        f["model_weights"]["dense"] = h5py.ExternalLink(str(target), "/model_weights/dense")
    add("h5_external_link_layer_group", _h5_edit(SEQ, h / "extgroup.h5", external_layer))

    secret = dest / "secret.txt"
    secret.write_bytes(b"root:$6$not-a-real-hash:19000:0:99999:7:::\n" * 2)

    def external_storage(f):  # the Dense kernel's bytes live in another (any) file on this machine
        del f["model_weights/dense/dense/kernel:0"]
        f["model_weights/dense/dense"].create_dataset("kernel:0", shape=(5, 3), dtype="u1",
                                                      external=[(str(secret), 0, 15)])
    add("h5_external_storage_dataset", _h5_edit(SEQ, h / "external_storage.h5", external_storage),
        note="would copy another file's bytes into the converted model")

    def virtual(f):
        layout = h5py.VirtualLayout(shape=(6, 24), dtype="f4")
        layout[:] = h5py.VirtualSource(str(target), "/" + K1 + "/kernel:0", shape=(6, 24))
        del f[K1 + "/kernel:0"]
        f[K1].create_virtual_dataset("kernel:0", layout)
    add("h5_virtual_dataset", _h5_edit(SEQ, h / "virtual.h5", virtual))

    def dup_layer_names(f):
        f["model_weights"].attrs["layer_names"] = np.array(["cu_dnngru", "cu_dnngru_1", "cu_dnngru"],
                                                           dtype=h5py.string_dtype())
    add("h5_duplicate_layer_names", _h5_edit(SEQ, h / "dup_layers.h5", dup_layer_names))
    add("h5_weight_names_not_strings", _h5_edit(SEQ, h / "wn_numbers.h5", lambda f: f[
        "model_weights/cu_dnngru"].attrs.__setitem__("weight_names", np.array([1.0, 2.0, 3.0]))))

    # code and unknown classes
    marker = dest / "MARKER_lambda_code_ran"
    lam = _h5_edit(SEQ, h / "lambda.h5", lambda f: _insert_layer(f, _lambda_layer(marker), 1, "evil_lambda"))
    add("h5_lambda_marshal_code", lam, marker=marker)
    add("h5_lambda_marshal_code_weights", lam, extra=("--format", "h5-weights"), marker=marker,
        note="the converted weights alone carry no code: written, and the Lambda never runs")
    add("h5_lambda_marshal_code_verify", lam, command="verify", output="none", marker=marker)
    add("h5_lambda_marshal_code_inspect", lam, command="inspect", output="none", marker=marker)
    add("h5_unknown_custom_layer", _h5_edit(SEQ, h / "custom.h5", lambda f: _insert_layer(
        f, {"class_name": "MyAttention", "config": {"name": "my_attention", "trainable": True,
                                                     "dtype": "float32", "heads": 4}}, 3, "my_attention")))
    marker2 = dest / "MARKER_module_import_ran"
    add("h5_custom_object_module_os", _h5_edit(SEQ, h / "module_os.h5", lambda f: _insert_layer(
        f, {"module": "os", "class_name": "system", "registered_name": "system",
            "config": {"command": f"touch {marker2}", "name": "sys"}}, 3, "sys")), marker=marker2)

    # issue 45 item 6: a class named after a function of Keras's layer namespace is no user's class, and a
    # carried-over config is searched for code as the model's own layers are
    add("h5_deserialize_lambda", _h5_edit(SEQ, h / "deserialize_lambda.h5", lambda f: _insert_layer(
        f, _namespace_wrapper("deserialize", _lambda_layer(marker)), 1, "evil_deser")), marker=marker)
    add("h5_deserialize_lambda_verify", h / "deserialize_lambda.h5", command="verify", output="none", marker=marker)
    add("h5_deserialize_tfsmlayer", _h5_edit(SEQ, h / "deserialize_tfsm.h5", lambda f: _insert_layer(
        f, _namespace_wrapper("deserialize", _tfsm_layer(dest / "outside_saved_model")), 1, "evil_deser")))
    add("h5_tfsmlayer", _h5_edit(SEQ, h / "tfsm.h5", lambda f: _insert_layer(
        f, _tfsm_layer(dest / "outside_saved_model"), 1, "tfsm")))
    add("h5_custom_layer_holding_lambda", _h5_edit(SEQ, h / "custom_lambda.h5", lambda f: _insert_layer(
        f, {"class_name": "MyWrapper", "config": {"name": "my_wrapper", "inner": _lambda_layer(marker)}}, 3,
        "my_wrapper")), marker=marker)

    # valid but awkward: attribute strings as bytes or as str
    add("h5_attrs_as_bytes", _h5_edit(SEQ, h / "attrs_bytes.h5", lambda f: _all_attrs(f, _to_bytes)),
        note="valid input (Keras 2 + h5py 2 wrote bytes)")
    add("h5_attrs_as_str", _h5_edit(KERAS / "long_names.h5", h / "attrs_str.h5", lambda f: _all_attrs(f, _to_str)),
        note="valid input (split layer_names0/1 attributes turned into UTF-8 vlen str)")

    # ------------------------------------------------------------------ TF1 checkpoints
    t = dest / "tf1"
    t.mkdir()
    idx = (TF1 / "layer_uni" / "model.ckpt.index").read_bytes()
    dat = (TF1 / "layer_uni" / "model.ckpt.data-00000-of-00001").read_bytes()
    for off in (0, 1, 20, len(idx) // 2, len(idx) - 48, len(idx) - 1):
        d = _tf1_copy("layer_uni", t / f"index_trunc_{off}")
        (d / "model.ckpt.index").write_bytes(idx[:off])
        add(f"tf1_index_truncated_at_{off}", d, requires=("tf1",))
    for off in (0, 1504, 2000, len(dat) - 1):
        d = _tf1_copy("layer_uni", t / f"data_trunc_{off}")
        (d / "model.ckpt.data-00000-of-00001").write_bytes(dat[:off])
        add(f"tf1_data_truncated_at_{off}", d, requires=("tf1",))
    for label, off in (("table_entry", 30), ("block_trailer_crc", len(idx) - 48 - 2),
                       ("footer_magic", len(idx) - 3)):
        d = _tf1_copy("layer_uni", t / f"index_flip_{label}")
        (d / "model.ckpt.index").write_bytes(flip_bit(idx, off, 2))
        add(f"tf1_index_flip_{label}", d, requires=("tf1",))
    for label, off in (("opaque", 1504 + 100), ("canonical_gates_kernel", 9512 + 17)):
        d = _tf1_copy("layer_uni", t / f"data_flip_{label}")
        (d / "model.ckpt.data-00000-of-00001").write_bytes(flip_bit(dat, off, 5))
        add(f"tf1_data_flip_{label}", d, requires=("tf1",))
    d = _tf1_copy("layer_uni", t / "missing_shard")
    (d / "model.ckpt.data-00000-of-00001").unlink()
    add("tf1_missing_data_shard", d, requires=("tf1",))
    d = _tf1_copy("sharded", t / "missing_shard_1_of_2")
    (d / "model.ckpt.data-00001-of-00002").unlink()
    add("tf1_sharded_missing_shard", d, requires=("tf1",))
    d = t / "checkpoint_nowhere"
    d.mkdir()
    (d / "checkpoint").write_text('model_checkpoint_path: "gone/model.ckpt-1000"\n')
    add("tf1_checkpoint_file_points_nowhere", d, requires=("tf1",))
    d = t / "checkpoint_garbage"
    d.mkdir()
    (d / "checkpoint").write_bytes(b"\xff\xfe\x00garbage" * 10)
    add("tf1_checkpoint_file_garbage", d, requires=("tf1",))

    def odd_buffer(ts):  # layer-style name, so the reader finds it by itself
        ts["cudnn_gru/opaque_kernel"] = np.concatenate([ts.pop("encoder/cudnn_params"), np.zeros(1, np.float32)])
    add("tf1_opaque_size_fits_no_gru", _tf1_rewrite("tf14_opaque_only", t / "odd_buffer", odd_buffer),
        requires=("tf1",), note="295 values: 3*(H*I + H*H + 2H)*dirs*... has no solution")
    add("tf1_hints_contradict_buffer", TF1 / "tf14_opaque_only",
        extra=("--variable", "encoder/cudnn_params", "--num-units", "9"),
        requires=("tf1",), note="294 values cannot hold a 9-unit GRU of any input size")
    add("tf1_hints_contradict_canonical", TF1 / "layer_uni", extra=("--num-units", "8", "--prefer", "opaque"),
        requires=("tf1",))

    def drop_canonical(ts):
        del ts[_L1 + "candidate/hidden_projection/bias"]
    add("tf1_canonical_missing_piece", _tf1_rewrite("layer_uni", t / "canon_missing", drop_canonical),
        requires=("tf1",), note="one of 12 canonical tensors gone")

    def drop_all_l1(ts):
        for k in [k for k in ts if k.startswith(_L1)]:
            del ts[k]
    add("tf1_canonical_missing_layer", _tf1_rewrite("layer_uni", t / "canon_missing_layer", drop_all_l1),
        requires=("tf1",), note="canonical tensors of layer 1 gone; the buffer holds 2 layers")

    def canon_int(ts):
        ts[_L0 + "gates/kernel"] = (ts[_L0 + "gates/kernel"] * 1000).astype(np.int32)
    add("tf1_canonical_int_dtype", _tf1_rewrite("layer_uni", t / "canon_int", canon_int), requires=("tf1",))

    def canon_mixed(ts):
        ts[_L0 + "gates/bias"] = ts[_L0 + "gates/bias"].astype(np.float64)
    add("tf1_canonical_mixed_dtype", _tf1_rewrite("layer_uni", t / "canon_mixed", canon_mixed),
        requires=("tf1",))

    def canon_shape(ts):
        ts[_L0 + "gates/kernel"] = np.ascontiguousarray(ts[_L0 + "gates/kernel"].T)
    add("tf1_canonical_wrong_shape", _tf1_rewrite("layer_uni", t / "canon_shape", canon_shape),
        requires=("tf1",), note="gates/kernel stored transposed [2H, in+H]")

    def opaque_int(ts):
        ts["encoder/cudnn_params"] = (ts["encoder/cudnn_params"] * 1000).astype(np.int32)
    add("tf1_opaque_int_dtype", _tf1_rewrite("tf14_opaque_only", t / "opaque_int", opaque_int),
        extra=("--variable", "encoder/cudnn_params"), requires=("tf1",))

    def opaque_2d(ts):
        ts["encoder/cudnn_params"] = ts["encoder/cudnn_params"].reshape(42, 7)
    add("tf1_opaque_2d", _tf1_rewrite("tf14_opaque_only", t / "opaque_2d", opaque_2d),
        extra=("--variable", "encoder/cudnn_params"), requires=("tf1",))

    def nan_tf1(ts):
        # the same NaN/Inf in the buffer and the canonical tensors, so the cross-check agrees
        from gruconv.model.cudnn_layout import pack, unpack
        from gruconv.model.canonical import StackShape

        shape = StackShape(5, 7, 2, False, "linear", "float32")
        params = unpack(ts[_OPAQUE], shape)
        params[0].input_weights[2, 0, 0] = np.nan   # candidate W (linLayerID 2), row 0, col 0
        params[0].recurrent_weights[2, 1, 1] = np.inf  # candidate R (linLayerID 5)
        ts[_OPAQUE] = pack(params, shape)
        k = ts[_L0 + "candidate/input_projection/kernel"].copy()   # W2.T  [in, H]
        k[0, 0] = np.nan
        ts[_L0 + "candidate/input_projection/kernel"] = k
        k = ts[_L0 + "candidate/hidden_projection/kernel"].copy()  # W5.T  [H, H]
        k[1, 1] = np.inf
        ts[_L0 + "candidate/hidden_projection/kernel"] = k
    add("tf1_nan_inf_weights", _tf1_rewrite("layer_uni", t / "nan", nan_tf1), requires=("tf1",),
        note="valid input: converts with a warning")

    def huge_claim(ts):
        return {_OPAQUE: ((2**40,), 2**42)}
    add("tf1_opaque_claims_terabytes", _tf1_rewrite("layer_uni", t / "huge", huge_claim), requires=("tf1",),
        note="the index claims a 4 TiB buffer; the data file holds 11 KB")

    # ------------------------------------------------------------------ outputs
    o = dest / "out"
    o.mkdir()
    ro = o / "readonly"
    ro.mkdir()
    os.chmod(ro, 0o555)
    ro_blocked = not _can_write_dir(ro)
    add("out_readonly_directory", SEQ, output="readonly_dir", outputs_dir=ro, blocked=ro_blocked,
        note="chmod 555" + ("" if ro_blocked else "; running as root: the directory stays writable, "
                                                     "so the conversion succeeds"))
    add("out_parent_missing", SEQ, output="missing_parent")
    add("out_exists_no_force", SEQ, output="exists")
    add("out_is_directory", SEQ, output="is_dir")
    add("out_unknown_extension", SEQ, output="bad_ext")

    # ------------------------------------------------------------------ batch path mirroring
    b = dest / "batch"
    (b / "in" / "sub").mkdir(parents=True)
    _copy(SEQ, b / "in" / "sub" / "a.h5")
    _copy(SEQ, b / "in" / "..weird..h5")
    add("batch_dotdot_input", b / "in" / "sub" / ".." / "sub" / "a.h5", requires=("batch",), output="out_dir")
    add("batch_absolute_input", (b / "in" / "sub" / "a.h5").resolve(), requires=("batch",), output="out_dir")
    add("batch_dotdot_in_name", b / "in" / "..weird..h5", requires=("batch",), output="out_dir")
    _hostile_files(dest, add)
    return cases


# --------------------------------------------------------------------------- special files, limits, escapes

def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _sparse(path: Path, size: int, head: bytes = b"", tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
        if tail:
            f.seek(size - len(tail))
            f.write(tail)
    return path


def _npz(path: Path, members: dict, compression=None) -> Path:
    import zipfile

    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression or zipfile.ZIP_STORED) as z:
        for name, raw in members.items():
            z.writestr(name, raw)
    return path


def _npy(arr, allow_pickle=False) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


#: Bytes of corpus files that are slow to make and the same every time, made once per process.
_MADE: dict = {}


def _hostile_files(dest: Path, add) -> None:
    """FIFOs, devices, sparse and oversized files, escaping ``checkpoint`` paths, outputs that are
    inputs, control characters in names, JSON/npz bombs, batch discovery traps (``gruconv.files.inputs``)."""
    import io
    import zipfile

    x = dest / "x"
    x.mkdir()
    L = dict(limited=True)
    # -- special files where a model was expected: never opened, never blocking
    add("x_fifo_input", _fifo(x / "fifo" / "model.h5"), **L)
    add("x_fifo_input_inspect", x / "fifo" / "model.h5", command="inspect", output="none", **L)
    add("x_dev_null_input", Path("/dev/null"), **L)
    add("x_dev_zero_input_inspect", Path("/dev/zero"), command="inspect", output="none", **L)
    add("x_directory_named_h5", (x / "dir.h5").mkdir() or x / "dir.h5", **L)
    os.symlink(SEQ, x / "link_to_model.h5")
    add("x_symlink_to_regular_model", x / "link_to_model.h5", **L,
        note="a symlink the user gives is followed: only its final target must be a regular file")
    os.symlink(x / "fifo" / "model.h5", x / "link_to_fifo.h5")
    add("x_symlink_to_fifo", x / "link_to_fifo.h5", **L)
    os.symlink("loop_b.h5", x / "loop_a.h5")
    os.symlink("loop_a.h5", x / "loop_b.h5")
    add("x_symlink_loop", x / "loop_a.h5", **L)
    os.symlink(x / "nowhere.h5", x / "dangling.h5")
    add("x_dangling_symlink_input", x / "dangling.h5", **L)
    # TF1 checkpoints with special files inside
    for label, fn in (("fifo", lambda p: (p.unlink(), _fifo(p))),
                      ("directory", lambda p: (p.unlink(), p.mkdir())),
                      ("dev_zero", lambda p: (p.unlink(), os.symlink("/dev/zero", p))),
                      ("dangling", lambda p: (p.unlink(), os.symlink(x / "gone.data", p)))):
        d = _tf1_copy("layer_uni", x / f"shard_{label}")
        fn(d / "model.ckpt.data-00000-of-00001")
        add(f"x_tf1_data_shard_{label}", d, requires=("tf1",), **L)
    add("x_tf1_data_shard_fifo_inspect", x / "shard_fifo", command="inspect", output="none",
        requires=("tf1",), **L)
    d = _tf1_copy("layer_uni", x / "index_fifo")
    (d / "model.ckpt.index").unlink()
    _fifo(d / "model.ckpt.index")
    add("x_tf1_index_fifo", d, requires=("tf1",), **L)
    d = _tf1_copy("layer_uni", x / "state_fifo")
    (d / "checkpoint").unlink()
    _fifo(d / "checkpoint")
    add("x_tf1_state_file_fifo", d, requires=("tf1",), **L,
        note="a `checkpoint` that is no regular file is ignored; the one .index beside it is used")
    # -- sizes: refused from fstat / headers, before anything is read or allocated
    d = x / "sparse_index"
    d.mkdir()
    (d / "checkpoint").write_text('model_checkpoint_path: "model.ckpt"\n')
    _sparse(d / "model.ckpt.index", 2**31 + 5, tail=struct.pack("<Q", 0xDB4775248B80FB57))
    _copy(TF1 / "layer_uni" / "model.ckpt.data-00000-of-00001", d / "model.ckpt.data-00000-of-00001")
    add("x_tf1_sparse_2gb_index", d, requires=("tf1",), **L, note="a 2 GiB sparse .index: never read whole")
    d = _tf1_copy("layer_uni", x / "state_huge")
    (d / "checkpoint").write_text('model_checkpoint_path: "model.ckpt"\n' + "# padding\n" * 200_000)
    add("x_tf1_state_file_over_1mib", d, requires=("tf1",), **L)
    add("x_tf1_index_over_env_limit", TF1 / "layer_uni", requires=("tf1",), env={"GRUCONV_MAX_BYTES": "500"},
        **L, note="GRUCONV_MAX_BYTES lowers every limit: the 1 KB index is refused and the message names it")
    add("x_env_limit_not_a_number", SEQ, env={"GRUCONV_MAX_BYTES": "lots"}, **L)

    def big_other(ts):
        ts["extra/embedding"] = np.ones(6 * 2**20 // 4, np.float32)   # 6 MiB, copied to OUT.rest.npz
    add("x_tf1_tensor_over_env_limit", _tf1_rewrite("layer_uni", x / "big_tensor", big_other), requires=("tf1",),
        env={"GRUCONV_MAX_BYTES": "4M"}, **L)
    h = x / "h5"
    h.mkdir()

    def small_bombs(f):  # 3000 chunked datasets of 1 MiB declared each, none stored: 3 GiB of fill
        g = f["model_weights/dense/dense"]
        names = [n.decode() if isinstance(n, bytes) else n for n in f["model_weights/dense"].attrs["weight_names"]]
        for i in range(3000):
            g.create_dataset(f"w{i}:0", shape=(2**18,), dtype="f4", chunks=(2**12,))
            names.append(f"dense/w{i}:0")
        import h5py
        f["model_weights/dense"].attrs["weight_names"] = np.array(names, dtype=h5py.string_dtype())
    add("x_h5_many_small_shape_bombs", _h5_edit(SEQ, h / "small_bombs.h5", small_bombs), **L,
        note="each under the per-dataset 1 MiB floor; together 3 GiB declared and nothing stored")

    def deep_config(f):
        f.attrs["model_config"] = b"[" * 200_000 + b"]" * 200_000
    add("x_h5_model_config_200k_nested", _h5_edit(SEQ, h / "deep_config.h5", deep_config), **L)
    add("x_h5_model_config_200k_nested_inspect", h / "deep_config.h5", command="inspect", output="none", **L)
    # -- --config JSON: size, depth, special files
    wo = KERAS / "weights_only.h5"
    (x / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    add("x_config_200k_nested", wo, extra=("--config", str(x / "deep.json")), watch=(x / "deep.json",), **L)
    (x / "huge.json").write_text('{"pad": "' + "x" * (17 * 2**20) + '"}')
    add("x_config_over_16mib", wo, extra=("--config", str(x / "huge.json")), watch=(x / "huge.json",), **L)
    add("x_config_fifo", wo, extra=("--config", str(_fifo(x / "config_fifo.json"))), **L)
    add("x_config_directory", wo, extra=("--config", str(x / "dir.h5")), **L)
    # -- `checkpoint` state files that point elsewhere
    other = _tf1_copy("layer_uni", x / "elsewhere")
    for label, target in (("dotdot", "../elsewhere/model.ckpt"), ("absolute_outside", str(other / "model.ckpt"))):
        d = x / f"state_{label}"
        d.mkdir()
        (d / "checkpoint").write_text(f'model_checkpoint_path: "{target}"\n')
        add(f"x_tf1_state_{label}", d, requires=("tf1",), watch=(other,), **L)
    d = _tf1_copy("layer_uni", x / "state_absolute_inside")
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{d.resolve() / "model.ckpt"}"\n')
    add("x_tf1_state_absolute_inside", d, requires=("tf1",), **L)
    d = _tf1_copy("layer_uni", x / "state_copied_from_elsewhere")
    (d / "checkpoint").write_text('model_checkpoint_path: "/no/such/machine/run7/model.ckpt"\n')
    add("x_tf1_state_absolute_moved_beside", d, requires=("tf1",), **L,
        note="a directory copied from another machine: the prefix beside the state file is used")
    d = x / "state_symlinked_subdir"
    d.mkdir()
    os.symlink(other, d / "sub")
    (d / "checkpoint").write_text('model_checkpoint_path: "sub/model.ckpt"\n')
    add("x_tf1_state_symlinked_subdir_outside", d, requires=("tf1",), watch=(other,), **L)
    d = x / "state_escapes"
    d.mkdir()
    (d / "checkpoint").write_text('model_checkpoint_path: "gone\\n\\033[31mred"\n')
    add("x_tf1_state_path_control_chars", d, requires=("tf1",), **L,
        note="the named path holds a newline and ESC: the message stays one line")
    # -- outputs that are inputs (refused even with --force)
    o = x / "outs"
    o.mkdir()
    # each case its own copy: a case that fails to refuse destroys its input
    w = _copy(KERAS / "weights_only.h5", o / "same" / "w.h5")
    add("x_out_is_input", w, argv=("convert", str(w), str(w), "--force"), **L)
    w = _copy(KERAS / "weights_only.h5", o / "dotdot" / "w.h5")
    (o / "dotdot" / "sub").mkdir()
    add("x_out_is_input_dotdot", w, argv=("convert", str(w), str(w.parent / "sub" / ".." / "w.h5"), "--force"), **L)
    w = _copy(KERAS / "weights_only.h5", o / "hard" / "w.h5")
    os.link(w, w.parent / "hard.h5")
    add("x_out_is_input_hardlink", w, argv=("convert", str(w), str(w.parent / "hard.h5"), "--force"), **L)
    w = _copy(KERAS / "weights_only.h5", o / "sym" / "w.h5")
    os.symlink(w, w.parent / "sym.h5")
    add("x_out_is_input_symlink", w, argv=("convert", str(w), str(w.parent / "sym.h5"), "--force"), **L)
    ck = _tf1_copy("layer_uni", o / "ck")
    add("x_out_is_tf1_index", ck, argv=("convert", str(ck), str(ck / "model.ckpt.index"), "--force", "--format",
                                        "keras"), requires=("tf1",), **L)
    add("x_out_is_tf1_data_shard", ck, argv=("convert", str(ck), str(ck / "model.ckpt.data-00000-of-00001"),
                                             "--force", "--format", "keras"), requires=("tf1",), **L)
    os.symlink(o / "nowhere.keras", o / "dangling.keras")
    add("x_out_dangling_symlink", SEQ, argv=("convert", str(SEQ), str(o / "dangling.keras")), **L)
    # -- control characters in names: one line, escaped
    nl = x / "ctl"
    nl.mkdir()
    add("x_input_name_newline_missing", nl / "no\nsuch.h5", **L)
    bad = nl / "\x1b[31mred.h5"
    bad.write_text("not a model\n")
    add("x_input_name_escape_sequence", bad, **L)
    add("x_output_name_newline", SEQ, argv=("convert", str(SEQ), str(nl / "no\ndir" / "m.keras")), **L)
    # -- verify --inputs .npz: bombs, pickles, special files
    v = x / "npz"
    v.mkdir()
    def npy_header(shape, descr="<f4") -> bytes:
        import io

        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
        return buf.getvalue()
    _npz(v / "header_huge.npz", {"x.npy": npy_header((2**40,)) + bytes(64)})
    add("x_verify_inputs_npz_header_claims_huge", SEQ, command="verify", output="none",
        extra=("--inputs", str(v / "header_huge.npz")), watch=(v / "header_huge.npz",), **L,
        note="the .npy header claims 4 TiB; 64 bytes follow")
    if "bomb.npz" not in _MADE:  # deflating 256 MiB is 1.5 s: once per process (collection, then the fixture)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            with z.open("x.npy", "w", force_zip64=True) as m:
                m.write(npy_header((2**26,)))
                chunk = bytes(2**20)
                for _ in range(256):
                    m.write(chunk)
        _MADE["bomb.npz"] = buf.getvalue()
    (v / "bomb.npz").write_bytes(_MADE["bomb.npz"])
    add("x_verify_inputs_npz_deflate_bomb", SEQ, command="verify", output="none",
        extra=("--inputs", str(v / "bomb.npz")), watch=(v / "bomb.npz",), **L,
        note="256 MiB of zeros deflated past 1000:1")
    marker = dest / "MARKER_npz_pickle_ran"
    class _Bait:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    arr = np.empty(1, dtype=object)
    arr[0] = _Bait()
    _npz(v / "pickle.npz", {"x.npy": _npy(arr, allow_pickle=True)})
    add("x_verify_inputs_npz_pickle", SEQ, command="verify", output="none", marker=marker,
        extra=("--inputs", str(v / "pickle.npz")), watch=(v / "pickle.npz",), **L)
    add("x_verify_inputs_fifo", SEQ, command="verify", output="none",
        extra=("--inputs", str(_fifo(v / "inputs_fifo.npz"))), **L)
    # -- batch: outputs mapped onto inputs, report files that are inputs, discovery traps
    bo = x / "batch"
    (bo / "in").mkdir(parents=True)
    bw = _copy(KERAS / "weights_only.h5", bo / "in" / "w.h5")
    add("x_batch_out_dir_is_input_dir", bw, requires=("batch",),
        argv=("convert", str(bw), "--out-dir", str(bo / "in"), "--force", "--jobs", "1"), **L)
    add("x_batch_report_is_input", bw, requires=("batch",),
        argv=("convert", str(bw), "--out-dir", "{outdir}", "--report", str(bw), "--jobs", "1"), **L)
    os.link(bw, bo / "w_hard.h5")
    add("x_batch_junit_is_input_hardlink", bw, requires=("batch",),
        argv=("convert", str(bw), "--out-dir", "{outdir}", "--junit", str(bo / "w_hard.h5"), "--jobs", "1"), **L)
    lp = bo / "loops"
    (lp / "sub").mkdir(parents=True)
    _copy(SEQ, lp / "sub" / "m.h5")
    os.symlink("..", lp / "sub" / "up")
    os.symlink(".", lp / "self")
    _fifo(lp / "sub" / "pipe.h5")
    add("x_batch_glob_symlink_loops_and_fifo", Path(str(lp) + "/**/*.h5"), requires=("batch",), output="out_dir",
        watch=(lp / "sub" / "m.h5",), **L, note="glob over symlink loops and a FIFO named .h5: one model, no hang")
    add("x_batch_walk_symlink_loops_and_fifo", lp, requires=("batch",), output="out_dir",
        watch=(lp / "sub" / "m.h5",), **L)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: make_bad_inputs.py DEST_DIR", file=sys.stderr)
        return 2
    dest = Path(argv[0])
    if dest.exists() and any(dest.iterdir()):
        print(f"{dest} is not empty", file=sys.stderr)
        return 2
    cases = make_corpus(dest)
    for c in cases:
        extra = f" {' '.join(c.extra)}" if c.extra else ""
        print(f"{c.name:45} {c.command}{extra} {c.input.relative_to(dest) if dest in c.input.parents else c.input}"
              + (f"  [{c.note}]" if c.note else ""))
    print(f"{len(cases)} cases in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
