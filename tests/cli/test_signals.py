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


def _default_sigint() -> None:
    """In the child before exec: SIGINT's default action, as at a terminal.  A test run started in the
    background (``make test &``, ``nohup``) hands its children SIGINT ignored, which gruconv rightly keeps
    ignored (:func:`gruconv.signals.install`): the SIGINT case then waited out its 60 s (seen 2026-12-07)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: The moments a signal is sent at, after gruconv's handlers are in: the quick tier's three cover the imports
#: and the build; the later two (the save, or an already finished run) are the slow tier's, 8 s of sleeping per
#: signal that held a quick worker (issue 47).
EARLY, LATE = (0.0, 0.3, 1.5), (3.0, 5.0)


@pytest.mark.parametrize("sig,code,delays", [
    (signal.SIGTERM, 143, EARLY), (signal.SIGINT, 130, EARLY),
    pytest.param(signal.SIGTERM, 143, LATE, marks=pytest.mark.slow),
    pytest.param(signal.SIGINT, 130, LATE, marks=pytest.mark.slow)])
def test_a_signal_mid_conversion_cleans_up_and_exits_with_the_signal_code(sig, code, delays, tmp_path):
    """Sent at several moments (during imports, while building/saving): either the conversion had
    finished (exit 0, complete output) or it stops with 128+signal, leaving nothing in the output
    directory or ``$TMPDIR``."""
    for delay in delays:
        out_dir = tmp_path / f"out{delay}"
        out_dir.mkdir()
        tmpdir = tmp_path / f"tmp{delay}"
        tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(tmpdir), "CUDA_VISIBLE_DEVICES": ""}
        p = subprocess.Popen([str(GRUCONV), "convert", str(SEQ), str(out_dir / "o.keras")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, preexec_fn=_default_sigint)
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


def _children(pid: int) -> list:
    """The pids descended from ``pid`` (``/proc``): the bounded runs' zygote and the child it forked for the
    graph (:mod:`gruconv.tf.bounded`)."""
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        found = [c for c, parent in parents.items() if parent == p]
        out += found
        todo += found
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the graph's child process through /proc")
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_a_graph_running_forever_and_its_child_within_seconds(sig, code, tmp_path):
    """A SavedModel whose signature loops forever beside a ``CudnnRNN`` node, converted with a budget far beyond the
    test (600 s): the graph runs in a child process (:mod:`gruconv.tf.bounded`), so the signal stops gruconv at once,
    the child with it; nothing is left in the output directory or ``$TMPDIR`` (issue 45: SIGTERM at 120 s did
    not stop the in-process run)."""
    pytest.importorskip("tensorflow")
    out, tmpdir = tmp_path / "out", tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir), "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.Popen([str(GRUCONV), "convert", str(FIXTURES / "graphs_hostile" / "endless_loop"), str(out),
                          "--graph-timeout", "600"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL, preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 180
        while not [c for c in _children(p.pid) if "gruconv-graph-run-" in " ".join(
                str(x) for x in Path(tmpdir).iterdir())] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _children(p.pid) and p.poll() is None, "the graph's child process never started"
        time.sleep(2.0)  # the zygote importing TensorFlow or its child inside the graph: either way it must stop
        children = _children(p.pid)
        p.send_signal(sig)
        sent = time.monotonic()
        _, err = p.communicate(timeout=60)
        stopped = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert stopped < 30, stopped  # seconds, not the graph's 600 s budget (typically well under one)
    time.sleep(0.5)
    assert not any(Path(f"/proc/{c}").exists() and "Z" not in Path(f"/proc/{c}/stat").read_text().split(")")[1][:3]
                   for c in children), "the graph's child outlived gruconv"
    assert not out.exists() and list(tmpdir.iterdir()) == []
