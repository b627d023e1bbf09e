"""Batch conversion (``gruconv convert INPUT... --out-dir DIR``): discovery, mirroring, sharding,
failure handling, skip-existing, reports, parallel workers — through the CLI and the Python API."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import xml.etree.ElementTree as ET
import zipfile
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure
from gruconv import __version__, batch
from gruconv.cli import main
from gruconv.options import Bounds
from gruconv.errors import OutputError, UsageError

KERAS = FIXTURES / "keras"
TF1 = FIXTURES / "tf1"

RECORD_KEYS = {"input", "format", "status", "output", "outputs", "stacks", "warnings", "verification", "error",
               "exit_code", "seconds", "reason"}


def cli(*args):
    return CliRunner().invoke(main, ["convert", *map(str, args)])


def put(dst: Path, fixture: str) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    src = (KERAS / fixture) if fixture.endswith(".h5") else (TF1 / fixture)
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)
    return dst


def broken(dst: Path) -> Path:
    """A truncated HDF5 file: detected as Keras HDF5 by content, fails to convert (InputError)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes((KERAS / "nested.h5").read_bytes()[:3000])
    return dst


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """models/ with nested Keras files, a weights-only file, a model with nothing to convert,
    a TF1 checkpoint directory and a README; the cwd is tmp_path so paths print relative."""
    monkeypatch.chdir(tmp_path)
    m = Path("models")
    put(m / "a" / "sequential.h5", "sequential.h5")
    put(m / "a" / "b" / "bidir_sum.h5", "bidir_sum.h5")
    put(m / "c" / "weights_only.h5", "weights_only.h5")
    put(m / "c" / "plain_gru.h5", "plain_gru.h5")
    put(m / "ck", "layer_uni_1l")
    (m / "README.txt").write_text("not a model\n")
    (m / "c" / "notes.json").write_text("{}\n")
    return m


EXPECTED = {  # input -> (status, outputs)
    "models/a/b/bidir_sum.h5": ("ok", ["out/a/b/bidir_sum.keras"]),
    "models/a/sequential.h5": ("ok", ["out/a/sequential.keras"]),
    "models/c/plain_gru.h5": ("nothing-to-convert", []),
    "models/c/weights_only.h5": ("ok", ["out/c/weights_only.h5"]),
    "models/ck": ("ok", ["out/ck.keras", "out/ck.keras.rest.npz"]),
}


def _config(z: zipfile.ZipFile):
    """config.json without Keras's ``shared_object_id`` (an ``id()``, different in every process)."""
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "shared_object_id"}
        return [strip(v) for v in o] if isinstance(o, list) else o
    return strip(json.loads(z.read("config.json")))


def _weights(z: zipfile.ZipFile) -> dict:
    import io

    import h5py

    out = {}
    with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()].tobytes())
                     if isinstance(obj, h5py.Dataset) else None)
    return out


def files_under(d: Path) -> list[str]:
    """Files under ``d``, without batch mode's record of successful conversions."""
    return sorted(p.relative_to(d).as_posix() for p in Path(d).rglob("*")
                  if p.is_file() and p.name != batch.STATE_FILE)


