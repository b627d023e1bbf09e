"""SIGTERM and SIGINT mid-conversion (issue 23, item 4): cleanup runs and the exit status is 128+signal.

Signals are sent at several moments; whatever the moment, either the conversion had finished (exit 0,
complete output) or it stopped with 143 (SIGTERM) / 130 (SIGINT) -- or, before the handler exists
(interpreter start-up), was killed by the signal -- leaving nothing in ``$TMPDIR``, no traceback, and
in the output directory nothing or (a signal after the output was placed) the complete output.
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

GRUCONV = Path(sys.executable).with_name("gruconv")
SEQ = FIXTURES / "keras" / "sequential.h5"


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_conversion_cleans_up_and_exits_with_the_signal_code(sig, code, tmp_path):
    """Sent at several moments (during imports, while building/saving): either the conversion had
    finished (exit 0, complete output) or it stops with 128+signal, leaving nothing in the output
    directory or ``$TMPDIR``."""
    for delay in (0.3, 1.5, 3.0, 5.0):
        out_dir = tmp_path / f"out{delay}"
        out_dir.mkdir()
        tmpdir = tmp_path / f"tmp{delay}"
        tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(tmpdir), "CUDA_VISIBLE_DEVICES": ""}
        p = subprocess.Popen([str(GRUCONV), "convert", str(SEQ), str(out_dir / "o.keras")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        if p.returncode == 0:
            assert [x.name for x in out_dir.iterdir()] == ["o.keras"]
        else:
            # before the handler is installed (interpreter start-up) the default action kills: -signal
            assert p.returncode in (code, -sig), (delay, p.returncode, err[-2000:])
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
