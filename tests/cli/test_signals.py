"""SIGTERM and SIGINT mid-conversion (issue 23, item 4): cleanup runs and the exit status is 128+signal.

Signals are sent at several moments after gruconv's handlers exist (the first lines of the console
command, :mod:`gruconv.entry`); whatever the moment, either the conversion had finished (exit 0,
complete output) or it stopped with 143 (SIGTERM) / 130 (SIGINT), leaving nothing in ``$TMPDIR``, no
traceback, and in the output directory nothing or (a signal after the output was placed) the complete
output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES

GRUCONV = Path(sys.executable).with_name("gruconv")  # the installed console command (gruconv.entry:main)
SEQ = FIXTURES / "keras" / "sequential.h5"


def _wait_for_handlers(pid: int, limit: float = 60.0) -> None:
    """Until process ``pid`` catches SIGTERM (its ``SigCgt`` mask in ``/proc``): gruconv's handlers are
    installed by the first lines of the console command (:mod:`gruconv.entry`); before that the
    process is the Python interpreter starting up, whose own SIGINT reaction (a ``KeyboardInterrupt``
    traceback) is not gruconv's to change.  Timing from this moment keeps the test meaning the same on
    a loaded machine, where start-up alone took over 0.3 s (a load average of 10)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return  # already gone: the caller sees its exit status
        caught = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
        if caught >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.005)
    raise AssertionError(f"gruconv did not install its signal handlers within {limit} s")


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_conversion_cleans_up_and_exits_with_the_signal_code(sig, code, tmp_path):
    """Sent at several moments (during imports, while building/saving): either the conversion had
    finished (exit 0, complete output) or it stops with 128+signal, leaving nothing in the output
    directory or ``$TMPDIR``."""
    for delay in (0.0, 0.3, 1.5, 3.0, 5.0):
        out_dir = tmp_path / f"out{delay}"
        out_dir.mkdir()
        tmpdir = tmp_path / f"tmp{delay}"
        tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(tmpdir), "CUDA_VISIBLE_DEVICES": ""}
        p = subprocess.Popen([str(GRUCONV), "convert", str(SEQ), str(out_dir / "o.keras")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
        _wait_for_handlers(p.pid)
        time.sleep(delay)
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        if p.returncode == 0:
            assert [x.name for x in out_dir.iterdir()] == ["o.keras"]
        else:
            assert p.returncode == code, (delay, p.returncode, err[-2000:])
            assert "Traceback" not in err, err[-2000:]
            left = list(out_dir.iterdir())
            # a signal after the output was put in place (printing, exiting) leaves it there, complete;
            # before that, nothing may be left
            assert left in ([], [out_dir / "o.keras"]), (delay, left)
            if left:
                import zipfile

                with zipfile.ZipFile(left[0]) as z:
                    assert z.testzip() is None
                    assert sorted(z.namelist()) == ["config.json", "metadata.json", "model.weights.h5"]
        assert list(tmpdir.iterdir()) == [], (delay, list(tmpdir.iterdir()))
