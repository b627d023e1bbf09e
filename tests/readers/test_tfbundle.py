"""Tests for gruconv.readers.tfbundle: differential against TensorFlow, plus hostile inputs.

TensorFlow writes the real checkpoints (``tf.raw_ops.SaveV2`` /
``MergeV2Checkpoints`` / ``tf.train.Checkpoint``) and is the oracle
(``tf.train.load_checkpoint`` / ``tf.train.list_variables``).  Malformed files
are crafted with the small bundle writer below, whose output TensorFlow itself
accepts (``test_crafted_writer_is_readable_by_tensorflow``), so each corruption
test changes exactly one thing in an otherwise valid file.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile
import tracemalloc
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gruconv.readers import tfbundle
from gruconv.errors import GruconvError, InputError, UnsupportedError
from gruconv.readers.tfbundle import TensorInfo, TensorNotFound, open_bundle, resolve_prefix

from bundle_proto import _fb, _fv, _mask, _vint

# --------------------------------------------------------------------------- TF


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported lazily so a broken install fails here, clearly; quiet while it starts,
    the environment restored after the module."""
    with pytest.MonkeyPatch.context() as mp:
        if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
            mp.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow

        yield tensorflow


def _tf_dtypes(tf):
    return {
        "float16": tf.float16, "float32": tf.float32, "float64": tf.float64,
        "bfloat16": tf.bfloat16, "int8": tf.int8, "int16": tf.int16, "int32": tf.int32,
        "int64": tf.int64, "uint8": tf.uint8, "uint16": tf.uint16, "uint32": tf.uint32,
        "uint64": tf.uint64, "bool": tf.bool, "complex64": tf.complex64,
        "complex128": tf.complex128, "string": tf.string,
    }


def _make_value(tf, dtype: str, shape, rng: np.random.Generator):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "string":
        vals = [bytes(rng.integers(0, 256, rng.integers(0, 6)).astype(np.uint8)) for _ in range(n)]
        return tf.constant(np.array(vals, dtype=object).reshape(shape), tf.string)
    if dtype == "bool":
        return tf.constant(rng.integers(0, 2, n).astype(bool).reshape(shape))
    if dtype.startswith("complex"):
        a = rng.standard_normal(n) + 1j * rng.standard_normal(n)
        return tf.constant(a.astype(dtype).reshape(shape))
    if dtype in ("float16", "float32", "float64", "bfloat16"):
        a = rng.standard_normal(n).astype(np.float32) * 100
        if n:
            a[0] = np.nan if n > 2 else a[0]
            a[-1] = -0.0
        return tf.cast(tf.constant(a.reshape(shape)), _tf_dtypes(tf)[dtype])
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return tf.constant(a.reshape(shape))


def _save(tf, prefix, named: dict):
    names = list(named)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=[named[k] for k in names])


def _assert_same_as_tf(tf, prefix, *, check_values=True):
    """Same keys, shapes, dtypes and bytes as TensorFlow's own reader."""
    reader = tf.train.load_checkpoint(str(prefix))
    tf_dtypes = reader.get_variable_to_dtype_map()
    tf_vars = dict(tf.train.list_variables(str(prefix)))
    with open_bundle(prefix) as b:
        assert b.keys() == sorted(tf_vars, key=lambda k: k.encode())
        assert len(b) == len(tf_vars)
        for info in b:
            assert list(info.shape) == list(tf_vars[info.key]), info.key
            assert info.dtype == tf_dtypes[info.key].name, info.key
            if not check_values:
                continue
            ours = b.read(info.key)
            # a scalar string comes back as bytes: np.asarray would make it |S and drop trailing NULs
            theirs = np.asarray(reader.get_tensor(info.key), dtype=object if info.dtype == "string" else None)
            assert ours.shape == theirs.shape, info.key
            if info.dtype == "string":
                assert ours.dtype == object
                assert ours.tolist() == theirs.astype(object).tolist(), info.key
            else:
                assert ours.dtype == theirs.dtype, info.key
                assert ours.tobytes() == theirs.tobytes(), info.key
    return reader


