"""Exit 4: any exception that is not a GruconvError is a bug, reported as one line and exit 4 (never
Python's traceback and exit 1, the parity-failure code); ``--debug`` / ``GRUCONV_DEBUG=1`` add the
traceback.  Each case plants a RuntimeError in a reader, a writer (after its bytes are written) or
verify, and checks the code, the line, the traceback's absence or presence, and that nothing is left
at the output path or beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, ROOT
from gruconv.cli import main
from gruconv.errors import InternalError

MODEL = FIXTURES / "keras" / "sequential.h5"
LINE = ("gruconv: internal error: RuntimeError: planted bug; rerun with --debug for the traceback, "
        "and please report it")
DEBUG_LINE = "gruconv: internal error: RuntimeError: planted bug; see the traceback above, and please report it"


def _boom(*args, **kwargs):
    raise RuntimeError("planted bug\nsecond line of the message")


#: where the bug is planted -> the command that reaches it (OUT: the output path)
PLANTS = {
    "reader": ("gruconv.readers.keras_h5", "read", ["convert", str(MODEL), "OUT"]),
    "writer": ("gruconv.keras3.archive", "self_check", ["convert", str(MODEL), "OUT"]),
    "inspect": ("gruconv.readers.keras_h5", "inspect", ["inspect", str(MODEL)]),
    "verify": ("gruconv.verify", "verify", ["verify", str(MODEL), "--json", "OUT"]),
    "batch-driver": ("gruconv.batch", "discover_all", ["convert", str(MODEL), "--out-dir", "OUT"]),
}


def _plant(monkeypatch, where: str) -> list:
    import importlib

    module, name, args = PLANTS[where]
    monkeypatch.setattr(importlib.import_module(module), name, _boom)
    return args


def _run(tmp_path, args, *front):
    out = tmp_path / "out" / "model.keras"
    out.parent.mkdir()
    res = CliRunner().invoke(main, [*front, *[str(out) if a == "OUT" else a for a in args]])
    return res, out


@pytest.mark.parametrize("where", sorted(PLANTS))
def test_a_bug_is_one_line_and_exit_4(where, tmp_path, monkeypatch):
    monkeypatch.delenv(InternalError.DEBUG_ENV, raising=False)
    res, out = _run(tmp_path, _plant(monkeypatch, where))
    assert res.exit_code == InternalError.exit_code == 4 and isinstance(res.exception, SystemExit)
    assert res.stderr.splitlines() == [LINE]
    assert "Traceback" not in res.output
    assert list(out.parent.iterdir()) == []   # nothing at the output path, no temporary file beside it


@pytest.mark.parametrize("where", ["reader", "writer", "verify"])
@pytest.mark.parametrize("how", ["--debug first", "--debug after", "GRUCONV_DEBUG=1"])
def test_debug_adds_the_traceback(where, how, tmp_path, monkeypatch):
    args = _plant(monkeypatch, where)
    front = []
    if how == "--debug first":
        front = ["--debug"]
    elif how == "--debug after":
        args = [args[0], "--debug", *args[1:]]
    else:
        monkeypatch.setenv(InternalError.DEBUG_ENV, "1")
    res, out = _run(tmp_path, args, *front)
    assert res.exit_code == 4 and isinstance(res.exception, SystemExit)
    err = res.stderr.splitlines()
    assert err[0] == "Traceback (most recent call last):" and err[-1] == DEBUG_LINE
    assert "RuntimeError: planted bug" in res.stderr and "_boom" in res.stderr
    assert list(out.parent.iterdir()) == []


def test_debug_env_zero_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv(InternalError.DEBUG_ENV, "0")
    res, _ = _run(tmp_path, _plant(monkeypatch, "reader"))
    assert res.exit_code == 4 and res.stderr.splitlines() == [LINE]


def test_user_errors_and_click_exits_keep_their_codes(tmp_path):
    """The catch-all is for bugs only: a GruconvError is still its own code, --help/--version 0."""
    r = CliRunner()
    assert r.invoke(main, ["--help"]).exit_code == 0
    assert r.invoke(main, ["--version"]).exit_code == 0
    assert r.invoke(main, ["convert", "--help"]).exit_code == 0
    missing = r.invoke(main, ["inspect", str(tmp_path / "missing.h5")])
    assert missing.exit_code == 3 and "internal error" not in missing.stderr
    usage = r.invoke(main, ["convert", str(MODEL)])
    assert usage.exit_code == 2 and "internal error" not in usage.stderr


def test_message_without_text_and_with_control_characters():
    assert InternalError.describe(RuntimeError()) == "RuntimeError"
    assert InternalError.describe(KeyError("a\x1bb")) == "KeyError: 'a\\x1bb'"
    assert "\n" not in InternalError.line(ValueError("x\ny"))


_SCRIPT = """
import sys
import gruconv.readers.keras_h5 as reader
def boom(*a, **k):
    raise RuntimeError("planted bug")
