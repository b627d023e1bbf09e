"""``gruconv.files.inputs`` (the one place user files are opened), ``outputs.check_outputs`` and the
TF1 ``checkpoint``-file containment rule — unit tests, no TensorFlow, no Keras."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from gruconv.files import inputs
from gruconv.readers import tfbundle
from gruconv.errors import InputError, OutputError, UsageError
from gruconv import readers as formats
from gruconv.files.outputs import check_outputs, check_target

TF1 = FIXTURES / "tf1"
SEQ = FIXTURES / "keras" / "sequential.h5"


# --------------------------------------------------------------------------- display

@pytest.mark.parametrize("raw, shown", [
    ("plain/path.h5", "plain/path.h5"),
    ("a\nb", "a\\nb"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("tab\there", "tab\\there"),
    ("caf\u00e9", "caf\u00e9"),
    ("rtl\u202eevil", "rtl\\u202eevil"),
    ("line\u2028sep", "line\\u2028sep"),
    (b"bad\xffbyte", "bad\\xffbyte"),
    (Path("x\ry"), "x\\ry"),
    ("del\x7f", "del\\x7f"),
])
def test_display_escapes_control_characters(raw, shown):
    assert inputs.display(raw) == shown
    assert "\n" not in inputs.display(raw) and "\x1b" not in inputs.display(raw)


# --------------------------------------------------------------------------- regular files

def test_special_files_are_refused_without_opening(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    cases = {tmp_path / "fifo": "a FIFO (named pipe)", Path("/dev/null"): "a character device",
             tmp_path: "a directory"}
    for p, kind in cases.items():
        with pytest.raises(InputError, match=rf"is {kind.replace('(', '.').replace(')', '.')}, expected a model file"):
            inputs.regular_file(p, "a model file")
        with pytest.raises(InputError):
            inputs.read_bytes(p, "a model file")   # would block forever on the FIFO if it opened it
    with pytest.raises(InputError, match="no such file or directory"):
        inputs.regular_file(tmp_path / "missing", "a model file")


def test_symlinks_to_regular_files_are_followed_and_loops_refused(tmp_path):
    (tmp_path / "real").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert inputs.read_bytes(tmp_path / "link", "a file") == b"data"
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(InputError, match="too many levels of symbolic links"):
        inputs.regular_file(tmp_path / "a", "a file")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to_fifo").symlink_to(tmp_path / "fifo")
    with pytest.raises(InputError, match="FIFO"):
        inputs.open_regular(tmp_path / "to_fifo", "a file")


def test_read_bytes_refuses_from_fstat_and_names_the_variable(tmp_path, monkeypatch):
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(2**33)                       # 8 GiB, sparse: reading it would take the memory
    with pytest.raises(InputError, match=r"is 8589934592 bytes, over the 16 MiB limit; refused \(set GRUCONV_MAX_BYTES"):
        inputs.read_bytes(p, "a JSON file")
    (tmp_path / "small").write_bytes(b"x" * 100)
    monkeypatch.setenv("GRUCONV_MAX_BYTES", "99")
    with pytest.raises(InputError, match="over the 99 bytes limit"):
        inputs.read_bytes(tmp_path / "small", "a file")
    monkeypatch.setenv("GRUCONV_MAX_BYTES", "1K")
    assert len(inputs.read_bytes(tmp_path / "small", "a file")) == 100
    monkeypatch.setenv("GRUCONV_MAX_BYTES", "many")
    with pytest.raises(UsageError, match="GRUCONV_MAX_BYTES='many' is not a byte count"):
        inputs.limit("json")


# --------------------------------------------------------------------------- JSON

def test_json_depth_is_checked_without_recursion(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError, match="nested 200000 levels deep, over the limit of 256"):
        inputs.load_json(p)
    assert inputs.check_json_depth('{"a": "[[[[[[\\"[[[", "b": [[1]]}') == 3   # brackets in strings don't count
    p.write_text('{"x": [1, {"y": "]]]"}]}')
    assert inputs.load_json(p) == {"x": [1, {"y": "]]]"}]}
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        inputs.load_json(p)
    p.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(InputError, match="not UTF-8"):
        inputs.load_json(p)


# --------------------------------------------------------------------------- NPZ

def _npy(arr, **kw) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, **kw)
    return buf.getvalue()


def _header(shape, descr="<f4") -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_load_npz_reads_a_normal_archive(tmp_path):
    a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.ones((2, 3)))
    np.savez_compressed(tmp_path / "ok.npz", a=a, b=b)
    got = inputs.load_npz(tmp_path / "ok.npz")
    assert list(got) == ["a", "b"] and np.array_equal(got["a"], a) and np.array_equal(got["b"], b)


@pytest.mark.parametrize("kind, message", [
    ("header_huge", r"declares shape \(1099511627776,\) of float32 .* but holds 64 bytes"),
    ("deflate_bomb", r"over 1000:1, a zip bomb"),
    ("pickle", r"holds Python objects"),
    ("many_members", r"5000 members, over the limit of 4096"),
    ("total", r"archive content \(declared, uncompressed\) is \d+ bytes, over the 1 MiB limit"),
    ("not_zip", r"is not an .npz archive"),
])
def test_load_npz_refuses_before_allocating(tmp_path, kind, message, monkeypatch):
    p = tmp_path / f"{kind}.npz"
    if kind == "not_zip":
        p.write_bytes(b"PK\x03\x04 truncated")
    else:
        comp = zipfile.ZIP_DEFLATED if kind == "deflate_bomb" else zipfile.ZIP_STORED
        with zipfile.ZipFile(p, "w", comp) as z:
            if kind == "header_huge":
                z.writestr("x.npy", _header((2**40,)) + bytes(64))
            elif kind == "deflate_bomb":
                with z.open("x.npy", "w", force_zip64=True) as m:
                    m.write(_header((2**26,)))
                    for _ in range(256):
                        m.write(bytes(2**20))
            elif kind == "pickle":
                z.writestr("x.npy", _npy(np.array([{"a": 1}], dtype=object), allow_pickle=True))
            elif kind == "many_members":
                for i in range(5000):
                    z.writestr(f"m{i}.npy", b"")
            elif kind == "total":
                monkeypatch.setenv("GRUCONV_MAX_BYTES", "1M")
                z.writestr("x.npy", _npy(np.zeros(2**19, np.float32)))
    with pytest.raises(InputError, match=message):
        inputs.load_npz(p)


# --------------------------------------------------------------------------- HDF5

def test_open_hdf5_guards_and_budget(tmp_path):
    import h5py

    from gruconv.files import hdf5 as h5safe

    with h5safe.open_hdf5(SEQ) as f:
        ds = f["model_weights/cu_dnngru/cu_dnngru/kernel:0"]
        h5safe.read_dataset(ds, SEQ)
        h5safe.read_dataset(ds, SEQ)                 # checked and read again: charged once
        assert h5safe.budget_for(ds).total == 6 * 24 * 4
    assert h5safe._budgets == {}
    p = tmp_path / "bombs.h5"
    with h5py.File(p, "w") as f:
        for i in range(8):
            f.create_dataset(f"d{i}", shape=(2**17,), dtype="f4", chunks=(2**10,))   # 512 KiB, none stored
    with h5safe.open_hdf5(p) as f:
        with pytest.raises(InputError, match=r"d2: datasets declare 1572864 bytes more than the file stores"):
            for i in range(8):
                h5safe.check_dataset(f[f"d{i}"], p)
    os.mkfifo(tmp_path / "fifo.h5")
    with pytest.raises(InputError, match="FIFO"):
        h5safe.open_hdf5(tmp_path / "fifo.h5")
    assert h5safe.is_hdf5(tmp_path / "fifo.h5") is False


def test_model_config_attribute_depth(tmp_path):
    import h5py

    from gruconv.files import hdf5 as h5safe

    p = tmp_path / "deep.h5"
    with h5py.File(p, "w") as f:
        f.attrs["model_config"] = b"[" * 100_000 + b"]" * 100_000
    with h5safe.open_hdf5(p) as f:
        with pytest.raises(InputError, match="attribute 'model_config' is nested 100000 levels deep"):
            h5safe.read_json_attr(f, "model_config", p)


# --------------------------------------------------------------------------- TF1 checkpoints

def _ckpt(tmp_path, name="ck") -> Path:
    import shutil

    d = tmp_path / name
    shutil.copytree(TF1 / "layer_uni", d)
    return d


def test_checkpoint_state_file_may_not_point_outside(tmp_path):
    other = _ckpt(tmp_path, "other")
    d = tmp_path / "d"
    d.mkdir()
    (d / "checkpoint").write_text('model_checkpoint_path: "../other/model.ckpt"\n')
    with pytest.raises(InputError, match="points outside the checkpoint's directory; refused; pass the checkpoint prefix"):
        tfbundle.resolve_prefix(d)
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{other}/model.ckpt"\n')
    with pytest.raises(InputError, match="is outside the checkpoint's directory"):
        tfbundle.resolve_prefix(d)
    (d / "sub").symlink_to(other)
    (d / "checkpoint").write_text('model_checkpoint_path: "sub/model.ckpt"\n')
    with pytest.raises(InputError, match="points outside"):
        tfbundle.resolve_prefix(d)
    assert tfbundle.resolve_prefix(other / "model.ckpt") == other / "model.ckpt"   # explicit prefix: fine
    ok = _ckpt(tmp_path, "ok")
    (ok / "checkpoint").write_text(f'model_checkpoint_path: "{ok.resolve()}/model.ckpt"\n')
    assert tfbundle.resolve_prefix(ok) == ok.resolve() / "model.ckpt"
    (ok / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/run1/model.ckpt"\n')
    assert tfbundle.resolve_prefix(ok) == ok / "model.ckpt"                     # copied directory


def test_checkpoint_special_files(tmp_path):
    d = _ckpt(tmp_path)
    shard = d / "model.ckpt.data-00000-of-00001"
    shard.unlink()
    os.mkfifo(shard)
    with tfbundle.open_bundle(d) as b:
        with pytest.raises(InputError, match=r"is a FIFO \(named pipe\), expected a checkpoint data shard"):
            b.read(b.keys()[0])
    idx = d / "model.ckpt.index"
    size = idx.stat().st_size
    with open(idx, "r+b") as f:
        tail = (f.seek(size - 48), f.read(48))[1]
        f.truncate(300 * 2**20)
        f.seek(300 * 2**20 - 48)
        f.write(tail)
    with pytest.raises(InputError, match=r"over the 256 MiB limit; refused \(set GRUCONV_MAX_BYTES"):
        tfbundle.open_bundle(d)


def test_checkpoint_files_lists_everything_a_conversion_reads(tmp_path):
    d = _ckpt(tmp_path)
    names = [p.name for p in tfbundle.checkpoint_files(d)]
    assert names == ["checkpoint", "model.ckpt.index", "model.ckpt.data-00000-of-00001"]
    assert [p.name for p in tfbundle.checkpoint_files(d / "model.ckpt")] == names[1:]


# --------------------------------------------------------------------------- outputs vs inputs

def test_check_outputs_refuses_every_spelling_of_an_input(tmp_path):
    a = tmp_path / "a.h5"
    a.write_bytes(b"model")
    os.link(a, tmp_path / "hard.h5")
    (tmp_path / "sym.h5").symlink_to(a)
    (tmp_path / "sub").mkdir()
    for out in (a, tmp_path / "hard.h5", tmp_path / "sym.h5", tmp_path / "sub" / ".." / "a.h5"):
        with pytest.raises(OutputError, match="output is the input .*even with --force"):
            check_outputs([out], [a])
    check_outputs([tmp_path / "b.keras"], [a])
    d = _ckpt(tmp_path)
    files = formats.module("tf1-checkpoint").input_files(d)  # what a conversion of d reads
    assert sorted(f.name for f in files) == ["checkpoint", "model.ckpt.data-00000-of-00001", "model.ckpt.index"]
    for f in ("model.ckpt.index", "model.ckpt.data-00000-of-00001", "checkpoint"):
        with pytest.raises(OutputError, match="output is the input"):
            check_outputs([d / f], files)


def test_dangling_symlink_output_is_refused_up_front(tmp_path):
    (tmp_path / "out.keras").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError, match=r"output is a dangling symbolic link \(to '.*nowhere'\)"):
        check_target(tmp_path / "out.keras", force=False)
    check_target(tmp_path / "out.keras", force=True)       # --force replaces the link itself


# --------------------------------------------------------------------------- batch discovery

def test_glob_and_walk_never_leave_the_root_and_survive_loops(tmp_path, monkeypatch):
    import shutil

    from gruconv import batch

    monkeypatch.chdir(tmp_path)
    root = Path("m")
    (root / "sub").mkdir(parents=True)
    shutil.copyfile(SEQ, root / "sub" / "a.h5")
    (root / "sub" / "up").symlink_to("..")            # a loop
    (root / "self").symlink_to(".")                   # another
    os.mkfifo(root / "sub" / "pipe.h5")               # never opened
    (tmp_path / "outside").mkdir()
    shutil.copyfile(SEQ, tmp_path / "outside" / "b.h5")
    (root / "ext").symlink_to(tmp_path / "outside")   # leaves the root
    items = batch.discover(["m"], Path("out"))
    assert [(i.display, i.error is None) for i in items] == [("m/ext", False), ("m/sub/a.h5", True)]
    assert "is a symbolic link to a directory outside 'm'" in str(items[0].error)
    items = batch.discover(["m/**/*.h5"], Path("out"))
    assert [i.display for i in items if i.error is None] == ["m/sub/a.h5"]
    items = batch.discover(["m/*.h5"], Path("out"))    # no match at depth 1
    assert [str(i.error) for i in items] == ["m/*.h5: no such file or directory, and the glob pattern matches nothing"]


def test_batch_state_record_trusts_only_successes(tmp_path):
    from gruconv import batch

    out = tmp_path / "out"
    out.mkdir()
    f = out / "a.keras"
    f.write_bytes(b"converted")
    src = tmp_path / "a.h5"
    src.write_bytes(b"in")
    item = batch.Input("a.h5", src, "a.h5", str(src.resolve()), "keras-h5")
    st = batch.State(out)
    assert not st.up_to_date(item, [f])
    st.succeeded(item, [f], batch.input_mtime(item))
    st.save()
    st = batch.State(out)
    assert st.up_to_date(item, [f])
    f.write_bytes(b"tampered!")
    assert not st.up_to_date(item, [f])
    st.failed(f)
    st.save()
    assert json.loads((out / batch.STATE_FILE).read_text())["outputs"] == {}