def check_junit(path: Path, report: dict | None = None) -> ET.Element:
    """Well-formed, and the JUnit schema's essentials: a <testsuite> with numeric tests/failures/errors/
    skipped/time that match its <testcase> children, each with classname, name and a numeric time."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuite" and root.get("name") == "gruconv"
    for attr in ("tests", "failures", "errors", "skipped"):
        assert root.get(attr) is not None and int(root.get(attr)) >= 0
    assert float(root.get("time")) >= 0
    datetime.fromisoformat(root.get("timestamp"))
    cases = root.findall("testcase")
    assert int(root.get("tests")) == len(cases)
    assert int(root.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
    assert int(root.get("errors")) == sum(1 for c in cases if c.find("error") is not None)
    assert int(root.get("skipped")) == sum(1 for c in cases if c.find("skipped") is not None)
    allowed = {"skipped", "error", "failure", "system-out", "system-err", "properties"}
    discover = [c for c in cases if c.get("classname") == "gruconv.discover"]
    assert len(discover) <= 1   # the run that found nothing convertible: one failing case, never green
    if discover:
        assert discover[0].get("name") == "inputs" and discover[0].find("failure") is not None
        cases = [c for c in cases if c.get("classname") != "gruconv.discover"]
    for c in cases:
        assert c.get("classname") == "gruconv.convert" and c.get("name")
        assert float(c.get("time")) >= 0
        assert {ch.tag for ch in c} <= allowed
        assert sum(ch.tag in ("skipped", "error", "failure") for ch in c) <= 1
        f = c.find("failure")
        if f is not None:
            assert f.get("message")
    if report is not None:
        s = report["summary"]
        assert int(root.get("tests")) == len(report["inputs"]) + len(discover)
        assert int(root.get("failures")) == s["failed"] + s["parity-failed"] + len(discover)
        assert bool(discover) == (report["error"] is not None)
        if discover:
            assert discover[0].find("failure").get("message") == report["error"]
        assert int(root.get("skipped")) == s["skipped"]
        assert [c.get("name") for c in cases] == [r["input"] for r in report["inputs"]]
    return root


# --------------------------------------------------------------------------- mixed directory

def test_mixed_directory_cli(tree):
    res = cli(tree, "--out-dir", "out", "--jobs", "1", "--report", "r.json", "--junit", "r.xml")
    assert res.exit_code == 0, res.output
    assert files_under(Path("out")) == sorted(o[len("out/"):] for _, outs in EXPECTED.values() for o in outs)
    with zipfile.ZipFile("out/a/sequential.keras") as z:
        assert {"config.json", "metadata.json", "model.weights.h5"} <= set(z.namelist())

    # One plain line per input on stderr (not a terminal), in sorted order; the table on stdout.
    lines = res.stderr.splitlines()
    assert len(lines) == len(EXPECTED)
    assert re.fullmatch(r"ok  models/a/b/bidir_sum\.h5 -> out/a/b/bidir_sum\.keras \(\d+\.\ds\)", lines[0])
    assert re.fullmatch(r"ok  models/a/sequential\.h5 -> out/a/sequential\.keras \(\d+\.\ds\)", lines[1])
    assert re.fullmatch(r"ok  models/c/plain_gru\.h5: nothing to convert \(\d+\.\ds\)", lines[2])
    assert lines[4].startswith("ok  models/ck -> out/ck.keras, out/ck.keras.rest.npz (")
    assert "README" not in res.output and "notes.json" not in res.output
    table = dict(re.split(r"\s{2,}", ln.strip(), maxsplit=1) for ln in res.stdout.splitlines())
    assert table["ok"] == "4" and table["nothing-to-convert"] == "1" and table["failed"] == "0"
    assert table["total"] == "5" and table["throughput"].endswith("models/s") and table["jobs"] == "1"

    rep = json.loads(Path("r.json").read_text())
    got = {r["input"]: (r["status"], r["outputs"]) for r in rep["inputs"]}
    assert got == EXPECTED
    assert {r["input"]: r["format"] for r in rep["inputs"]}["models/ck"] == "tf1-checkpoint"
    check_junit(Path("r.xml"), rep)


def test_mixed_directory_python_api(tree):
    s = batch.convert_many([tree], Path("out"), jobs=1, echo=False)
    assert s.exit_code == 0
    assert {r.input: (r.status, r.outputs) for r in s.records} == EXPECTED
    assert [r.input for r in s.records] == sorted(EXPECTED)
    assert s.counts == {"ok": 4, "nothing-to-convert": 1, "skipped": 0, "parity-failed": 0, "failed": 0,
                        "internal-error": 0}
    assert s.not_run == []
    seq = next(r for r in s.records if r.input == "models/a/sequential.h5")
    assert [st.get("name", st.get("path")) for st in seq.stacks] == ["cu_dnngru", "cu_dnngru_1"]
    assert seq.error is None


def test_checkpoint_forms_and_multi_stack_directory_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    put(Path("in/multi"), "multi_stack")                 # several stacks -> a directory output
    put(Path("in/two/uni"), "layer_uni_1l")
    (Path("in/two/uni/checkpoint")).unlink()             # no state file: found through its .index file
    s = batch.convert_many(["in", "in/two/uni/model.ckpt.index"], "out", jobs=1, echo=False)
    assert s.exit_code == 0, [r.error for r in s.records]
    # The checkpoint named again by its .index file is the same input (deduplicated, first root wins).
    assert {r.input: r.outputs for r in s.records} == {
        "in/multi": ["out/multi/decoder__cudnn_gru.keras", "out/multi/encoder__cudnn_gru.keras",
                     "out/multi/rest.npz"],
        "in/two/uni": ["out/two/uni.keras", "out/two/uni.keras.rest.npz"],
    }
    # Named on its own (by its .index file, or its prefix): DIR/<prefix name>.keras.
    s = batch.convert_many(["in/two/uni/model.ckpt.index", "in/multi/model.ckpt"], "flat", jobs=1, echo=False)
    assert s.exit_code == 0, [r.error for r in s.records]
    assert {r.input: r.output for r in s.records} == {
        "in/two/uni/model.ckpt.index": "flat/model.ckpt.keras", "in/multi/model.ckpt": "flat/model.ckpt"}
    assert Path("flat/model.ckpt/encoder__cudnn_gru.keras").is_file()


def test_checkpoint_found_by_index_file_is_one_input(tmp_path, monkeypatch):
    """A directory with no ``checkpoint`` file and two prefixes: each prefix is one input
    (its .index and .data files are not separate inputs)."""
    monkeypatch.chdir(tmp_path)
    d = Path("in/two")
    d.mkdir(parents=True)
    for name, case in (("first", "layer_uni_1l"), ("second", "tf13")):
        for f in (TF1 / case).glob("model.ckpt.*"):
            shutil.copyfile(f, d / f.name.replace("model.ckpt", f"{name}.ckpt"))
    items = batch.discover(["in"], Path("out"))
    assert [(i.display, i.rel, i.format) for i in items] == [
        ("in/two/first.ckpt", "two/first.ckpt", "tf1-checkpoint"),
        ("in/two/second.ckpt", "two/second.ckpt", "tf1-checkpoint")]
    s = batch.convert_many(["in"], "out", jobs=1, echo=False)
    assert s.exit_code == 0 and [r.outputs[0] for r in s.records] == ["out/two/first.ckpt.keras",
                                                                        "out/two/second.ckpt.keras"]


# --------------------------------------------------------------------------- explicit files, globs, mirroring

def test_mirroring_explicit_files_and_globs(tree):
    res = cli("models/a/b/bidir_sum.h5", "models/ck/", "--out-dir", "flat", "--jobs", "1")
    assert res.exit_code == 0, res.output
    assert files_under(Path("flat")) == ["bidir_sum.keras", "ck.keras", "ck.keras.rest.npz"]

    # A glob mirrors relative to its directory part before the first wildcard; non-models are ignored.
    res = cli("models/**/*.h5", "models/*.txt", "--out-dir", "g", "--jobs", "1")
    assert res.exit_code == 0, res.output
    assert files_under(Path("g")) == ["a/b/bidir_sum.keras", "a/sequential.keras", "c/weights_only.h5"]

    # Duplicates (a file also inside a named directory, a path given twice) convert once.
    items = batch.discover(["models/a", "models/a/", "models/a/b/../sequential.h5"], Path("x"))
    assert [(i.display, i.rel) for i in items] == [("models/a/b/bidir_sum.h5", "b/bidir_sum.h5"),
                                                   ("models/a/sequential.h5", "sequential.h5")]


def test_format_and_config_choose_the_output_suffix(tree):
    s = batch.convert_many(["models/c/weights_only.h5"], "o1", jobs=1, echo=False,
                           config=KERAS / "weights_only.json")
    assert s.exit_code == 0 and s.records[0].outputs == ["o1/weights_only.keras"]
    s = batch.convert_many(["models/a/sequential.h5"], "o2", jobs=1, echo=False, format="h5-weights")
    assert s.exit_code == 0 and s.records[0].outputs == ["o2/sequential.h5"]


def test_not_a_model_named_explicitly_is_a_failure(tree):
    res = cli("models/README.txt", "models/nope.h5", "models/zz*.h5", "models/a", "--out-dir", "out", "--jobs", "1",
              "--keep-going", "--report", "r.json")
    assert res.exit_code == 3
    rep = json.loads(Path("r.json").read_text())
    st = {r["input"]: (r["status"], r["exit_code"]) for r in rep["inputs"]}
    assert st == {"models/README.txt": ("failed", 3), "models/nope.h5": ("failed", 3),
                  "models/zz*.h5": ("failed", 3), "models/a/b/bidir_sum.h5": ("ok", 0),
                  "models/a/sequential.h5": ("ok", 0)}
    assert "FAILED models/README.txt: not a Keras HDF5 file nor a TensorFlow checkpoint" in res.stderr
    assert "FAILED models/nope.h5: no such file or directory" in res.stderr
    assert "FAILED models/zz*.h5: no such file or directory, and the glob pattern matches nothing" in res.stderr


def test_nothing_found_is_exit_3_naming_the_roots(tmp_path, monkeypatch):
    """Issue 18: a run that finds nothing to convert is never green: exit 3, one line naming the
    roots, the JSON report's ``error``, and a failing JUnit case; no output directory is made."""
    monkeypatch.chdir(tmp_path)
    Path("empty/sub").mkdir(parents=True)
    Path("empty/sub/readme.md").write_text("hi")
    Path("other").mkdir()
    res = cli("empty", "other", "--out-dir", "out", "--report", "r.json", "--junit", "r.xml")
    assert res.exit_code == 3
    assert res.stderr == "gruconv: error: no convertible input found under 'empty', 'other'\n"
    assert re.search(r"^total\s+0$", res.stdout, re.M)
    rep = json.loads(Path("r.json").read_text())
    assert rep["inputs"] == [] and rep["exit_code"] == 3
    assert rep["error"] == "no convertible input found under 'empty', 'other'"
    root = check_junit(Path("r.xml"), rep)
    assert root.get("tests") == "1" and root.get("failures") == "1"
    assert not Path("out").exists()