reader.read = boom
sys.argv = ["gruconv"] + sys.argv[1:]
from gruconv.entry import main
main()
"""


@pytest.mark.parametrize("debug", ["none", "--debug", "GRUCONV_DEBUG=1"])
def test_real_process_exit_code_and_stderr(debug, tmp_path):
    """Through :func:`gruconv.entry.main` in a real process: the exit status the shell sees, the real
    stderr (before the fix: Python's traceback and exit 1)."""
    env = {k: v for k, v in os.environ.items() if k != InternalError.DEBUG_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    front = []
    if debug == "--debug":
        front = ["--debug"]
    elif debug != "none":
        env[InternalError.DEBUG_ENV] = "1"
    out = tmp_path / "out" / "model.keras"
    out.parent.mkdir()
    p = subprocess.run([sys.executable, "-c", _SCRIPT, *front, "convert", str(MODEL), str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 4, p.stderr
    if debug == "none":
        assert p.stderr.splitlines() == [LINE]
    else:
        assert p.stderr.startswith("Traceback (most recent call last):")
        assert p.stderr.splitlines()[-1] == DEBUG_LINE
    assert p.stdout == "" and list(out.parent.iterdir()) == []


def test_entry_main_catches_a_bug_outside_the_command(monkeypatch, capsys):
    """:func:`gruconv.entry.main` is the last net: a bug that escapes Click (here: importing the CLI
    fails) is still the one line and exit 4."""
    from gruconv import entry

    monkeypatch.delenv(InternalError.DEBUG_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["gruconv", "inspect", str(MODEL)])
    monkeypatch.setitem(sys.modules, "gruconv.cli", None)   # "import gruconv.cli" raises ImportError
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as ex:
            entry.main()
    finally:
        for s, h in saved.items():   # entry.main installs gruconv's handlers for the process
            signal.signal(s, h)
    assert ex.value.code == 4
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("gruconv: internal error: ModuleNotFoundError: import of gruconv.cli")


def test_assert_parity_failure_rejects_a_crash_that_exits_1():
    """The helper every exit-1 test uses: a command that crashes also "exits 1" under CliRunner and in
    a real process; the helper must tell that from a parity failure."""
    import click

    from conftest import assert_parity_failure

    @click.command()
    def crashes():
        raise ZeroDivisionError("not a parity failure")

    res = CliRunner().invoke(crashes, [])
    assert res.exit_code == 1
    with pytest.raises(AssertionError, match="an exception escaped"):
        assert_parity_failure(res)
    p = subprocess.run([sys.executable, "-c", "1/0"], capture_output=True, text=True)
    assert p.returncode == 1
    with pytest.raises(AssertionError):
        assert_parity_failure(p)
    ok = subprocess.CompletedProcess([], 1, "", "gruconv: error: parity FAIL, 1 of 2 checks\n")
    assert_parity_failure(ok)
