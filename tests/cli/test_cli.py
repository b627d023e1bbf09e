"""The CLI end to end: through the installed `gruconv` command and through Click's CliRunner."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv import __version__
from gruconv.cli import main

KERAS = FIXTURES / "keras"
GRUCONV = Path(sys.executable).with_name("gruconv")


def run(*args, **kw):
    return subprocess.run([str(GRUCONV), *map(str, args)], capture_output=True, text=True, timeout=300, **kw)


def test_console_script_installed_and_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gruconv, version {__version__}"
    r2 = subprocess.run([sys.executable, "-m", "gruconv", "--version"], capture_output=True, text=True)
    assert r2.stdout == r.stdout


@pytest.mark.parametrize("argv", [["--help"], ["inspect", str(KERAS / "sequential.h5")],
                                  ["inspect", str(KERAS / "sequential.h5"), "--json"]])
def test_help_and_inspect_import_no_framework(argv):
    code = ("import sys, runpy; sys.argv = ['gruconv'] + %r\n"
            "try:\n    runpy.run_module('gruconv', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('HEAVY=' + ','.join(m for m in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules))"
            % (argv,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == "HEAVY=", r.stdout + r.stderr


@pytest.mark.parametrize("command", ["convert", "inspect", "verify"])
def test_every_command_has_help_with_an_example(command):
    res = CliRunner().invoke(main, [command, "--help"])
    assert res.exit_code == 0
    assert "Example" in res.output and f"gruconv {command}" in res.output


def test_inspect_text_output():
    res = CliRunner().invoke(main, ["inspect", str(KERAS / "bidir_sum.h5")])
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0].endswith("bidir_sum.h5: Keras HDF5 model (keras 2.21.0), 2 top-level layer(s)")
    assert lines[1] == ("  bidirectional/cu_dnngru: Bidirectional(CuDNNGRU), input 4, units 5, 1 layer(s), bi, "
                        "linear input, float32, 330 params")
    assert lines[2] == ("    -> Bidirectional(GRU(units=5, activation='tanh', recurrent_activation='sigmoid', "
                        "reset_after=True, return_sequences=True), merge_mode='sum')")


def test_inspect_json_output():
    res = CliRunner().invoke(main, ["inspect", str(KERAS / "sequential.h5"), "--json"])
    info = json.loads(res.output)
    assert info["format"] == "keras-h5" and info["kind"] == "model"
    assert [(r["name"], r["shape"]["units"], r["shape"]["input_size"]) for r in info["rnns"]] == [("cu_dnngru", 8, 6),
                                                                                 ("cu_dnngru_1", 5, 8)]


def test_convert_through_installed_command(tmp_path):
    out = tmp_path / "m.keras"
    r = run("convert", KERAS / "sequential.h5", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"wrote {out}"
    assert r.stderr == ""
    # refusal to overwrite: exit 3, one line, the file untouched
    before = out.read_bytes()
    r = run("convert", KERAS / "sequential.h5", out)
    assert r.returncode == 3
    assert r.stderr == f"gruconv: error: {out}: output exists; pass --force to overwrite it\n"
    assert out.read_bytes() == before
    r = run("convert", KERAS / "sequential.h5", out, "--force")
    assert r.returncode == 0


def test_exit_codes(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(main, ["convert", str(tmp_path / "nope.h5"), str(tmp_path / "o.keras")])
    assert missing.exit_code == 3 and "no such file or directory" in missing.output
    usage = runner.invoke(main, ["convert", str(KERAS / "sequential.h5")])
    assert usage.exit_code == 2
    bad_opt = runner.invoke(main, ["verify", str(KERAS / "sequential.h5"), "--reference", "gpu"])
    assert bad_opt.exit_code == 2
    text = tmp_path / "notes.h5"
    text.write_text("not a model")
    r = runner.invoke(main, ["inspect", str(text)])
    assert r.exit_code == 3 and "not a Keras HDF5 file nor a TensorFlow checkpoint" in r.output


def test_no_partial_file_after_a_failure(tmp_path):
    """A conversion that fails late (after reading) leaves nothing at the output path, and no temp files."""
    src = tmp_path / "broken.h5"
    shutil.copy(KERAS / "sequential.h5", src)
    import h5py

    with h5py.File(src, "r+") as f:  # a weight shape that contradicts units: fails in the reader
        g = f["model_weights/cu_dnngru/cu_dnngru"]
        data = g["bias:0"][()]
        del g["bias:0"]
        g["bias:0"] = data[:-1]
    out = tmp_path / "out" / "m.keras"
    out.parent.mkdir()
    r = run("convert", src, out)
    assert r.returncode == 3
    assert len(r.stderr.strip().splitlines()) == 1 and "bias" in r.stderr
    assert list(out.parent.iterdir()) == []


def test_output_parent_missing(tmp_path):
    res = CliRunner().invoke(main, ["convert", str(KERAS / "sequential.h5"), str(tmp_path / "a" / "b.keras")])
    assert res.exit_code == 3 and "does not exist" in res.output


def test_nothing_to_convert_message():
    res = CliRunner().invoke(main, ["convert", str(KERAS / "plain_gru.h5"), "/nonexistent-dir/x.keras"])
    assert res.exit_code == 0
    assert "nothing to convert" in res.output


def test_convert_with_verify(tmp_path):
    res = CliRunner().invoke(main, ["convert", str(KERAS / "go_backwards.h5"), str(tmp_path / "g.keras"),
                                    "--verify"])
    assert res.exit_code == 0, res.output
    assert "parity: PASS" in res.output