ALL_DTYPES = ["float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
              "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "string"]


@pytest.fixture(scope="module")
def small_ckpt(tf, tmp_path_factory):
    """A small single-shard checkpoint; tests copy it before damaging it."""
    d = tmp_path_factory.mktemp("small")
    rng = np.random.default_rng(0)
    named = {
        "kernel": _make_value(tf, "float32", (3, 4), rng),
        "rnn/cudnn_gru/opaque_kernel": _make_value(tf, "float32", (57,), rng),
        "bias_cudnn 0": _make_value(tf, "float16", (), rng),
        "step": _make_value(tf, "int64", (), rng),
        "empty": _make_value(tf, "float64", (0, 3), rng),
        "names": _make_value(tf, "string", (2,), rng),
    }
    _save(tf, d / "model.ckpt-7", named)
    return d / "model.ckpt-7"


def _copy_ckpt(prefix: Path, dest_dir: Path) -> Path:
    for f in prefix.parent.glob(prefix.name + ".*"):
        shutil.copy(f, dest_dir / f.name)
    return dest_dir / prefix.name


# ------------------------------------------------------- differential vs TF


def test_every_dtype_scalars_and_empty_tensors_match_tf(tf, tmp_path):
    rng = np.random.default_rng(1)
    named = {}
    for dt in ALL_DTYPES:
        named[f"{dt}/matrix"] = _make_value(tf, dt, (3, 5), rng)
        named[f"{dt}/scalar"] = _make_value(tf, dt, (), rng)
        named[f"{dt}/empty"] = _make_value(tf, dt, (2, 0, 4), rng)
    _save(tf, tmp_path / "all", named)
    _assert_same_as_tf(tf, tmp_path / "all")
    with open_bundle(tmp_path / "all") as b:
        assert b.info("bfloat16/matrix").dtype == "bfloat16"
        assert b.read("float32/scalar").shape == ()
        assert b.read("int8/empty").shape == (2, 0, 4)
        assert b.read("bool/matrix").dtype == np.bool_
        assert b.read("string/scalar").dtype == object
        info = b.info("float64/matrix")
        assert info.nbytes == info.size == 3 * 5 * 8
        assert info.crc32c == google_crc32c.value(b.read("float64/matrix").tobytes())
        assert b.total_bytes() == sum(i.size for i in b)


def test_large_tensor_checksum_in_chunks(tf, tmp_path):
    """12 MiB crosses the reader's 8 MiB crc chunk; a flip past the first chunk is caught."""
    big = np.random.default_rng(6).standard_normal((3, 1 << 20)).astype(np.float32)
    _save(tf, tmp_path / "big", {"big": tf.constant(big), "small": tf.constant([1, 2])})
    _assert_same_as_tf(tf, tmp_path / "big")
    with open_bundle(tmp_path / "big") as b:
        info = b.info("big")
    data = tmp_path / "big.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[info.offset + 10_000_000] ^= 0x80
    data.write_bytes(bytes(raw))
    with open_bundle(tmp_path / "big") as b:
        with pytest.raises(InputError, match="'big': checksum mismatch"):
            b.read("big")
        with pytest.raises(InputError, match="'big': checksum mismatch"):
            b.view("big")
        assert b.read("small").tolist() == [1, 2]
        assert b.view("big", verify=False)[2, 0] == big[2, 0]


def test_views_match_reads_for_every_dtype(tf, tmp_path):
    """Bundle.view maps numeric tensors read-only (no copy) and hands the rest to read."""
    rng = np.random.default_rng(11)
    named = {}
    for dt in ALL_DTYPES:
        named[f"{dt}/matrix"] = _make_value(tf, dt, (3, 5), rng)
        named[f"{dt}/scalar"] = _make_value(tf, dt, (), rng)
        named[f"{dt}/empty"] = _make_value(tf, dt, (2, 0, 4), rng)
    _save(tf, tmp_path / "all", named)
    with open_bundle(tmp_path / "all") as b:
        for info in b:
            a, v = b.read(info.key), b.view(info.key)
            assert v.shape == a.shape and v.dtype == a.dtype, info.key
            if info.dtype == "string":
                assert v.tolist() == a.tolist()
                continue
            assert v.tobytes() == a.tobytes(), info.key
            if info.dtype != "bool" and info.size:
                assert not v.flags.writeable, info.key
        m = b.view("float64/matrix")
        b.release()  # pages dropped from RSS, values read again from the file
        assert m.tobytes() == b.read("float64/matrix").tobytes()


def test_returned_arrays_are_writable_and_owned(small_ckpt):
    with open_bundle(small_ckpt) as b:
        a = b.read("kernel")
        a[0, 0] = 42.0  # must not raise, must not touch the file
        assert b.read("kernel")[0, 0] != 42.0


def test_many_keys_span_several_blocks_and_restarts(tf, tmp_path):
    """3000 long keys sharing prefixes: several 256 KiB data blocks, many restart points."""
    rng = np.random.default_rng(2)
    named = {}
    for i in range(3000):
        layer = f"model/encoder/layer_{i % 7}/cudnn_gru/sublayer_{i % 13:02d}/"
        named[layer + f"param_{i:05d}_" + "x" * (i % 90) + f"{rng.integers(1 << 62):x}" * 2] = (
            tf.constant(np.float32(i)) if i % 3 else tf.constant([i, -i], tf.int32))
    _save(tf, tmp_path / "many", named)
    index = (tmp_path / "many.index").read_bytes()
    footer = index[-48:]
    off, p = tfbundle._varint(footer, 0, 40, "")
    _, p = tfbundle._varint(footer, p, 40, "")
    off, p = tfbundle._varint(footer, p, 40, "")
    size, p = tfbundle._varint(footer, p, 40, "")
    data_blocks = tfbundle._block_entries(
        tfbundle._read_block(index, off, size, len(index) - 48, "index"), "index")
    assert len(data_blocks) >= 2, "test checkpoint should span several data blocks"
    _assert_same_as_tf(tf, tmp_path / "many")


def test_open_reads_only_the_index(tf, tmp_path):
    """Keys and infos of a 3000-tensor checkpoint come from the index alone: the data shard is gone.
    (Opening speed is a benchmark number, ``docs/benchmarks.md``, not a timed assertion here.)"""
    named = {f"layer_{i:04d}/kernel": tf.zeros([4, 4]) for i in range(3000)}
    _save(tf, tmp_path / "fast", named)
    (tmp_path / "fast.data-00000-of-00001").unlink()  # index-only operations must not care
    with open_bundle(tmp_path / "fast") as b:
        keys = b.keys()
        infos = [b.info(k) for k in keys]
    assert len(infos) == 3000 and infos[0].shape == (4, 4)


def test_keys_with_spaces_slashes_and_unicode(tf, tmp_path):
    rng = np.random.default_rng(3)
    names = ["bias_cudnn 0", "a/b/c", "a/b", "a b/ c ", "ünï/cødé", "x" * 500, "a/b/c/d" * 20]
    _save(tf, tmp_path / "k", {n: _make_value(tf, "float32", (2,), rng) for n in names})
    _assert_same_as_tf(tf, tmp_path / "k")
    with open_bundle(tmp_path / "k") as b:
        assert set(b.keys()) == set(names)
        assert "bias_cudnn 0" in b and "bias_cudnn" not in b


def test_multi_shard_checkpoint_from_merge(tf, tmp_path):
    rng = np.random.default_rng(4)
    a = {f"shard_a/v{i}": _make_value(tf, "float32", (i + 1, 3), rng) for i in range(5)}
    b = {f"shard_b/v{i}": _make_value(tf, "int16", (i,), rng) for i in range(5)}
    _save(tf, tmp_path / "part-0", a)
    _save(tf, tmp_path / "part-1", b)
    tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=[str(tmp_path / "part-0"), str(tmp_path / "part-1")],
        destination_prefix=str(tmp_path / "merged"))
    assert (tmp_path / "merged.data-00001-of-00002").exists()
    _assert_same_as_tf(tf, tmp_path / "merged")
    with open_bundle(tmp_path / "merged") as bundle:
        assert bundle.num_shards == 2
        assert {i.shard for i in bundle} == {0, 1}
        shard_of_b = bundle.info("shard_b/v3").shard
        assert bundle.info("shard_a/v3").shard != shard_of_b
        # a .data path of the second shard resolves to the same prefix
        assert resolve_prefix(bundle.data_path(1)) == bundle.prefix


