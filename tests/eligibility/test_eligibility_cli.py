"""Keras 3 inputs and the cuDNN eligibility report through the CLI (issue 22, issue 18 item 3).

``gruconv inspect`` of a Keras 3 ``.keras`` / ``.weights.h5`` (with ``--config``) / Keras-3-written
``.h5`` and of a legacy Keras HDF5 model with plain GRU/LSTM layers answers "does this run on cuDNN"
(text and ``--json`` under ``cudnn_eligibility``); ``convert`` of a Keras 3 file says there is nothing
to convert, exit 0, nothing written; hostile ``.keras`` zips are refused with one line, exit 3.
Fixtures: ``fixtures/make_keras3_fixtures.py`` (Keras 3 ``save``/``save_weights``, tf_keras ``save`` /
``save_weights``) and gruconv's own conversions of ``fixtures/keras``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv import readers
from gruconv.cli import main
from gruconv.readers import keras3 as k3

K3 = FIXTURES / "keras3"
KERAS = FIXTURES / "keras"


def cli(*argv):
    return CliRunner().invoke(main, [str(a) for a in argv])


def _one_error_line(res, code: int, *needles):
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr, res.exception)
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gruconv: error: "), res.stderr
    assert "Traceback" not in res.output
    for n in needles:
        assert n in err[0], err[0]
    return err[0]


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _verdicts(report):
    return {e["path"]: {be: e["backends"][be]["verdict"] for be in ("tensorflow", "jax", "torch")}
            for e in report["layers"]}


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("name,kind", [("mixed.keras", "keras"), ("eligible.weights.h5", "weights"),
                                       ("mixed.keras3.h5", "model-h5")])
def test_keras3_files_are_detected_as_keras3(name, kind):
    assert readers.detect(K3 / name) == "keras3"
    assert k3.read(K3 / name).kind == kind


@pytest.mark.parametrize("name", ["legacy_gru_v1.h5", "legacy_gru_v1.weights_only.h5"])
def test_legacy_files_stay_with_the_legacy_reader(name):
    assert readers.detect(K3 / name) == "keras-h5"
    assert readers.detect(KERAS / "sequential.h5") == "keras-h5"


def test_an_hdf5_file_that_merely_has_a_layers_group_is_not_claimed(tmp_path):
    import h5py

    p = tmp_path / "other.h5"
    with h5py.File(p, "w") as f:
        f.create_group("layers/x")
    assert not k3.sniff(p)
    _one_error_line(cli("inspect", p), 3, "not a Keras model file")


@pytest.mark.parametrize("argv", [["inspect", K3 / "mixed.keras"], ["inspect", K3 / "legacy_gru_v1.h5", "--json"],
                                  ["convert", K3 / "mixed.keras", "/nonexistent/o.keras"]])
def test_inspect_and_convert_of_keras3_import_no_framework(argv):
    import subprocess
    import sys

    code = ("import sys, runpy; sys.argv = ['gruconv'] + %r\n"
            "try:\n    runpy.run_module('gruconv', run_name='__main__')\nexcept SystemExit as e:\n    print('RC=%%s' %% e.code)\n"
            "print('HEAVY=' + ','.join(m for m in ('tensorflow', 'keras', 'tf_keras', 'torch', 'jax') if m in sys.modules))"
            % ([str(a) for a in argv],))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = r.stdout.strip().splitlines()
    assert out[-1] == "HEAVY=" and out[-2] in ("RC=0", "RC=None"), r.stdout + r.stderr


def test_an_npz_is_not_claimed(tmp_path):
    import numpy as np

    p = tmp_path / "arrays.npz"
    np.savez(p, a=np.zeros(3))
    assert not k3.sniff(p)
    _one_error_line(cli("inspect", p), 3, "not a Keras HDF5 file nor a TensorFlow checkpoint")


def test_a_zip_with_keras_members_is_claimed_whatever_its_name(tmp_path):
    p = tmp_path / "model.bin"
    shutil.copyfile(K3 / "eligible.keras", p)
    assert readers.detect(p) == "keras3"


# --------------------------------------------------------------------------- inspect


def test_inspect_keras_text_names_every_failing_condition():
    res = cli("inspect", K3 / "mixed.keras")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].endswith("mixed.keras: Keras 3 .keras model (keras 3.15.1): already a Keras 3 file, "
                             "nothing to convert")
    assert lines[1].startswith("cuDNN eligibility (.keras; rules read from Keras 3.15.1 source)")
    text = res.stdout
    for cond in ("reset_after=False (needs reset_after == True)",
                 "recurrent_activation='hard_sigmoid' (needs recurrent_activation == 'sigmoid')",
                 "recurrent_dropout=0.2 (needs recurrent_dropout == 0)", "activation='relu' (needs activation == 'tanh')",
                 "use_bias=False (needs use_bias == True)", "unroll=True (needs unroll == False)"):
        assert cond in text, cond
    # every verdict line that is not cudnn (or JAX's GRU ceiling) says why
    for line in lines:
        s = line.strip()
        if s.split(" ")[0] in ("tensorflow", "jax", "torch") and s.split()[1] in ("fused", "fallback"):
            assert ":" in s or "no cuDNN GRU on JAX" in s, s
    assert res.stderr == ""


def test_inspect_keras_json_carries_the_report():
    res = cli("inspect", K3 / "mixed.keras", "--json")
    assert res.exit_code == 0
    info = json.loads(res.stdout)
    assert info["format"] == "keras3" and info["rnns"] == [] and info["nothing_to_convert"] is True
    rep = info["cudnn_eligibility"]
    v = _verdicts(rep)
    assert v["mixed/gru_ok"] == {"tensorflow": "cudnn", "jax": "fused", "torch": "cudnn"}
    assert v["mixed/gru_reset_before"] == {"tensorflow": "fallback", "jax": "fallback", "torch": "fallback"}
    bad = {f["field"]: f["value"] for f in rep["layers"][1]["backends"]["torch"]["failing"]}
    assert bad == {"reset_after": False}


def test_keras3_h5_model_gives_the_same_report_as_the_keras_file():
    a = json.loads(cli("inspect", K3 / "mixed.keras", "--json").stdout)["cudnn_eligibility"]
    res = cli("inspect", K3 / "mixed.keras3.h5", "--json")
    assert res.exit_code == 0
    b = json.loads(res.stdout)
    assert b["kind"] == "model-h5" and b["keras_version"] == "3.15.1"
    assert b["cudnn_eligibility"]["layers"] == a["layers"]


def test_weights_h5_without_config_answers_what_it_can():
    res = cli("inspect", K3 / "eligible.weights.h5")
    assert res.exit_code == 0, res.output
    assert "already a Keras 3 file, nothing to convert" in res.stdout
    assert "recurrent cells by weight shape: layers/gru GRU(8), layers/lstm LSTM(6)" in res.stdout
    assert "pass --config" in res.stdout
    info = json.loads(cli("inspect", K3 / "eligible.weights.h5", "--json").stdout)
    assert info["cudnn_eligibility"] is None


def test_weights_h5_with_config_and_a_config_that_does_not_fit(tmp_path):
    res = cli("inspect", K3 / "eligible.weights.h5", "--config", K3 / "eligible.config.json", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)["cudnn_eligibility"]
    assert _verdicts(rep) == {"eligible/gru": {"tensorflow": "cudnn", "jax": "fused", "torch": "cudnn"},
                              "eligible/lstm": {"tensorflow": "cudnn", "jax": "cudnn", "torch": "cudnn"}}
    # the check is not vacuous: another model's config, and the right one with one unit changed
    _one_error_line(cli("inspect", K3 / "eligible.weights.h5", "--config", K3 / "mixed.config.json"), 2,
                    "--config does not describe this weights file")
    cfg = json.loads((K3 / "eligible.config.json").read_text())
    cfg["config"]["layers"][1]["config"]["units"] = 9
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(cfg))
    line = _one_error_line(cli("inspect", K3 / "eligible.weights.h5", "--config", bad), 2)
    assert "GRU(9)" in line and "GRU(8)" in line


@pytest.mark.parametrize("name", ["mixed.keras", "mixed.keras3.h5"])
def test_config_with_a_file_that_carries_its_own_is_a_usage_error(name):
    _one_error_line(cli("inspect", K3 / name, "--config", K3 / "mixed.config.json"), 2, "--config does not apply")


def test_legacy_plain_gru_model_shows_the_report_text_and_json():
    res = cli("inspect", K3 / "legacy_gru_v1.h5")
    assert res.exit_code == 0
    assert "no CuDNNGRU or CuDNNLSTM layers: nothing to convert" in res.stdout
    assert "cuDNN eligibility (legacy HDF5 model;" in res.stdout
    assert "to fix reset_after=False -> reset_after == True: NOT with these weights" in res.stdout
    info = json.loads(cli("inspect", K3 / "legacy_gru_v1.h5", "--json").stdout)
    v = _verdicts(info["cudnn_eligibility"])
    assert v["legacy_gru_v1/gru_v1"] == {"tensorflow": "fallback", "jax": "fallback", "torch": "fallback"}


def test_legacy_weights_only_needs_config_for_the_report():
    info = json.loads(cli("inspect", K3 / "legacy_gru_v1.weights_only.h5", "--json").stdout)
    assert "cudnn_eligibility" not in info
    res = cli("inspect", K3 / "legacy_gru_v1.weights_only.h5", "--config", K3 / "legacy_gru_v1.legacy_config.json",
              "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)["cudnn_eligibility"]
    assert rep["format"] == "legacy HDF5 weights + config"
    full = json.loads(cli("inspect", K3 / "legacy_gru_v1.h5", "--json").stdout)["cudnn_eligibility"]
    assert rep["layers"] == full["layers"]


def test_cudnn_file_inspect_reports_what_convert_makes():
    info = json.loads(cli("inspect", KERAS / "sequential.h5", "--json").stdout)
    layers = info["cudnn_eligibility"]["layers"]
    assert [e["class"] for e in layers] == ["CuDNNGRU", "CuDNNGRU"]
    assert all("gruconv convert" in e["note"] for e in layers)
    assert len(info["rnns"]) == 2  # the conversion listing is unchanged


def test_doc_section_is_real_output(monkeypatch):
    """docs/eligibility.md's "From the command line" example lines are what inspect and convert print now."""
    root = FIXTURES.parent
    doc = (root / "docs" / "eligibility.md").read_text()
    section = doc.split("\n## From the command line\n", 1)[1].split("\n## ", 1)[0]
    monkeypatch.chdir(root)
    for argv in (["inspect", "fixtures/keras3/legacy_masked.h5"], ["convert", "fixtures/keras3/mixed.keras", "out.keras"]):
        res = cli(*argv)
        assert res.exit_code == 0
        assert f"$ gruconv {' '.join(argv)}\n{res.stdout}" in section, res.stdout
    assert not (root / "out.keras").exists()