def test_models_with_nothing_to_convert_are_not_a_green_run(tmp_path, monkeypatch):
    """Issue 18: a tree of model files none of which holds a cuDNN layer (legacy files with plain GRUs,
    Keras 3 files) converts nothing: exit 3 with the line naming the roots, as for an empty tree.  A
    Keras 3 file is known from discovery (its reader never converts); a legacy plain-GRU file only
    once read, so that rule holds for unsharded runs (a shard cannot speak for the tree)."""
    monkeypatch.chdir(tmp_path)
    put(Path("plain/a/plain_gru.h5"), "plain_gru.h5")
    put(Path("plain/b.h5"), "plain_gru.h5")
    res = cli("plain", "--out-dir", "out", "--report", "r.json")
    assert res.exit_code == 3, res.output
    assert res.stderr.splitlines()[-1] == ("gruconv: error: no convertible input found under 'plain' (2 model file(s) "
                                           "read, none with a CuDNNGRU/CuDNNLSTM layer or a cuDNN RNN checkpoint)")
    rep = json.loads(Path("r.json").read_text())
    assert [r["status"] for r in rep["inputs"]] == ["nothing-to-convert"] * 2 and rep["exit_code"] == 3
    sharded = cli("plain", "--out-dir", "out2", "--shard", "1/2")
    assert sharded.exit_code == 0, sharded.output
    k3 = Path("k3")
    k3.mkdir()
    shutil.copyfile(FIXTURES / "keras3" / "mixed.keras", k3 / "mixed.keras")
    res = cli("k3", "--out-dir", "out3", "--shard", "1/1")
    assert res.exit_code == 3
    assert res.stderr.splitlines()[-1] == "gruconv: error: no convertible input found under 'k3' (1 already Keras 3)"
    mixed = cli("plain", "k3", KERAS / "sequential.h5",
                "--out-dir", "out4")
    assert mixed.exit_code == 0, mixed.output  # one convertible input: green