def test_partitioned_variable_is_listed_but_refused(tf, tmp_path):
    full = np.arange(12, dtype=np.float32).reshape(4, 3)
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "p"), tensor_names=["part", "part", "plain"],
                      shape_and_slices=["4 3 0,2:-", "4 3 2,2:-", ""],
                      tensors=[tf.constant(full[:2]), tf.constant(full[2:]), tf.constant([1.0])])
    _assert_same_as_tf(tf, tmp_path / "p", check_values=False)
    with open_bundle(tmp_path / "p") as b:
        assert b.keys() == ["part", "plain"]
        info = b.info("part")
        assert info.slices == 2 and info.shape == (4, 3) and info.dtype == "float32"
        assert b.total_bytes() == full.nbytes + 4
        with pytest.raises(UnsupportedError, match="partitioned"):
            b.read("part")
        assert b.read("plain").tolist() == [1.0]


def test_object_based_checkpoint_directory(tf, tmp_path):
    """tf.train.Checkpoint writes a `checkpoint` state file and a string object graph."""
    ckpt = tf.train.Checkpoint(w=tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3)),
                               b=tf.Variable(np.float64(2.5)))
    ckpt.save(str(tmp_path / "ckpt"))
    saved = ckpt.save(str(tmp_path / "ckpt"))  # the state file names the latest one
    assert (tmp_path / "checkpoint").is_file()
    assert resolve_prefix(tmp_path) == Path(saved)
    reader = _assert_same_as_tf(tf, tmp_path)
    with open_bundle(tmp_path) as b:
        graph = b.read("_CHECKPOINTABLE_OBJECT_GRAPH")
        assert graph.shape == ()
        assert graph.item() == reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")


SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_name = st.text(st.characters(codec="utf-8", exclude_characters="\x00",
                              exclude_categories=("Cs",)), min_size=1, max_size=40)


@SETTINGS
@given(spec=st.dictionaries(
    _name,
    st.tuples(st.sampled_from(ALL_DTYPES),
              st.lists(st.integers(0, 4), max_size=4)),
    min_size=1, max_size=12),
    seed=st.integers(0, 2**32 - 1))
def test_random_bundles_match_tf(tf, spec, seed):
    rng = np.random.default_rng(seed)
    named = {k: _make_value(tf, dt, tuple(shape), rng) for k, (dt, shape) in spec.items()}
    with tempfile.TemporaryDirectory() as d:
        _save(tf, Path(d) / "h", named)
        _assert_same_as_tf(tf, Path(d) / "h")


# ------------------------------------------------------------- path forms


def test_path_forms(small_ckpt, tmp_path):
    prefix = small_ckpt
    assert resolve_prefix(prefix) == prefix
    assert resolve_prefix(str(prefix)) == prefix
    assert resolve_prefix(Path(str(prefix) + ".index")) == prefix
    assert resolve_prefix(Path(str(prefix) + ".data-00000-of-00001")) == prefix
    # directory with exactly one .index and no state file
    assert resolve_prefix(prefix.parent) == prefix

    d = tmp_path / "with_state"
    d.mkdir()
    copied = _copy_ckpt(prefix, d)
    _copy_ckpt(prefix, d)
    (d / "other.index").write_bytes((d / (copied.name + ".index")).read_bytes())
    with pytest.raises(InputError, match="2 .index files"):
        resolve_prefix(d)
    (d / "checkpoint").write_text(
        f'model_checkpoint_path: "{copied.name}"\n'
        f'all_model_checkpoint_paths: "other"\n')
    assert resolve_prefix(d) == copied
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{copied}"\n')  # absolute
    assert resolve_prefix(d) == copied
    # absolute path from another machine: fall back to the file beside the state file
    (d / "checkpoint").write_text(f'model_checkpoint_path: "/nonexistent/dir/{copied.name}"\n')
    assert resolve_prefix(d) == copied
    # escaped quotes in a text-proto string
    odd = d / 'we"ird'
    for f in d.glob(copied.name + ".*"):
        shutil.copy(f, str(odd) + f.name[len(copied.name):])
    (d / "checkpoint").write_text('model_checkpoint_path: "we\\"ird"\n')
    assert resolve_prefix(d) == odd
    with open_bundle(d) as b:
        assert "kernel" in b


@pytest.mark.parametrize("setup, match", [
    (lambda d: None, "no `checkpoint` file and no \\*.index"),
    (lambda d: (d / "checkpoint").write_text("all_model_checkpoint_paths: 'x'\n"),
     "no model_checkpoint_path"),
    (lambda d: (d / "checkpoint").write_text('model_checkpoint_path: "gone"\n'),
     "gone.index does not exist"),
    (lambda d: (d / "checkpoint").write_text('model_checkpoint_path: ""\n'), "is empty"),
    (lambda d: (d / "checkpoint").write_bytes(b"\xff\xfe\x00"), "not UTF-8"),
])
def test_bad_directories(tmp_path, setup, match):
    setup(tmp_path)
    with pytest.raises(InputError, match=match):
        resolve_prefix(tmp_path)