# --------------------------------------------------------------------------- convert / verify


@pytest.mark.parametrize("name,out", [("mixed.keras", "out.keras"), ("eligible.weights.h5", "out.weights.h5"),
                                      ("mixed.keras3.h5", "out.h5")])
@pytest.mark.parametrize("force", [False, True])
def test_convert_keras3_says_nothing_to_convert_and_writes_nothing(tmp_path, name, out, force):
    src = tmp_path / "in" / name
    src.parent.mkdir()
    shutil.copyfile(K3 / name, src)
    before = _digest(src)
    outdir = tmp_path / "out"
    outdir.mkdir()
    res = cli("convert", src, outdir / out, *(["--force"] if force else []))
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == f"{src}: already a Keras 3 file, nothing to convert; no output written"
    assert res.stderr == ""
    assert list(outdir.iterdir()) == [] and _digest(src) == before
    assert sorted(p.name for p in src.parent.iterdir()) == [name]


def test_convert_with_verify_of_keras3_writes_nothing(tmp_path):
    res = cli("convert", K3 / "mixed.keras", tmp_path / "y.keras", "--verify")
    assert res.exit_code == 0 and "already a Keras 3 file, nothing to convert" in res.stdout
    assert list(tmp_path.iterdir()) == []  # no staging directory left either