def test_an_empty_shard_of_a_tree_with_inputs_is_not_nothing_found(tree):
    """Shards share one tree: a shard that gets no input while the tree has some is fine (exit 0)."""
    s = batch.convert_many([str(tree / "a" / "sequential.h5")], "out", shard="2/2", jobs=1, echo=False)
    assert s.records == [] and s.nothing_found is None and s.exit_code == 0


def _state_outside(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "checkpoint").write_text('model_checkpoint_path: "../../../elsewhere/model.ckpt"\n')


def test_checkpoint_dir_pointing_outside_is_listed_as_skipped_with_the_reason(tmp_path, monkeypatch):
    """The issue's case: the only checkpoint directory's state file points outside the tree (rightly
    not followed).  It is a skipped record with the reason in console, JSON and JUnit, and the run,
    having converted nothing, exits 3."""
    monkeypatch.chdir(tmp_path)
    _state_outside(Path("models/run1"))
    res = cli("models", "--out-dir", "out", "--report", "r.json", "--junit", "r.xml")
    assert res.exit_code == 3
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("skipped ")]
    assert line == ["skipped models/run1: checkpoint: model_checkpoint_path '../../../elsewhere/model.ckpt' "
                    "points outside the checkpoint's directory; refused; pass the checkpoint prefix explicitly "
                    "(e.g. DIR/model.ckpt-100) if you mean to read it"]
    assert res.stderr.splitlines()[-1] == "gruconv: error: no convertible input found under 'models' (1 skipped)"
    rep = json.loads(Path("r.json").read_text())
    (rec,) = rep["inputs"]
    assert rec["input"] == "models/run1" and rec["status"] == "skipped" and "points outside" in rec["reason"]
    root = check_junit(Path("r.xml"), rep)
    case = next(c for c in root.findall("testcase") if c.get("name") == "models/run1")
    assert "points outside" in case.find("skipped").get("message")


