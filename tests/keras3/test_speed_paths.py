"""The faster paths of issue 20 (session 26) do what the slower ones did, and their checks still catch damage.

- the large-model route (weights written by h5py in place inside the archive) and the small-model route
  (weights file built in memory) give the same weights file, and the self-check of an archive written in
  place catches one flipped bit on disk;
- batch workers are forked only when that is safe;
- in batch mode the outputs' fsyncs are deferred to one ``syncfs`` per file system at the end of the run,
  before the record of successful conversions is written;
- ``readers.detect``'s cache notices a rewritten file;
- ``inspect`` counts NaN/Inf on the stored weights as the canonical weights would.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import FIXTURES

from gruconv.keras3 import archive as keras_archive
from gruconv.files import outputs
from gruconv import readers
from gruconv.batch import convert_many, work
from gruconv.errors import InputError, OutputError
from gruconv.readers import keras_h5


def _weights_tree(archive: Path) -> dict:
    with zipfile.ZipFile(archive) as z:
        assert z.testzip() is None
        assert sorted(z.namelist()) == ["config.json", "metadata.json", "model.weights.h5"]
        f = h5py.File(io.BytesIO(z.read("model.weights.h5")), "r")
    tree = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            a = obj[()]
            tree[name] = (str(a.dtype), a.shape, a.tobytes())
        else:
            tree[name] = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in obj.attrs.items()}

    with f:
        f.visititems(visit)
    return tree


@pytest.mark.parametrize("fixture", ["keras/bidir_concat.h5", "keras/options.h5", "keras/nested.h5"])
@pytest.mark.parametrize("gate_blocks", [True, False], ids=["gate-blocks", "assembled"])
def test_in_place_and_in_memory_routes_write_the_same_weights(fixture, gate_blocks, tmp_path, monkeypatch):
    """The in-place route writes a gate-blocked kernel block by block (``gate_blocks``: every kernel over
    ``ASSEMBLE_MAX`` bytes, forced here) or assembled (the fixtures' size, and the bench model's
    kernels up to 16 MiB): both give what the in-memory route gives."""
    src = FIXTURES / fixture
    small = tmp_path / "memory.keras"
    m_small = keras_archive.write_keras_h5_doc(keras_h5.read(src), small)
    monkeypatch.setattr(keras_archive, "IN_MEMORY_MAX", 0)  # every model takes the large route
    if gate_blocks:
        monkeypatch.setattr(keras_archive, "ASSEMBLE_MAX", 0)
    large = tmp_path / "in_place.keras"
    m_large = keras_archive.write_keras_h5_doc(keras_h5.read(src), large)
    assert m_small == m_large  # same weights, shapes, dtypes and SHA-256 (gate-wise ones from the disk)
    assert all(d is not None for *_, d in m_large)
    assert _weights_tree(small) == _weights_tree(large)
    with zipfile.ZipFile(large) as z:
        assert z.getinfo("model.weights.h5").compress_type == zipfile.ZIP_STORED


def test_self_check_of_an_archive_written_in_place_catches_a_flipped_bit(tmp_path, monkeypatch):
    monkeypatch.setattr(keras_archive, "IN_MEMORY_MAX", 0)
    good = tmp_path / "good.keras"
    manifest = keras_archive.write_keras_h5_doc(keras_h5.read(FIXTURES / "keras" / "bidir_concat.h5"), good)
    keras_archive.self_check(good, list(manifest), weights_crc_from_disk=True)  # the real file passes
    # flip one bit of one weight's bytes where they lie in the archive
    ds_path = "layers/bidirectional/forward_layer/cell/vars/0"
    with zipfile.ZipFile(good) as z:
        info = z.getinfo("model.weights.h5")
        with h5py.File(io.BytesIO(z.read(info)), "r") as f:
            offset = f[ds_path].id.get_offset()
    with open(good, "rb") as fh:
        fh.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(fh.read(4), "<u2")
    start = info.header_offset + 30 + int(name_len) + int(extra_len) + offset
    bad = tmp_path / "bad.keras"
    shutil.copyfile(good, bad)
    with open(bad, "r+b") as fh:
        fh.seek(start)
        b = fh.read(1)
        fh.seek(start)
        fh.write(bytes([b[0] ^ 1]))
    with pytest.raises(OutputError, match="does not read back bit for bit"):
        keras_archive.self_check(bad, list(manifest), weights_crc_from_disk=True)
    with pytest.raises(OutputError, match="CRC"):  # without the caller's word, testzip finds it too
        keras_archive.self_check(bad, list(manifest))


def test_workers_are_forked_only_when_that_is_safe(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    from gruconv.keras3.runtime import FRAMEWORK_MODULES

    for name in FRAMEWORK_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    # a test before this one in the same worker may have left a runtime's thread behind (OpenVINO, LiteRT): the
    # thread rule is checked on its own below, so start from a one-thread process here
    monkeypatch.setattr("threading.active_count", lambda: 1)
    assert work.start_method({}) == "fork"
    assert work.start_method({"verify": True}) == "spawn"
    assert work.start_method({"check_load": True}) == "spawn"
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    assert work.start_method({}) == "spawn"
    monkeypatch.delitem(sys.modules, "tensorflow")
    monkeypatch.setattr("threading.active_count", lambda: 2)
    assert work.start_method({}) == "spawn"
    monkeypatch.setattr("threading.active_count", lambda: 1)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert work.start_method({}) == "spawn"


def test_batch_defers_every_fsync_to_one_syncfs_before_its_record_is_written(tmp_path, monkeypatch):
    src = tmp_path / "in"
    for sub in ("a", "b/c"):
        (src / sub).mkdir(parents=True)
        for i in range(3):
            shutil.copyfile(FIXTURES / "keras" / "sequential.h5", src / sub / f"m{i}.h5")
    events: list = []
    real_fsync, real_syncfs = outputs.os.fsync, outputs._syncfs
    monkeypatch.setattr(outputs, "_fsync_dir", lambda d: events.append(("fsync_dir", Path(d).resolve())))
    monkeypatch.setattr(outputs.os, "fsync", lambda fd: (events.append(("fsync", fd)), real_fsync(fd)))
    monkeypatch.setattr(outputs, "_syncfs", lambda fd: (events.append(("syncfs", os.fstat(fd).st_dev)),
                                                        real_syncfs(fd))[1])
    from gruconv.batch import state as batch_state

    real_save = batch_state.State.save
    monkeypatch.setattr(batch_state.State, "save", lambda self: (events.append(("record", None)), real_save(self)))
    out = tmp_path / "out"
    summary = convert_many([str(src)], out, jobs=1, echo=False)
    assert summary.exit_code == 0 and len(summary.records) == 6
    kinds = [k for k, _ in events]
    # no output fsynced while the run converts: one syncfs of the one file system, then the record
    assert kinds.index("syncfs") < kinds.index("record")
    before = kinds[:kinds.index("syncfs")]
    assert before == []  # (the record itself is written with its own fsyncs, after)
    assert [v for k, v in events if k == "syncfs"] == [os.stat(out).st_dev]
    assert outputs.deferred_dirs() == []  # the setting does not outlive the run
    assert all((out / sub / f"m{i}.keras").is_file() for sub in ("a", "b/c") for i in range(3))
    events.clear()
    single = tmp_path / "single.keras"
    from gruconv import api

    api.convert(FIXTURES / "keras" / "sequential.h5", single)
    # outside batch mode: the file's data before its rename, its directory right after
    assert [k for k, _ in events] == ["fsync", "fsync_dir"] and events[1][1] == tmp_path.resolve()


def test_sync_deferred_falls_back_to_sync_when_syncfs_fails(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(outputs, "_syncfs", lambda fd: (calls.append("syncfs"), False)[1])
    monkeypatch.setattr(outputs.os, "sync", lambda: calls.append("sync"))
    (tmp_path / "x").mkdir()
    outputs.sync_deferred([tmp_path, tmp_path / "x", tmp_path / "missing"])
    assert calls == ["syncfs", "sync"]  # one file system: one syncfs; it failed: one sync
    calls.clear()
    monkeypatch.setattr(outputs, "_syncfs", lambda fd: (calls.append("syncfs"), True)[1])
    outputs.sync_deferred([tmp_path, tmp_path / "x"])
    assert calls == ["syncfs"]


def test_detect_cache_notices_a_rewritten_file(tmp_path):
    p = tmp_path / "model.h5"
    shutil.copyfile(FIXTURES / "keras" / "sequential.h5", p)
    assert readers.detect(p) == "keras-h5"
    assert readers.detect(p) == "keras-h5"  # answered from the cache
    p.write_bytes(b"not a model at all, but long enough to be read")
    with pytest.raises(InputError):
        readers.detect(p)


def test_inspect_counts_nonfinite_weights_as_the_canonical_weights_do(tmp_path):
    p = tmp_path / "nan.h5"
    shutil.copyfile(FIXTURES / "keras" / "bidir_concat.h5", p)
    with h5py.File(p, "a") as f:
        for n in ("model_weights/bidirectional/bidirectional/forward_cu_dnngru/kernel:0",
                  "model_weights/bidirectional/bidirectional/backward_cu_dnngru/bias:0"):
            a = f[n][()]
            a.flat[0], a.flat[-1] = np.nan, np.inf
            f[n][...] = a
    doc = keras_h5.read(p)
    (rnn,) = doc.rnns
    assert keras_h5._nonfinite_on_disk(rnn) == rnn.stack.nonfinite_count() == 4
    rnn.release()
    assert [r["nonfinite_weights"] for r in keras_h5.inspect(keras_h5.read(p))["rnns"]] == [4]
    clean = keras_h5.inspect(keras_h5.read(FIXTURES / "keras" / "bidir_concat.h5"))
    assert [r["nonfinite_weights"] for r in clean["rnns"]] == [0]


def test_a_rewritten_checkpoint_index_is_never_served_from_the_parse_cache(tmp_path):
    """``tfbundle._parsed_indexes`` is keyed by the index's bytes: an index damaged in place (same
    inode, same size, within one timestamp tick) is refused although an intact parse of the same file
    is cached, and restoring the bytes gives the cached answer again."""
    from gruconv.readers import tfbundle

    dst = tmp_path / "ck"
    shutil.copytree(FIXTURES / "tf1" / "layer_uni", dst)
    index = next(dst.glob("*.index"))
    keys = tfbundle.open_bundle(dst).keys()
    good = index.read_bytes()
    assert good in tfbundle._parsed_indexes
    key = keys[-1].encode()
    at = good.find(key[-3:])  # inside the first data block (a key's unshared suffix): its CRC now fails
    assert at > 0
    bad = bytearray(good)
    bad[at] ^= 0x01
    with open(index, "r+b") as f:  # same inode, same size
        f.write(bytes(bad))
    with pytest.raises(InputError, match="index"):
        tfbundle.open_bundle(dst)
    with open(index, "r+b") as f:
        f.write(good)
    assert tfbundle.open_bundle(dst).keys() == keys


def test_hard_link_fast_path_and_careful_walk_agree(tmp_path):
    """``h5safe.resolve``'s libhdf5 fast path returns what the careful walk returns, and leaves every
    other case (missing, soft or external link at any depth, wrong kind, ``.``) to the careful walk,
    whose one-line refusal names it."""
    from gruconv.files import hdf5 as h5safe

    p = tmp_path / "links.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("a/b/c", data=np.arange(3.0))
        f["a/soft"] = h5py.SoftLink("/a/b")
        f["a/b/ext"] = h5py.ExternalLink("other.h5", "/x")
        f["top_soft"] = h5py.SoftLink("/a")
    cases = [("a/b/c", "dataset"), ("a/b", "group"), ("a/soft/c", "dataset"), ("top_soft/b/c", "any"),
             ("a/b/ext", "any"), ("a/missing/c", "any"), ("a/b/c", "group"), ("a/b", "dataset"),
             ("a/./b", "any"), ("a/b/c/d", "any")]

    def outcome(fast: bool):
        got = []
        with h5safe.open_hdf5(p) as f:
            for dotted, kind in cases:
                if not fast:
                    saved = h5safe._resolve_hard
                    h5safe._resolve_hard = lambda *a: None
                try:
                    obj = h5safe.resolve(f, dotted, p, kind)
                    got.append(("ok", obj.name, type(obj).__name__))
                except InputError as e:
                    got.append(("refused", str(e)))
                finally:
                    if not fast:
                        h5safe._resolve_hard = saved
        return got

    fast, careful = outcome(True), outcome(False)
    assert fast == careful
    assert [g[0] for g in fast] == ["ok", "ok"] + ["refused"] * 8
    with h5safe.open_hdf5(p) as f:
        assert h5safe._resolve_hard(f, ["a", "b", "c"], "dataset") is not None  # the fast path did run
        assert h5safe._resolve_hard(f, ["a", "soft", "c"], "dataset") is None


def test_window_tracks_its_end_as_the_file_has_it(tmp_path):
    """``files.window.Window`` answers h5py's end-of-file question from a tracked end instead of seeking
    the archive (46,253 asks on the bench model): after writes, overwrites, seeks past the end and
    truncation, the tracked size equals the real file's length past ``base``; and an HDF5 file written
    through it is byte for byte the one h5py's file-object driver writes to a plain file."""
    import h5py
    import numpy as np

    from gruconv.files.window import Window

    path = tmp_path / "raw.bin"
    with open(path, "w+b") as raw:
        raw.write(b"HEAD" * 5)
        w = Window(raw, 20)
        assert w.size() == 0
        w.write(b"x" * 100)
        w.seek(10)
        w.write(b"y" * 5)  # overwrite: no growth
        assert w.size() == 100
        w.seek(50, 2)  # past the end, nothing written: no growth
        assert w.size() == 100
        w.write(b"z")
        assert w.size() == 151
        w.truncate(120)
        raw.flush()
        assert w.size() == 120 == path.stat().st_size - 20
        w.seek(0, 2)
        assert w.tell() == 120
    a = np.arange(40_000, dtype="float32").reshape(200, 200)
    with open(tmp_path / "in_window.bin", "w+b") as raw:
        raw.write(b"\0" * 64)
        with h5py.File(Window(raw, 64), "w") as f:
            f["a"] = a
        raw.seek(64)
        image = raw.read()
    with open(tmp_path / "plain.h5", "w+b") as plain:  # h5py's same file-object driver, a plain file
        with h5py.File(plain, "w") as f:
            f["a"] = a
    with h5py.File(__import__("io").BytesIO(image), "r") as f:
        assert np.array_equal(f["a"][()], a)
    assert image == (tmp_path / "plain.h5").read_bytes()