def test_inspect_refuses_tf1_hints_for_keras3():
    _one_error_line(cli("inspect", K3 / "mixed.keras", "--num-units", "3"), 2,
                    "--num-units does not apply to a Keras 3 file")


def test_convert_refuses_options_a_keras3_file_cannot_use(tmp_path):
    _one_error_line(cli("convert", K3 / "mixed.keras", tmp_path / "o.keras", "--initial-state"), 2, "--initial-state")
    _one_error_line(cli("convert", K3 / "mixed.keras", tmp_path / "o.keras", "--config", K3 / "mixed.config.json"),
                    2, "--config does not apply")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # imports Keras (verify builds its environment before it reads the input)
def test_verify_keras3_is_one_line():
    _one_error_line(cli("verify", K3 / "mixed.keras"), 2, "already a Keras 3 file", "nothing to verify")


@pytest.mark.slow  # two real conversions (~20 s each on the shared 2-core machine)
def test_converted_outputs_say_they_run_on_cudnn(tmp_path):
    res = cli("convert", KERAS / "sequential.h5", tmp_path / "y.keras")
    assert res.exit_code == 0, res.output
    info = json.loads(cli("inspect", tmp_path / "y.keras", "--json").stdout)
    assert info["format"] == "keras3"
    layers = info["cudnn_eligibility"]["layers"]
    assert [e["class"] for e in layers] == ["GRU", "GRU"]
    assert all(v == {"tensorflow": "cudnn", "jax": "fused", "torch": "cudnn"}
               for v in _verdicts(info["cudnn_eligibility"]).values())
    # a weights-only CuDNN file converted to Keras 3 weights, inspected with its tf.keras config
    res = cli("convert", KERAS / "weights_only.h5", tmp_path / "w.weights.h5", "--config", KERAS / "weights_only.json")
    assert res.exit_code == 0, res.output
    res = cli("inspect", tmp_path / "w.weights.h5", "--config", KERAS / "weights_only.json", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)["cudnn_eligibility"]
    assert {v["torch"] for v in _verdicts(rep).values()} == {"cudnn"}
    # and converting the converted file again is a no-op
    res = cli("convert", tmp_path / "y.keras", tmp_path / "z.keras")
    assert res.exit_code == 0 and "already a Keras 3 file" in res.stdout and not (tmp_path / "z.keras").exists()


