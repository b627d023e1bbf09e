"""Every argument that names something gruconv writes, pointed where it cannot be written: one line,
exit 3 (an output problem), no traceback, and refused before any work (nothing converted, no output
directory made, nothing half-written).  Before issue 31, ``--report afile/r.json`` (``afile`` a regular
file) converted every model and then ended in a traceback; ``--report DIR`` converted every model and
then refused.

The "parent is a regular file" cases fail for root too (the tests run as root here, so a permission-only
case would pass for the wrong reason); "a directory in place of the file" covers the other shape."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv.cli import main

MODEL = FIXTURES / "keras" / "sequential.h5"

#: case -> the command's arguments (relative to a cwd holding: m/sequential.h5, afile (a regular file),
#: adir/ (an empty directory)); what the one error line must say.
CASES = {
    "batch --report under a file": (["convert", "m", "--out-dir", "out", "--report", "afile/r.json"],
                                    r"--report: 'afile' is not a directory"),
    "batch --report deeper under a file": (["convert", "m", "--out-dir", "out", "--report", "afile/x/r.json"],
                                           r"--report: 'afile' is not a directory"),
    "batch --report is a directory": (["convert", "m", "--out-dir", "out", "--report", "adir"],
                                      r"--report: output path is a directory"),
    "batch --junit under a file": (["convert", "m", "--out-dir", "out", "--junit", "afile/r.xml"],
                                   r"--junit: 'afile' is not a directory"),
    "batch --junit is a directory": (["convert", "m", "--out-dir", "out", "--junit", "adir"],
                                     r"--junit: output path is a directory"),
    "batch --out-dir is a file": (["convert", "m", "--out-dir", "afile"], r"--out-dir exists and is not a directory"),
    "batch --out-dir under a file": (["convert", "m", "--out-dir", "afile/out"],
                                     r"cannot create the output directory \(Not a directory\)"),
    "verify --json under a file": (["verify", "m/sequential.h5", "--device", "cpu", "--json", "afile/r.json"],
                                   r"output directory 'afile' is not a directory"),
    "verify --json is a directory": (["verify", "m/sequential.h5", "--device", "cpu", "--json", "adir"],
                                     r"output path is a directory"),
    "convert OUTPUT under a file": (["convert", "m/sequential.h5", "afile/o.keras"],
                                    r"output directory 'afile' is not a directory"),
    "convert OUTPUT is a directory": (["convert", "m/sequential.h5", "adir", "--format", "keras"],
                                      r"output path is a directory"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_output_that_cannot_be_written_is_refused_before_any_work(case, tmp_path, monkeypatch):
    import re

    monkeypatch.chdir(tmp_path)
    Path("m").mkdir()
    shutil.copyfile(MODEL, "m/sequential.h5")
    Path("afile").write_bytes(b"a regular file\n")
    Path("adir").mkdir()
    before = sorted(str(p) for p in Path(".").rglob("*"))
    args, said = CASES[case]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 3 and isinstance(res.exception, SystemExit), res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gruconv: error: ") and re.search(said, lines[0]), lines
    assert "Traceback" not in res.output and res.stdout == ""   # no conversion ran: no record, no table
    assert sorted(str(p) for p in Path(".").rglob("*")) == before   # nothing made, nothing half-written
    assert Path("afile").read_bytes() == b"a regular file\n"


def test_report_directories_that_do_not_exist_yet_are_still_made(tmp_path, monkeypatch):
    """The check refuses only what cannot work: a report under directories still to be made is written."""
    monkeypatch.chdir(tmp_path)
    Path("m").mkdir()
    shutil.copyfile(MODEL, "m/sequential.h5")
    res = CliRunner().invoke(main, ["convert", "m", "--out-dir", "out", "--jobs", "1",
                                    "--report", "new/sub/r.json", "--junit", "new/r.xml"])
    assert res.exit_code == 0, res.output
    assert Path("new/sub/r.json").is_file() and Path("new/r.xml").is_file()