def test_bad_paths(tmp_path):
    with pytest.raises(InputError, match="nor .*nope.index exists"):
        resolve_prefix(tmp_path / "nope")
    with pytest.raises(InputError, match="nor .*nope.index exists"):
        open_bundle(tmp_path / "nope.index")
    (tmp_path / ".index").write_bytes(b"x")  # a name that is only the suffix
    for odd in (tmp_path / ".index", tmp_path / ".meta", tmp_path, "x" * 5000, "a\x00b"):
        with pytest.raises(InputError):
            resolve_prefix(odd)
    h5 = tmp_path / "model.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n")
    with pytest.raises(InputError, match="not a TensorFlow V2 checkpoint") as exc:
        open_bundle(h5)
    assert str(h5) in str(exc.value)


# ------------------------------------------------- crafted bundles (hostile)


def header_proto(num_shards=1, endianness=0, producer=1, min_consumer=0) -> bytes:
    return (_fv(1, num_shards) + _fv(2, endianness)
            + _fb(3, _fv(1, producer) + _fv(2, min_consumer)))


def entry_proto(dtype, shape, shard=0, offset=0, size=0, crc_masked=0) -> bytes:
    shp = b"".join(_fb(2, _fv(1, d)) for d in shape)
    return (_fv(1, dtype) + _fb(2, shp) + _fv(3, shard) + _fv(4, offset) + _fv(5, size)
            + (_vint(6 << 3 | 5) + struct.pack("<I", crc_masked)))


def _block(items, restart_interval=16) -> bytes:
    out, restarts, prev = bytearray(), [], b""
    for i, (k, v) in enumerate(items):
        shared = 0
        if i % restart_interval:
            while shared < min(len(k), len(prev)) and k[shared] == prev[shared]:
                shared += 1
        else:
            restarts.append(len(out))
        out += _vint(shared) + _vint(len(k) - shared) + _vint(len(v)) + k[shared:] + v
        prev = k
    if not restarts:
        restarts = [0]
    trailer = struct.pack(f"<{len(restarts)}I", *restarts) + struct.pack("<I", len(restarts))
    return bytes(out) + trailer


def _with_trailer(block: bytes, ctype=0) -> bytes:
    crc = google_crc32c.value(block + bytes([ctype]))
    return block + bytes([ctype]) + struct.pack("<I", _mask(crc))


def build_table(items, block_entries=4, ctype=0) -> bytes:
    """An SSTable the way table_builder.cc lays it out (data, metaindex, index, footer)."""
    out, index_items = bytearray(), []
    for i in range(0, len(items), block_entries):
        chunk = items[i:i + block_entries]
        blk = _block(chunk)
        index_items.append((chunk[-1][0], _vint(len(out)) + _vint(len(blk))))
        out += _with_trailer(blk, ctype)
    meta = _block([])
    meta_handle = _vint(len(out)) + _vint(len(meta))
    out += _with_trailer(meta)
    idx = _block(index_items, restart_interval=1)
    idx_handle = _vint(len(out)) + _vint(len(idx))
    out += _with_trailer(idx)
    footer = (meta_handle + idx_handle).ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    return bytes(out + footer)


_ENUM = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int8": 6, "int64": 9}


def write_bundle(prefix: Path, tensors: dict, *, header=None, entry_override=None,
                 ctype=0, block_entries=4) -> None:
    """Write ``{key: ndarray}`` as a bundle; ``entry_override[key]`` replaces an entry proto."""
    data, items = bytearray(), []
    for key in sorted(tensors, key=str.encode):
        a = np.ascontiguousarray(tensors[key])
        raw = a.tobytes()
        proto = entry_proto(_ENUM[a.dtype.name], a.shape, 0, len(data), len(raw),
                            _mask(google_crc32c.value(raw)))
        if entry_override and key in entry_override:
            proto = entry_override[key]
        items.append((key.encode(), proto))
        data += raw
    items.insert(0, (b"", header_proto() if header is None else header))
    Path(f"{prefix}.index").write_bytes(build_table(items, block_entries, ctype))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(data))


GOOD = {"a/kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
        "a/bias": np.array([1.5, -2.0]),
        "b": np.array(7, dtype=np.int64),
        "c/long/name/" + "z" * 200: np.arange(4, dtype=np.int8),
        "d": np.zeros((0, 2), np.float32),
        "e": np.arange(10, dtype=np.int32)}