# --------------------------------------------------------------------------- hostile .keras zips


def _zip(path, members, *, compression=zipfile.ZIP_DEFLATED, modes=None):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members:
            zi = zipfile.ZipInfo(name)
            zi.compress_type = compression
            if modes and name in modes:
                zi.external_attr = modes[name] << 16
            z.writestr(zi, data)
    return path


def _cfg():
    return zipfile.ZipFile(K3 / "eligible.keras").read("config.json")


def _weights():
    return zipfile.ZipFile(K3 / "eligible.keras").read("model.weights.h5")


def _hostile(tmp_path, case) -> Path:
    p = tmp_path / "m.keras"
    good = [("metadata.json", b"{}"), ("config.json", _cfg()), ("model.weights.h5", _weights())]
    if case == "bomb":
        _zip(p, [("config.json", b'{"a": "' + b" " * (50 * 2**20) + b'"}'), ("model.weights.h5", b"")])
    elif case == "symlink":
        _zip(p, good + [("assets/link", b"/etc/passwd")], modes={"assets/link": 0o120777})
    elif case == "absolute":
        _zip(p, good + [("/etc/cron.d/x", b"x")])
    elif case == "dotdot":
        _zip(p, good + [("assets/../../evil.py", b"x")])
    elif case == "truncated":
        _zip(p, good)
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    elif case == "directory_count":
        _zip(p, good)
        raw = bytearray(p.read_bytes())
        at = raw.rfind(b"PK\x05\x06")
        raw[at + 8:at + 12] = struct.pack("<HH", 60000, 60000)  # entries on disk, total
        p.write_bytes(bytes(raw))
    elif case == "directory_outside":
        _zip(p, good)
        raw = bytearray(p.read_bytes())
        at = raw.rfind(b"PK\x05\x06")
        raw[at + 16:at + 20] = struct.pack("<L", len(raw) * 4)  # central directory offset
        p.write_bytes(bytes(raw))
    elif case == "fifo":
        os.mkfifo(p)
    else:
        raise AssertionError(case)
    return p