def test_skipped_directories_beside_a_converted_model(tmp_path, monkeypatch):
    """With something converted the run succeeds, and the passed-over directories are still listed:
    a state file pointing outside, an unreadable directory (the walk's listing refused, as for a
    directory without read permission: the tests run as root, whom chmod cannot lock out), a
    SavedModel whose variables no reader takes."""
    from gruconv.batch import discovery

    monkeypatch.chdir(tmp_path)
    tree = Path("models")
    put(tree / "a" / "sequential.h5", "sequential.h5")
    _state_outside(tree / "a" / "ck")
    locked = tree / "b" / "locked"
    locked.mkdir(parents=True)
    sm = tree / "c" / "sm"
    sm.mkdir(parents=True)
    shutil.copy(FIXTURES / "tf2" / "saved_model" / "saved_model.pb", sm / "saved_model.pb")

    def scandir(path="."):
        if os.path.realpath(path) == os.path.realpath(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return os.scandir(path)

    monkeypatch.setattr(discovery, "_scandir", scandir)
    s = batch.convert_many([str(tree)], "out", jobs=1, echo=False, report="r.json", junit="r.xml")
    skipped = {r.input: r.reason for r in s.records if r.status == "skipped"}
    assert skipped == {
        "models/a/ck": skipped["models/a/ck"], "models/b/locked": "directory cannot be read (Permission denied)",
        "models/c/sm": "a SavedModel (saved_model.pb) whose variables/variables bundle holds no checkpoint gruconv "
                       "reads: not converted"}
    assert "points outside" in skipped["models/a/ck"]
    assert [(r.input, r.status) for r in s.records if r.status != "skipped"] == [("models/a/sequential.h5", "ok")]
    assert s.nothing_found is None and s.exit_code == 0
    rep = json.loads(Path("r.json").read_text())
    assert {r["input"]: r.get("reason") for r in rep["inputs"] if r["status"] == "skipped"} == skipped
    check_junit(Path("r.xml"), rep)


def test_a_checkpoint_found_inside_a_passed_over_directory_is_not_skipped(tmp_path, monkeypatch):
    """A directory whose state file cannot be followed but whose own prefix is found by its .index is
    an input (converted), not a skip."""
    monkeypatch.chdir(tmp_path)
    _state_outside(Path("models/run1"))
    src = FIXTURES / "tf2" / "ckpt_seq"
    for f in src.iterdir():
        if f.name.startswith("weights."):
            shutil.copy(f, Path("models/run1") / f.name)
    s = batch.convert_many(["models"], "out", jobs=1, echo=False)
    assert [(r.input, r.status) for r in s.records] == [("models/run1/weights", "ok")]
    assert s.exit_code == 0


def test_output_dir_inside_the_input_tree_is_not_an_input(tree):
    assert cli(tree, "--out-dir", "models/converted", "--jobs", "1").exit_code == 0
    res = cli(tree, "--out-dir", "models/converted", "--jobs", "1", "--skip-existing")
    assert res.exit_code == 0 and "converted/" not in res.stderr  # its .h5 weights output is not re-read
    assert res.stderr.count("skipped ") == 4


# --------------------------------------------------------------------------- escaping DIR

def test_safe_output_refuses_escapes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert batch.safe_output(out, "a/b.keras") == out / "a" / "b.keras"
    for rel, msg in (("../x.keras", "'..'"), ("a/../../x.keras", "'..'"), ("/etc/x.keras", "absolute"),
                     ("", "absolute")):
        with pytest.raises(OutputError, match=msg):
            batch.safe_output(out, rel)
    (tmp_path / "elsewhere").mkdir()
    (out / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputError, match="outside"):
        batch.safe_output(out, "link/x.keras")


def test_symlink_in_input_tree_pointing_outside_is_refused(tree, tmp_path):
    put(tmp_path / "outside" / "go_backwards.h5", "go_backwards.h5")
    (tree / "a" / "evil.h5").symlink_to(tmp_path / "outside" / "go_backwards.h5")
    res = cli(tree, "--out-dir", "out", "--jobs", "1", "--keep-going", "--report", "r.json")
    assert res.exit_code == 3
    rep = json.loads(Path("r.json").read_text())
    evil = next(r for r in rep["inputs"] if r["input"] == "models/a/evil.h5")
    assert evil["status"] == "failed" and evil["exit_code"] == 3 and evil["outputs"] == []
    assert "'..' component" in evil["error"] and "refusing to write outside 'out'" in evil["error"]
    assert "FAILED models/a/evil.h5: output path '../outside/go_backwards.keras' has a '..' component" \
        in res.stderr
    assert not (tmp_path / "outside" / "go_backwards.keras").exists()
    assert not list(tmp_path.glob("**/go_backwards.keras"))
    assert sum(r["status"] == "ok" for r in rep["inputs"]) == 4  # the rest converted


def test_symlink_inside_out_dir_pointing_outside_is_refused(tree, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    Path("out").mkdir()
    Path("out/a").symlink_to(tmp_path / "elsewhere")
    s = batch.convert_many([tree], "out", jobs=1, keep_going=True, echo=False)
    bad = [r for r in s.records if r.status == "failed"]
    assert [r.input for r in bad] == ["models/a/b/bidir_sum.h5", "models/a/sequential.h5"]
    assert all("outside 'out'" in r.error for r in bad)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert s.exit_code == 3


def test_two_inputs_with_one_output_collide(tree):
    put(Path("models/a/sequential.hdf5"), "go_backwards.h5")
    s = batch.convert_many([tree], "out", jobs=1, keep_going=True, echo=False)
    r = next(r for r in s.records if r.input == "models/a/sequential.hdf5")
    assert r.status == "failed" and "collides with the output of models/a/sequential.h5" in r.error


# --------------------------------------------------------------------------- sharding

def test_shards_cover_every_input_exactly_once(tree):
    for i in range(4):
        put(tree / f"d{i}" / f"m{i}.h5", "go_backwards.h5")
    everything = [i.display for i in batch.discover([tree], Path("out"))]
    assert len(everything) == 9
    for n in range(1, 5):
        parts = [[i.display for i in batch.select_shard(batch.discover([tree], Path("out")),
                                                        batch.parse_shard(f"{k}/{n}"))] for k in range(1, n + 1)]
        assert sorted(x for p in parts for x in p) == sorted(everything)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    # Through the CLI: shard 2/3 converts exactly inputs 1, 4, 7 (0-based) of the sorted list.
    res = cli(tree, "--out-dir", "out", "--jobs", "1", "--shard", "2/3", "--report", "r.json")
    assert res.exit_code == 0, res.output
    rep = json.loads(Path("r.json").read_text())
    assert rep["shard"] == "2/3" and [r["input"] for r in rep["inputs"]] == everything[1::3]


@pytest.mark.parametrize("spec", ["0/3", "4/3", "1/0", "x", "1/2/3", "-1/2", ""])
def test_bad_shard_is_a_usage_error(tree, spec):
    res = cli(tree, "--out-dir", "out", "--shard", spec)
    assert res.exit_code == 2 and res.stderr.startswith("gruconv: error: --shard")
    with pytest.raises(UsageError):
        batch.parse_shard(spec)


def test_usage_errors():
    assert cli("a.h5", "--jobs", "2").exit_code == 2                       # batch option without --out-dir
    with pytest.raises(UsageError, match="--jobs"):
        batch.convert_many(["x"], "out", jobs=0)
    with pytest.raises(UsageError, match="--format"):
        batch.convert_many(["x"], "out", format="coreml")  # not a writer (onnx and tflite became ones)


# --------------------------------------------------------------------------- failures

@pytest.fixture
def with_broken(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    put(Path("m/a.h5"), "sequential.h5")
    broken(Path("m/b_broken.h5"))
    put(Path("m/c.h5"), "go_backwards.h5")
    return Path("m")


def test_keep_going_converts_the_rest(with_broken):
    res = cli(with_broken, "--out-dir", "out", "--jobs", "1", "--keep-going", "--report", "r.json", "--junit", "r.xml")
    assert res.exit_code == 3
    assert files_under(Path("out")) == ["a.keras", "c.keras"]
    rep = json.loads(Path("r.json").read_text())
    assert [(r["input"], r["status"]) for r in rep["inputs"]] == [
        ("m/a.h5", "ok"), ("m/b_broken.h5", "failed"), ("m/c.h5", "ok")]
    assert rep["inputs"][1]["error"].startswith("m/b_broken.h5: not a readable HDF5 file")
    assert rep["not_run"] == [] and rep["exit_code"] == 3
    assert res.stderr.splitlines()[1].startswith("FAILED m/b_broken.h5: not a readable HDF5 file (")
    check_junit(Path("r.xml"), rep)


def test_without_keep_going_stops_at_the_first_failure(with_broken):
    res = cli(with_broken, "--out-dir", "out", "--jobs", "1", "--report", "r.json", "--junit", "r.xml")
    assert res.exit_code == 3
    assert files_under(Path("out")) == ["a.keras"]
    rep = json.loads(Path("r.json").read_text())
    assert [(r["input"], r["status"]) for r in rep["inputs"]] == [("m/a.h5", "ok"), ("m/b_broken.h5", "failed")]
    assert rep["not_run"] == ["m/c.h5"]
    root = check_junit(Path("r.xml"), rep)
    assert root.get("tests") == "2" and root.get("failures") == "1"
    assert re.search(r"^not run\s+1$", res.stdout, re.M)


def test_parity_failure_exit_1_and_pass_exit_0(tree):
    # every bound at 0 (tolerance, rtol, floor multiple: issue 19's rule) forces a parity failure
    res = cli("models/a/sequential.h5", "--out-dir", "out", "--jobs", "1", "--verify", "--tolerance", "0",
              "--rtol", "0", "--floor-k", "0", "--report", "r.json", "--junit", "r.xml")
    assert_parity_failure(res)
    rep = json.loads(Path("r.json").read_text())
    r = rep["inputs"][0]
    assert r["status"] == "parity-failed" and r["exit_code"] == 1 and r["verification"]["passed"] is False
    assert r["error"].startswith("converted model outside tolerance: ")
    assert rep["summary"]["parity-failed"] == 1
    root = check_junit(Path("r.xml"), rep)
    assert root.find("testcase/failure").get("type") == "ParityError"

    s = batch.convert_many(["models/a/sequential.h5"], "out2", jobs=1, echo=False, verify=True,
                           bounds=Bounds(tolerance=1e-4))
    assert s.exit_code == 0 and s.records[0].verification["passed"] is True


def test_any_failure_beats_parity_failure(tree):
    broken(Path("models/zz.h5"))
    s = batch.convert_many(["models/a/sequential.h5", "models/zz.h5"], "out", jobs=1, echo=False, keep_going=True,
                           verify=True, bounds=Bounds(0.0, 0.0, 0.0))
    assert [r.status for r in s.records] == ["parity-failed", "failed"] and s.exit_code == 3


def test_internal_error_is_recorded_with_traceback(tree, monkeypatch):
    """A bug in one input's conversion (a planted ZeroDivisionError) is an ``internal-error`` record,
    distinct from an input's ``failed``: exit code 4 on the record and for the whole run (above the
    other input's exit 3), a JUnit <error> (not a <failure>), the traceback in the JSON report only,
    and nothing left of its output."""
    from gruconv import api

    real = api.convert

    def boom(input, output, **kw):
        if "sequential" in str(input):
            Path(output).write_bytes(b"half")   # what a bug may leave: the batch must remove it
            raise ZeroDivisionError("boom")
        return real(input, output, **kw)

    monkeypatch.setattr(api, "convert", boom)
    broken(tree / "c" / "zz_truncated.h5")
    res = cli(tree, "--out-dir", "out", "--jobs", "1", "--keep-going", "--report", "r.json", "--junit", "r.xml")
    assert res.exit_code == 4 and isinstance(res.exception, SystemExit)
    rep = json.loads(Path("r.json").read_text())
    assert rep["exit_code"] == 4
    assert rep["summary"]["internal-error"] == 1 and rep["summary"]["failed"] == 1
    r = next(r for r in rep["inputs"] if r["input"] == "models/a/sequential.h5")
    assert r["status"] == "internal-error" and r["exit_code"] == 4
    assert r["error"] == "internal error: ZeroDivisionError: boom"
    assert "Traceback (most recent call last)" in r["traceback"] and "boom" in r["traceback"]
    bad = next(r for r in rep["inputs"] if r["input"].endswith("zz_truncated.h5"))
    assert bad["status"] == "failed" and bad["exit_code"] == 3 and "internal error" not in bad["error"]
    assert not Path("out/a/sequential.keras").exists()
    assert "FAILED models/a/sequential.h5: internal error: ZeroDivisionError: boom" in res.stderr
    assert "Traceback" not in res.output
    assert all("traceback" not in x for x in rep["inputs"] if x is not r)
    root = check_junit(Path("r.xml"))
    assert root.get("errors") == "1" and root.get("failures") == "1"
    case = next(c for c in root.findall("testcase") if c.get("name") == "models/a/sequential.h5")
    assert case.find("failure") is None and case.find("error").get("type") == "InternalError"


def test_internal_error_stops_the_run_without_keep_going(tree, monkeypatch):
    from gruconv import api

    def boom(input, output, **kw):
        raise RuntimeError("planted")

    monkeypatch.setattr(api, "convert", boom)
    s = batch.convert_many([tree], "out", jobs=1, echo=False)
    assert [r.status for r in s.records] == ["internal-error"] and s.not_run and s.exit_code == 4


def test_existing_outputs_are_refused_without_force(tree):
    assert cli(tree, "--out-dir", "out", "--jobs", "1").exit_code == 0
    res = cli("models/a", "--out-dir", "out/a", "--jobs", "1", "--keep-going")
    assert res.exit_code == 3 and res.stderr.count("output exists; pass --force to overwrite it") == 2
    assert cli("models/a", "--out-dir", "out/a", "--jobs", "1", "--force").exit_code == 0


# --------------------------------------------------------------------------- skip-existing

def test_skip_existing(tree):
    assert cli(tree, "--out-dir", "out", "--jobs", "1").exit_code == 0
    before = {f: Path("out", f).stat().st_mtime_ns for f in files_under(Path("out"))}

    res = cli(tree, "--out-dir", "out", "--jobs", "1", "--skip-existing", "--report", "r.json", "--junit", "r.xml")
    assert res.exit_code == 0, res.output
    rep = json.loads(Path("r.json").read_text())
    assert {r["input"]: r["status"] for r in rep["inputs"]} == {
        **{k: "skipped" for k in EXPECTED}, "models/c/plain_gru.h5": "nothing-to-convert"}
    assert "skipped models/a/sequential.h5: output is up to date (recorded as converted, unchanged since)" \
        in res.stderr.splitlines()
    assert {f: Path("out", f).stat().st_mtime_ns for f in files_under(Path("out"))} == before
    assert check_junit(Path("r.xml"), rep).get("skipped") == "4"

    # A newer input is converted again (its stale output overwritten); so is a touched checkpoint.
    future = time.time() + 60
    os.utime("models/a/sequential.h5", (future, future))
    os.utime("models/ck/model.ckpt.index", (future, future))
    s = batch.convert_many([tree], "out", jobs=1, skip_existing=True, echo=False)
    assert s.exit_code == 0
    assert {r.input: r.status for r in s.records if r.status != "skipped"} == {
        "models/a/sequential.h5": "ok", "models/ck": "ok", "models/c/plain_gru.h5": "nothing-to-convert"}
    assert Path("out/a/sequential.keras").stat().st_mtime_ns > before["a/sequential.keras"]
    assert Path("out/a/b/bidir_sum.keras").stat().st_mtime_ns == before["a/b/bidir_sum.keras"]


# --------------------------------------------------------------------------- reports

def test_json_report_fields(with_broken):
    put(Path("m/d_plain.h5"), "plain_gru.h5")
    s = batch.convert_many([with_broken], "out", jobs=1, keep_going=True, report="rep/r.json", echo=False)
    rep = json.loads(Path("rep/r.json").read_text())
    assert set(rep) == {"gruconv_version", "started", "duration_s", "jobs", "shard", "out_dir", "summary",
                        "exit_code", "error", "inputs", "not_run"}
    assert rep["error"] is None   # something was convertible
    assert rep["gruconv_version"] == __version__ and rep["jobs"] == 1 and rep["shard"] is None
    assert datetime.fromisoformat(rep["started"]).tzinfo is not None
    assert isinstance(rep["duration_s"], float) and rep["duration_s"] > 0
    assert rep["summary"] == {"ok": 2, "nothing-to-convert": 1, "skipped": 0, "parity-failed": 0, "failed": 1,
                              "internal-error": 0}
    assert rep["summary"] == s.counts and rep["exit_code"] == s.exit_code == 3
    for r in rep["inputs"]:
        assert set(r) == RECORD_KEYS
        assert r["status"] in batch.STATUSES and isinstance(r["seconds"], float)
        assert isinstance(r["outputs"], list) and isinstance(r["stacks"], list) and isinstance(r["warnings"], list)
    a, b, c, d = rep["inputs"]
    assert a["format"] == "keras-h5" and a["outputs"] == ["out/a.keras"] and a["error"] is None
    assert a["exit_code"] == 0 and a["verification"] is None and len(a["stacks"]) == 2
    assert b["status"] == "failed" and b["exit_code"] == 3 and b["outputs"] == []
    assert d["status"] == "nothing-to-convert" and d["exit_code"] == 0
    assert rep == s.to_json() | {"duration_s": rep["duration_s"]}


def test_reports_are_valid_with_hostile_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    odd = Path("m") / 'we<i>rd & "q\u00e9\u0007".h5'
    broken(odd)
    res = cli("m", "--out-dir", "out", "--junit", "r.xml", "--report", "r.json")
    assert res.exit_code == 3
    rep = json.loads(Path("r.json").read_text())
    root = check_junit(Path("r.xml"))
    assert root.get("tests") == "1" and root.get("failures") == "1" and rep["summary"]["failed"] == 1
    assert rep["inputs"][0]["input"] == str(odd)
    assert root.find("testcase").get("name") == 'm/we<i>rd & "q\u00e9\\x07".h5'


def test_progress_line_on_a_terminal(tree, monkeypatch):
    monkeypatch.setattr(batch.records, "_isatty", lambda stream: True)
    broken(Path("models/zz.h5"))
    res = cli(tree, "--out-dir", "out", "--jobs", "1", "--keep-going")
    assert res.exit_code == 3
    assert "\r[1/6] ok  models/a/b/bidir_sum.h5" in res.stderr and "\r[6/6] failed  models/zz.h5" in res.stderr
    assert "\rFAILED models/zz.h5: not a readable HDF5 file" in res.stderr
    assert "ok  models/a/sequential.h5 ->" not in res.stderr   # no per-file lines for successes
    assert res.stderr.endswith("\r")                          # progress cleared before the table


# --------------------------------------------------------------------------- parallel workers

def test_jobs_2_matches_jobs_1(tree):
    broken(Path("models/c/zz_broken.h5"))
    put(Path("models/d/go_backwards.h5"), "go_backwards.h5")
    s1 = batch.convert_many([tree], "o1", jobs=1, keep_going=True, echo=False)
    res = cli(tree, "--out-dir", "o2", "--jobs", "2", "--keep-going", "--report", "r2.json", "--junit", "r2.xml")
    assert res.exit_code == 3 == s1.exit_code
    assert files_under(Path("o1")) == files_under(Path("o2"))
    rep = json.loads(Path("r2.json").read_text())
    assert rep["jobs"] == 2
    assert [(r["input"], r["status"], [o.replace("o2/", "", 1) for o in r["outputs"]]) for r in rep["inputs"]] == \
        [(r.input, r.status, [o.replace("o1/", "", 1) for o in r.outputs]) for r in s1.records]
    assert rep["inputs"][[r["input"] for r in rep["inputs"]].index("models/c/zz_broken.h5")]["error"] == \
        next(r.error for r in s1.records if r.input == "models/c/zz_broken.h5")
    for f in files_under(Path("o1")):
        if f.endswith(".keras"):
            with zipfile.ZipFile(Path("o1", f)) as z1, zipfile.ZipFile(Path("o2", f)) as z2:
                assert _config(z1) == _config(z2)
                assert _weights(z1) == _weights(z2)
    check_junit(Path("r2.xml"), rep)
    assert len(res.stderr.splitlines()) == len(rep["inputs"])


# --------------------------------------------------------------------------- safety (gruconv.files.inputs era)

def test_output_onto_an_input_is_refused_before_any_work(tmp_path, monkeypatch):
    """``--out-dir`` equal to the input's directory maps a weights-only ``w.h5`` onto itself; a
    report named like an input would overwrite it: both refused before anything is converted."""
    monkeypatch.chdir(tmp_path)
    put(Path("in/w.h5"), "weights_only.h5")
    put(Path("in/a.h5"), "sequential.h5")
    before = Path("in/w.h5").read_bytes()
    with pytest.raises(OutputError, match="output is the input 'in/w.h5'"):
        batch.convert_many(["in/w.h5", "in/a.h5"], "in", jobs=1, echo=False, force=True)
    with pytest.raises(OutputError, match="output is the input"):
        batch.convert_many(["in/a.h5"], "out", jobs=1, echo=False, report="in/a.h5")
    res = cli("in/a.h5", "--out-dir", "out", "--junit", "in/a.h5", "--jobs", "1")
    assert res.exit_code == 3 and res.stderr.count("\n") == 1 and "output is the input" in res.stderr
    assert Path("in/w.h5").read_bytes() == before
    assert not Path("in/a.keras").exists() and not Path("out/a.keras").exists()


def test_a_failure_is_never_turned_into_a_skip(with_broken):
    """A parity failure leaves no output, and ``--skip-existing`` converts it again next time; an
    output that appeared by other means (no record of a successful conversion) is rebuilt."""
    s = batch.convert_many(["m/a.h5"], "out", jobs=1, echo=False, verify=True,
                           bounds=Bounds(0.0, 0.0, 0.0))
    assert s.records[0].status == "parity-failed" and not Path("out/a.keras").exists()
    Path("out/a.keras").write_bytes(b"not a model")            # e.g. a torn copy from elsewhere
    s = batch.convert_many(["m/a.h5"], "out", jobs=1, echo=False, skip_existing=True)
    assert s.records[0].status == "ok" and zipfile.is_zipfile("out/a.keras")
    s = batch.convert_many(["m/a.h5"], "out", jobs=1, echo=False, skip_existing=True)
    assert s.records[0].status == "skipped"


def test_print_fn_receives_the_console(tree):
    got = []
    s = batch.convert_many(["models/a/sequential.h5"], "out", jobs=1,
                           print_fn=lambda text, err=False, nl=True: got.append((err, text)))
    assert s.exit_code == 0
    assert got[0][0] is True and got[0][1].startswith("ok  models/a/sequential.h5 -> out/sequential.keras")
    assert got[-1][0] is False and "total" in got[-1][1]


def test_control_characters_in_names_stay_on_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    broken(Path("m") / "bad\nname\x1b[2J.h5")
    res = cli("m", "--out-dir", "out", "--jobs", "1")
    assert res.exit_code == 3
    line, = res.stderr.splitlines()
    assert line.startswith("FAILED m/bad\\nname\\x1b[2J.h5: ")