def test_crafted_writer_is_readable_by_tensorflow(tf, tmp_path):
    write_bundle(tmp_path / "c", GOOD)
    reader = _assert_same_as_tf(tf, tmp_path / "c")
    for k, v in GOOD.items():
        np.testing.assert_array_equal(reader.get_tensor(k), v)


def _crafted(tmp_path, **kw) -> Path:
    write_bundle(tmp_path / "c", GOOD, **kw)
    return tmp_path / "c"


def test_every_truncation_of_the_index_is_a_clean_input_error(small_ckpt, tmp_path):
    index = Path(str(small_ckpt) + ".index").read_bytes()
    prefix = _copy_ckpt(small_ckpt, tmp_path)
    target = Path(str(prefix) + ".index")
    for n in range(len(index)):
        target.write_bytes(index[:n])
        with pytest.raises(InputError) as exc:
            open_bundle(prefix)
        assert str(target) in str(exc.value), n
        assert "\n" not in str(exc.value)
    target.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        open_bundle(prefix)


def test_every_flipped_index_byte_is_caught_or_harmless(small_ckpt, tmp_path):
    """Blocks are checksummed; the footer's padding is the only don't-care region."""
    index = Path(str(small_ckpt) + ".index").read_bytes()
    prefix = _copy_ckpt(small_ckpt, tmp_path)
    target = Path(str(prefix) + ".index")
    with open_bundle(prefix) as b:
        expected = list(b)
    survived = 0
    for i in range(len(index)):
        target.write_bytes(index[:i] + bytes([index[i] ^ 0x41]) + index[i + 1:])
        try:
            with open_bundle(prefix) as b:
                assert list(b) == expected, f"byte {i} changed the metadata silently"
                survived += 1
        except GruconvError as e:
            assert str(target) in str(e)
    assert survived <= 34  # only the footer padding after the two block handles


def test_random_garbage_indexes(tmp_path):
    rng = random.Random(5)
    target = tmp_path / "g.index"
    for _ in range(300):
        n = rng.choice([0, 1, 47, 48, 49, 100, 1000])
        blob = bytearray(rng.randbytes(n))
        if n >= 48 and rng.random() < 0.7:
            blob[-8:] = struct.pack("<Q", 0xDB4775248B80FB57)
        target.write_bytes(bytes(blob))
        with pytest.raises(GruconvError):
            open_bundle(tmp_path / "g")


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.one_of(st.binary(max_size=12), st.just(header_proto())),
       protos=st.lists(st.one_of(
           st.binary(max_size=40),
           st.builds(entry_proto, st.sampled_from([1, 2, 3, 7, 10, 14, 21, 99]),
                     st.lists(st.integers(0, 5), max_size=3),
                     st.integers(-1, 2), st.integers(-2, 100), st.integers(-2, 100),
                     st.integers(0, 2**32 - 1))), max_size=6))
def test_fuzzed_entries_behind_valid_checksums(tmp_path, header, protos):
    """Arbitrary protobuf bytes in a well-formed table: only GruconvErrors escape."""
    prefix = tmp_path / "f"
    items = [(b"", header)] + [(f"k{i}".encode(), p) for i, p in enumerate(protos)]
    Path(f"{prefix}.index").write_bytes(build_table(items, block_entries=2))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(range(64)))
    try:
        b = open_bundle(prefix)
    except GruconvError:
        return
    with b:
        for key in b.keys():
            try:
                b.read(key)
            except GruconvError:
                pass


def test_bad_magic_and_block_crc(tmp_path):
    prefix = _crafted(tmp_path)
    idx = Path(f"{prefix}.index")
    good = idx.read_bytes()
    idx.write_bytes(good[:-1] + b"\x00")
    with pytest.raises(InputError, match="magic"):
        open_bundle(prefix)
    idx.write_bytes(good[:10] + bytes([good[10] ^ 1]) + good[11:])
    with pytest.raises(InputError, match="block checksum mismatch"):
        open_bundle(prefix)


def test_snappy_block_is_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="snappy"):
        open_bundle(_crafted(tmp_path, ctype=1))


def test_unknown_block_type(tmp_path):
    with pytest.raises(InputError, match="compression type 7"):
        open_bundle(_crafted(tmp_path, ctype=7))


