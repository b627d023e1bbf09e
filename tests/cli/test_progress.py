"""Progress on long single runs (issue 30, part 6): ``convert`` / ``verify`` draw a ``\\r``-updated
``verify: layer i/n NAME`` line on stderr when it is a terminal (a pty here), and print nothing
extra when it is not (``CliRunner``, pipes)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from conftest import FIXTURES
from gruconv import progress
from gruconv.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"
SEQ = FIXTURES / "keras" / "sequential.h5"


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_no_progress_when_stderr_is_not_a_terminal(tmp_path):
    res = CliRunner().invoke(main, ["verify", str(SEQ), "--reference", "oracle"])
    assert res.exit_code == 0, res.output
    assert "layer 1/" not in res.output and "\r" not in res.output
    res = CliRunner().invoke(main, ["convert", str(SEQ), str(tmp_path / "m.keras")])
    assert res.exit_code == 0, res.output
    assert "layer 1/" not in res.output and "\r" not in res.output


def test_reporter_draws_one_line_and_erases_it():
    progress.step("verify", 1, 2, "x")   # no reporter: nothing, no error
    out = Tty()
    with progress.on_terminal(out):
        progress.step("verify", 1, 2, "enc/gru")
        progress.step("verify", 2, 2, "a\nb\x1b[2J")   # a layer name with control characters
        progress.step("verify", 3, None, "stack")
    text = out.getvalue()
    assert text.startswith("\rverify: layer 1/2 enc/gru") and "\rverify: layer 2/2 a" in text
    assert "\n" not in text and "\x1b" not in text and "verify: layer 3 stack" in text
    assert text.endswith("\r" + " " * len("verify: layer 3 stack") + "\r")   # the last line erased
    plain = io.StringIO()
    with progress.on_terminal(plain):
        progress.step("verify", 1, 2, "enc/gru")
    assert plain.getvalue() == ""


def _on_pty(args: list) -> tuple:
    """(stderr as a terminal saw it, stdout, exit code) of ``python -m gruconv ARGS``."""
    master, slave = os.openpty()
    p = subprocess.Popen([sys.executable, "-m", "gruconv", *args], stdout=subprocess.PIPE, stderr=slave,
                         env=dict(os.environ, PYTHONPATH=str(SRC)))
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:   # EIO: the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    out = p.stdout.read().decode()
    p.wait(timeout=600)
    os.close(master)
    return seen.decode(errors="replace"), out, p.returncode


def test_progress_on_a_terminal(tmp_path):
    err, out, rc = _on_pty(["convert", str(SEQ), str(tmp_path / "m.keras"), "--verify"])
    assert rc == 0, err + out
    assert "\rconvert: layer 1/3 cu_dnngru" in err and "convert: layer 3/3 dense" in err
    assert "\rverify: layer 1/2 cu_dnngru" in err and "\rverify: layer 2/2 cu_dnngru_1" in err
    assert err.endswith("\r") and err.replace("\r", "").strip().count("\n") == 0   # erased, no stray lines
    assert "layer" not in out and "parity: PASS" in out   # stdout (a pipe) untouched