HOSTILE = {"bomb": "zip bomb", "symlink": "symbolic link", "absolute": "not one Keras writes",
           "dotdot": "not one Keras writes", "truncated": "", "directory_count": "lists 60000 members",
           "directory_outside": "past the end of the file", "fifo": "FIFO"}


@pytest.mark.parametrize("command", ["inspect", "convert"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_keras_zip_is_one_line_exit_3(tmp_path, case, command):
    p = _hostile(tmp_path, case)
    before = sorted(os.listdir(tmp_path))
    argv = [command, p] + ([tmp_path / "out.keras"] if command == "convert" else [])
    line = _one_error_line(cli(*argv), 3, str(p), HOSTILE[case])
    assert len(line) < 400
    assert sorted(os.listdir(tmp_path)) == before  # nothing extracted, nothing written


def test_zip_bomb_is_refused_without_inflating(tmp_path, monkeypatch):
    """The bomb is refused from its declared sizes: no member is ever opened."""
    p = _hostile(tmp_path, "bomb")
    opened = []
    real = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, *a, **k: opened.append(a) or real(self, *a, **k))
    _one_error_line(cli("inspect", p), 3, "zip bomb")
    assert opened == []


def test_directory_bound_is_checked_before_zipfile_parses_it(tmp_path, monkeypatch):
    p = _hostile(tmp_path, "directory_count")
    monkeypatch.setattr(zipfile, "ZipFile", lambda *a, **k: (_ for _ in ()).throw(AssertionError("parsed")))
    from gruconv.files import zips

    with pytest.raises(Exception) as ei:
        zips.read_keras_zip(p)
    assert "lists 60000 members" in str(ei.value)


def test_batch_lists_keras3_files_as_nothing_to_convert(tmp_path):
    """In a batch tree, Keras 3 files are recognised (not failures, as a Keras 3 .weights.h5 was before)
    and nothing is written for them; an .npz beside them is no input at all."""
    import numpy as np

    from gruconv import batch

    tree = tmp_path / "models"
    tree.mkdir()
    for name in ("mixed.keras", "eligible.weights.h5", "mixed.keras3.h5"):
        shutil.copyfile(K3 / name, tree / name)
    np.savez(tree / "arrays.npz", a=np.zeros(2))
    s = batch.convert_many([tree], tmp_path / "out", jobs=1, echo=False)
    got = {Path(r.input).name: (r.status, r.outputs) for r in s.records}
    assert got == {n: ("nothing-to-convert", []) for n in ("mixed.keras", "eligible.weights.h5", "mixed.keras3.h5")}
    written = [p.name for p in (tmp_path / "out").rglob("*")] if (tmp_path / "out").exists() else []
    assert set(written) <= {".gruconv.batch.json"}, written  # batch's own state file, no model


def _as_zip64(src: Path, dst: Path, entries=None) -> Path:
    """``src`` with a zip64 end record and locator before its end record, which then says "see zip64"
    (APPNOTE 4.3.14-16): what a writer emits past 65535 entries or 4 GiB.  ``entries`` overrides
    the zip64 record's member count."""
    raw = src.read_bytes()
    at = raw.rfind(b"PK\x05\x06")
    _, _, _, _, n, cd_size, cd_offset, clen = struct.unpack("<4s4H2LH", raw[at:at + 22])
    n64 = n if entries is None else entries
    rec = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n64, n64, cd_size, cd_offset)
    loc = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, cd_size, 0xFFFFFFFF, 0)
    dst.write_bytes(raw[:at] + rec + loc + end)
    return dst


def test_zip64_end_records_are_read_and_bounded(tmp_path):
    ok = _as_zip64(K3 / "eligible.keras", tmp_path / "z64.keras")
    assert zipfile.ZipFile(ok).namelist()  # Python's own reader accepts the archive
    res = cli("inspect", ok, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["cudnn_eligibility"]["summary"]["torch"]["cudnn"] == 2
    bad = _as_zip64(K3 / "eligible.keras", tmp_path / "z64_many.keras", entries=70000)
    _one_error_line(cli("inspect", bad), 3, "lists 70000 members")