@pytest.mark.parametrize("header, cls, match", [
    (header_proto(endianness=1), UnsupportedError, "big-endian"),
    (header_proto(endianness=5), InputError, "endianness"),
    (header_proto(min_consumer=2), UnsupportedError, "newer TensorFlow"),
    (header_proto(producer=-1), InputError, "producer"),
    (header_proto(num_shards=0), InputError, "shard id 0 is outside"),
    (b"\x08", InputError, "varint runs past the end"),
    (b"\x0b\x00", InputError, "wire type 3"),
])
def test_bad_headers(tmp_path, header, cls, match):
    with pytest.raises(cls, match=match):
        open_bundle(_crafted(tmp_path, header=header))


def test_missing_header_entry(tmp_path):
    prefix = tmp_path / "nh"
    Path(f"{prefix}.index").write_bytes(build_table([(b"x", entry_proto(1, (1,), size=4))]))
    with pytest.raises(InputError, match="no header entry"):
        open_bundle(prefix)


@pytest.mark.parametrize("proto, match", [
    (entry_proto(1, (2, 3), size=25), r"needs 24 bytes but the entry's size is 25"),
    (entry_proto(1, (1 << 40, 1 << 40), size=4), "needs"),
    (entry_proto(1, (2, 3), shard=3, size=24), "shard id 3 is outside the header's 1"),
    (entry_proto(1, (2, 3), offset=-5, size=24), "negative offset"),
    (entry_proto(1, (-1, 3), size=24), "negative dimension"),
    (entry_proto(0, (2, 3), size=24), "DT_INVALID"),
    (entry_proto(1, (2, 3), size=24)[:-3], "fixed32 runs past the end"),
    (entry_proto(1, (2, 3), size=24) + b"\x2a\x05ab", "field 5: length 5 runs past the end"),
    (entry_proto(1, (2, 3), size=24) + b"\x2a\xff\xff", "varint runs past the end"),
    (_fv(1, 1) + _fb(2, _fv(3, 1)) + _fv(5, 4), "unknown rank"),
    (entry_proto(7, (5,), size=3), "string tensor of 5 elements cannot fit in 3 bytes"),
])
def test_malformed_entries_name_the_key(tmp_path, proto, match):
    with pytest.raises(InputError, match=match) as exc:
        open_bundle(_crafted(tmp_path, entry_override={"a/kernel": proto}))
    assert "'a/kernel'" in str(exc.value)
    assert str(tmp_path / "c.index") in str(exc.value)


def test_claimed_terabytes_are_refused_without_allocating(tmp_path):
    tb = 1 << 40
    prefix = _crafted(tmp_path, entry_override={
        "a/kernel": entry_proto(1, (tb // 4,), size=tb),
        "a/bias": entry_proto(2, (4,), offset=(1 << 62), size=32)})
    with open_bundle(prefix) as b:  # consistent metadata: opening is fine
        assert b.info("a/kernel").nbytes == tb
        assert b.total_bytes() >= tb
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match=r"claims bytes \[0, 1099511627776\)") as exc:
                b.read("a/kernel")
            with pytest.raises(InputError, match="claims bytes"):
                b.read("a/bias")
            with pytest.raises(InputError, match=r"claims bytes \[0, 1099511627776\)"):
                b.view("a/kernel")
            with pytest.raises(InputError, match="claims bytes"):
                b.view("a/bias")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20
        assert "'a/kernel'" in str(exc.value) and ".data-00000-of-00001" in str(exc.value)
        assert b.read("e").tolist() == list(range(10))


def test_max_tensor_bytes(tmp_path):
    with open_bundle(_crafted(tmp_path), max_tensor_bytes=16) as b:
        assert b.read("a/bias").tolist() == [1.5, -2.0]  # exactly 16 bytes
        with pytest.raises(InputError, match="max_tensor_bytes"):
            b.read("e")


def test_unsupported_dtype_is_listed_but_refused(tmp_path):
    prefix = _crafted(tmp_path, entry_override={"b": entry_proto(21, (), size=9)})
    with open_bundle(prefix) as b:
        assert b.info("b").dtype == "unsupported:21"
        with pytest.raises(UnsupportedError, match="DT_VARIANT"):
            b.read("b")


def test_restart_points_and_prefix_sharing_are_validated(tmp_path):
    items = [(b"", header_proto()), (b"k", entry_proto(1, (1,), size=4))]
    blk = bytearray(_block(items))
    blk[-8:-4] = struct.pack("<I", 1)  # second restart point in the middle of an entry
    body = _with_trailer(bytes(blk))
    idx = _block([(b"k", _vint(0) + _vint(len(blk)))], 1)
    meta_at = len(body)
    body += _with_trailer(_block([]))
    idx_at = len(body)
    body += _with_trailer(idx)
    footer = (_vint(meta_at) + _vint(len(_block([]))) + _vint(idx_at) + _vint(len(idx)))
    data = body + footer.ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    (tmp_path / "r.index").write_bytes(data)
    with pytest.raises(InputError, match="restart point 1"):
        open_bundle(tmp_path / "r")


def test_unsorted_keys_are_rejected(tmp_path):
    items = [(b"", header_proto()), (b"b", entry_proto(1, (1,), size=4)),
             (b"a", entry_proto(1, (1,), size=4))]
    (tmp_path / "u.index").write_bytes(build_table(items, block_entries=1))
    with pytest.raises(InputError, match="strictly increasing"):
        open_bundle(tmp_path / "u")


def test_flipped_data_byte_is_a_checksum_error_naming_the_key(small_ckpt, tmp_path):
    prefix = _copy_ckpt(small_ckpt, tmp_path)
    with open_bundle(prefix) as b:
        info = b.info("rnn/cudnn_gru/opaque_kernel")
        data = b.data_path(info.shard)
        good = b.read(info.key)
    raw = bytearray(data.read_bytes())
    raw[info.offset + 17] ^= 0x10
    data.write_bytes(bytes(raw))
    with open_bundle(prefix) as b:
        with pytest.raises(InputError, match="checksum mismatch") as exc:
            b.read(info.key)
        assert "'rnn/cudnn_gru/opaque_kernel'" in str(exc.value)
        assert str(data) in str(exc.value)
        with pytest.raises(InputError, match="'rnn/cudnn_gru/opaque_kernel': checksum mismatch"):
            b.view(info.key)
        assert b.read(info.key, verify=False).tobytes() != good.tobytes()
        np.testing.assert_array_equal(b.read("kernel"), b.read("kernel", verify=True))


def test_corrupt_string_tensor(small_ckpt, tmp_path):
    prefix = _copy_ckpt(small_ckpt, tmp_path)
    with open_bundle(prefix) as b:
        info = b.info("names")
        data = b.data_path(0)
    raw = bytearray(data.read_bytes())
    raw[info.offset] ^= 0x01  # first varint length
    data.write_bytes(bytes(raw))
    with open_bundle(prefix) as b, pytest.raises(InputError, match="'names'"):
        b.read("names")


def test_missing_and_truncated_shard(small_ckpt, tmp_path):
    prefix = _copy_ckpt(small_ckpt, tmp_path)
    data = Path(f"{prefix}.data-00000-of-00001")
    size = data.stat().st_size
    with open_bundle(prefix) as b:
        info = b.info("kernel")
        last = max(b, key=lambda i: i.offset + i.size)
    data.write_bytes(data.read_bytes()[:size - 1])
    with open_bundle(prefix) as b:
        with pytest.raises(InputError, match="truncated") as exc:
            b.read(last.key)
        assert repr(last.key) in str(exc.value)
        with pytest.raises(InputError, match="truncated") as exc:
            b.view(last.key)
        assert repr(last.key) in str(exc.value)
    data.unlink()
    with open_bundle(prefix) as b:  # lazy: the index alone still opens
        assert b.info("kernel") == info
        with pytest.raises(InputError, match=r"data shard 0 of 1 is missing.*'kernel'") as exc:
            b.read("kernel")
        assert str(data) in str(exc.value)
        with pytest.raises(InputError, match=r"data shard 0 of 1 is missing.*'kernel'"):
            b.view("kernel")


def test_missing_key(small_ckpt):
    with open_bundle(small_ckpt) as b:
        with pytest.raises(TensorNotFound, match="'nope' is not in the checkpoint"):
            b.info("nope")
        with pytest.raises(KeyError):
            b.read("nope")
        assert "nope" not in b


def test_masking_matches_tensorflow_definition():
    for crc in (0, 1, 0xFFFFFFFF, 0x12345678, 0xA282EAD8):
        assert tfbundle._unmask(tfbundle._mask(crc)) == crc
        assert tfbundle._mask(crc) == _mask(crc)


def test_tensorinfo_is_frozen(small_ckpt):
    with open_bundle(small_ckpt) as b:
        info = b.info("kernel")
    assert isinstance(info, TensorInfo)
    with pytest.raises(AttributeError):
        info.size = 3  # type: ignore[misc]
