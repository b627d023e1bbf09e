"""Bounded runs of a user's graph (:mod:`gruconv.tf.bounded`, issue 45 item 4).

Hostile graphs beside a real ``CudnnRNN`` node (``fixtures/graphs_hostile``, ``fixtures/make_hostile_graph_fixtures.py``):
an endless ``tf.while_loop``, a 100 GB ``Fill``, an assertion that fails on every input.  Each is one line, exit 3,
nothing written, the input untouched, no temporary left, with small budgets (5 s, 2 GiB) so the tier stays quick.
The runner itself is checked on plain functions (no TensorFlow imported in the child): the memory watchdog, the
time budget, a crash, a bug, a gruconv error carried back whole.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv.cli import main as cli
from gruconv.errors import InputError, UnsupportedError
from gruconv.options import Budget
from gruconv.tf import bounded

HOSTILE = FIXTURES / "graphs_hostile"
SMALL = ["--graph-timeout", "5", "--graph-memory", "2"]


def _digest(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """``$TMPDIR`` of the run: empty afterwards, whatever happened."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _one_line_exit_3(r, text: str) -> None:
    assert r.exit_code == 3, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gruconv: error: ") and text in lines[0], r.output


#: graph -> the line a SavedModel output of it ends with
SAVED_MODEL_CASES = {
    "endless_loop": "the graph did not finish on probe inputs within 2 s (--graph-timeout SECONDS raises the budget); "
                    "nothing written",
    "huge_fill": "the graph needed more than 2 GiB on probe inputs (--graph-memory GIB raises the bound); nothing written",
    "asserts": "the converted SavedModel does not serve on a CPU (InvalidArgumentError: assertion failed",
}


@pytest.mark.parametrize("name", sorted(SAVED_MODEL_CASES))
def test_a_hostile_graph_to_a_saved_model_is_one_line_exit_3(name, tmp_path, private_tmp):
    before = _digest(HOSTILE / name)
    out = tmp_path / "out"
    # the endless loop always ends by its budget, so 2 s proves the same as 5 (the others need 5 on a loaded machine)
    bounds = ["--graph-timeout", "2", "--graph-memory", "2"] if name == "endless_loop" else SMALL
    r = CliRunner().invoke(cli, ["convert", str(HOSTILE / name), str(out), *bounds])
    _one_line_exit_3(r, SAVED_MODEL_CASES[name])
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]
    assert list(private_tmp.iterdir()) == []
    assert _digest(HOSTILE / name) == before


@pytest.mark.slow  # a TensorFlow child each (~15-25 s on a loaded 2-core machine)
@pytest.mark.parametrize("name,output,text", [
    ("endless_loop", "m.keras", "the graph did not finish on probe inputs within 5 s"),  # the params' evaluation
    ("huge_fill", "m.keras", "the graph needed more than 2 GiB on probe inputs"),
    ("huge_fill", "m.onnx", "the graph needed more than 2 GiB on probe inputs"),  # tf2onnx's constant folding
])
def test_a_hostile_graph_to_other_outputs_is_one_line_exit_3(name, output, text, tmp_path, private_tmp):
    r = CliRunner().invoke(cli, ["convert", str(HOSTILE / name), str(tmp_path / output), *SMALL])
    _one_line_exit_3(r, text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"] and list(private_tmp.iterdir()) == []


@pytest.mark.slow  # a TensorFlow child (~10 s)
def test_a_graph_tensorflow_cannot_load_is_exit_3_on_the_params_route(tmp_path, private_tmp):
    """make fuzz (seed 1729, tf-graph case 2540): one byte of ``asserts/saved_model.pb`` set to 87 renames a
    node input in the function library (``While_prefix`` -> ``Wile_prefix``); gruconv's reader reads only the
    fields it needs and accepts it, TensorFlow's loader raises a bare ``KeyError`` in the params' child, which
    was exit 4 (a RuntimeError carried back)."""
    src = tmp_path / "damaged"
    (src / "variables").mkdir(parents=True)
    for p in (HOSTILE / "asserts").rglob("*"):
        if p.is_file():
            (src / p.relative_to(HOSTILE / "asserts")).write_bytes(p.read_bytes())
    pb = bytearray((src / "saved_model.pb").read_bytes())
    pb[13177] = 87
    (src / "saved_model.pb").write_bytes(bytes(pb))
    r = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "m.keras"), *SMALL])
    _one_line_exit_3(r, "is a SavedModel TensorFlow cannot load (KeyError:")
    assert not (tmp_path / "m.keras").exists() and list(private_tmp.iterdir()) == []


@pytest.mark.slow
def test_verify_of_a_hostile_graph_is_bounded_too(tmp_path, private_tmp):
    r = CliRunner().invoke(cli, ["verify", str(HOSTILE / "endless_loop"), *SMALL])
    assert r.exit_code == 3 and "did not finish" in r.output, r.output
    assert list(private_tmp.iterdir()) == []


# --------------------------------------------------------------------------- the runner, on plain functions

def test_a_child_past_the_memory_bound_is_killed_and_said_so(private_tmp):
    """3 GiB touched page by page against a 1 GiB bound: the resident-set watchdog (the address-space limit is
    the bound plus a headroom, so this allocation is allowed and only the watchdog can stop it)."""
    with pytest.raises(UnsupportedError, match=r"the graph needed more than 1 GiB on probe inputs \(--graph-memory"):
        bounded.run(np.ones, 3 * 2**30, np.uint8, budget=Budget(seconds=120, memory=1.0), path="g", imports=())
    assert list(private_tmp.iterdir()) == []


def test_a_child_past_the_time_budget_is_killed_and_said_so(private_tmp):
    t0 = time.monotonic()
    with pytest.raises(UnsupportedError, match=r"^g: the graph did not finish on probe inputs within 1 s"):
        bounded.run(time.sleep, 600, budget=Budget(seconds=1.0), path="g", imports=())
    assert time.monotonic() - t0 < 300  # not the sleep's 600 s (the start of a fresh interpreter aside)


def test_a_gruconv_error_in_the_child_comes_back_whole(private_tmp):
    from gruconv.readers import tfgraph

    with pytest.raises(InputError) as e:
        bounded.run(tfgraph.read, Path("/nonexistent/g.txt"), imports=())
    assert e.value.message == "is not a SavedModel directory nor a .pb/.pbtxt graph"
    assert e.value.path == "/nonexistent/g.txt"


def test_a_bug_in_the_child_is_not_a_gruconv_error(private_tmp):
    """Exit 4 material: a ``RuntimeError`` naming the child's exception, its traceback as a note."""
    with pytest.raises(RuntimeError, match=r"ValueError: invalid literal for int\(\) .* \(in the child process") as e:
        bounded.run(int, "x", imports=())
    assert any("Traceback" in n for n in e.value.__notes__)


def test_a_child_that_crashes_is_one_line(private_tmp):
    with pytest.raises(UnsupportedError, match=r"TensorFlow crashed running the graph on probe inputs \(signal SIGABRT\)"):
        bounded.run(os.abort, imports=())
    assert list(private_tmp.iterdir()) == []


def test_the_child_s_temporary_files_are_removed(private_tmp):
    made = Path(bounded.run(tempfile.mkdtemp, imports=()))
    assert made.parent.parent == private_tmp and not made.exists()
    assert list(private_tmp.iterdir()) == []


def test_the_child_imports_tensorflow_without_jax():
    """``import tensorflow`` imports JAX through tf.lite when it is installed (0.75 s of a child's start); the
    child blocks it (``bounded._without_jax``) and TensorFlow still imports."""
    said = bounded.run(eval, "(repr(__import__('sys').modules.get('jax', 'absent')), "
                             "'tensorflow' in __import__('sys').modules)", imports=("tensorflow",))
    assert said == ("None", True), said


def test_under_keras_backend_jax_the_child_may_import_jax(monkeypatch):
    """Verify's graph rows run Keras on the chosen backend in the child: under ``KERAS_BACKEND=jax`` blocking JAX
    made ``verify GRAPH OUT`` an internal error (session 52's review)."""
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    said = bounded.run(eval, "repr(__import__('sys').modules.get('jax', 'absent'))", imports=())
    assert said == "'absent'", said


def test_the_budget_refuses_what_is_no_bound():
    from gruconv.errors import UsageError

    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="--graph-timeout must be a number > 0"):
            Budget.of(seconds=bad)
    assert Budget.of() == Budget(300.0, 8.0)


# --------------------------------------------------------------------------- a kept child (reuse=True)

@pytest.fixture
def no_kept_child():
    """No child kept before or after the test (another test's would serve this one's first run).  The zygotes stay:
    a child forked from one has run nothing, and ending them would cost the worker's next graph run a TensorFlow
    import."""
    bounded.release(zygote=False)
    yield
    bounded.release(zygote=False)


def _pid(**kw):
    return bounded.run(os.getpid, imports=(), **kw)


def test_a_kept_child_serves_the_next_run_and_a_plain_run_never_keeps_one(private_tmp, no_kept_child):
    """``reuse=True``: the second run is the same child (no interpreter started again); without it, every run its
    own child, and none is left running afterwards."""
    first = _pid(reuse=True)
    assert _pid(reuse=True) == first and Path(f"/proc/{first}").exists()
    plain = [_pid(), _pid()]
    assert len({first, *plain}) == 3
    assert not any(Path(f"/proc/{p}").exists() for p in plain)
    assert _pid(reuse=True) == first  # a writer's fresh runs between leave the kept child to the next one
    assert list(private_tmp.iterdir()) == []


def test_what_importing_tensorflow_sets_in_the_parent_keeps_the_child(private_tmp, no_kept_child, monkeypatch):
    """``convert GRAPH out --verify`` evaluates the graph's params, then imports TensorFlow and Keras in the parent,
    which sets variables (``TF2_BEHAVIOR``, ``KERAS_BACKEND=tensorflow``, ...) the child set on its own import:
    verify's run is still served by the same child (measured: it started a second one before)."""
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    first = _pid(reuse=True)
    for name, value in (("TF2_BEHAVIOR", "1"), ("ENABLE_RUNTIME_UPTIME_TELEMETRY", "1"), ("HDF5_PLUGIN_PATH", "disable"),
                        ("TF_CPP_MIN_LOG_LEVEL", "3"), ("KERAS_BACKEND", "tensorflow")):
        monkeypatch.setenv(name, value)
    assert _pid(reuse=True) == first


def test_a_kept_child_is_retired_after_a_failed_run(private_tmp, no_kept_child):
    """A run that ended in a bug, a crash or past its budget leaves the child in an unknown state: the next run
    gets a new one.  A gruconv error (the user's graph refused in words) keeps it."""
    from gruconv.readers import tfgraph

    first = _pid(reuse=True)
    with pytest.raises(InputError):
        bounded.run(tfgraph.read, Path("/nonexistent/g.txt"), imports=(), reuse=True)
    assert _pid(reuse=True) == first
    with pytest.raises(RuntimeError):
        bounded.run(int, "x", imports=(), reuse=True)
    second = _pid(reuse=True)
    assert second != first and not Path(f"/proc/{first}").exists()
    with pytest.raises(UnsupportedError, match="did not finish on probe inputs within 1 s"):
        bounded.run(time.sleep, 600, budget=Budget(seconds=1.0), imports=(), reuse=True)
    assert _pid(reuse=True, budget=Budget(seconds=1.0)) != second


def test_a_kept_child_keeps_its_bounds(private_tmp, no_kept_child):
    """The memory watchdog and the time budget hold on a child's second run as on its first; the second run's
    temporary files go too."""
    bounded.run(os.getpid, budget=Budget(seconds=120, memory=1.0), imports=(), reuse=True)
    with pytest.raises(UnsupportedError, match=r"the graph needed more than 1 GiB"):
        bounded.run(np.ones, 3 * 2**30, np.uint8, budget=Budget(seconds=120, memory=1.0), imports=(), reuse=True)
    made = Path(bounded.run(tempfile.mkdtemp, imports=(), reuse=True))
    assert made.parent.parent == private_tmp and not made.exists()
    assert list(private_tmp.iterdir()) == []


def test_a_kept_child_that_died_meanwhile_is_replaced_unseen(private_tmp, no_kept_child):
    """Killed while idle (the OOM killer, a user's ``kill``): the next run starts a new child and succeeds."""
    import signal

    first = _pid(reuse=True)
    os.kill(first, signal.SIGKILL)
    time.sleep(0.2)
    assert _pid(reuse=True) not in (first, None)


def test_a_changed_environment_or_bound_gets_a_new_child(private_tmp, no_kept_child, monkeypatch):
    """``KERAS_BACKEND`` and the like are read once at import: a run under another environment, or another memory
    bound (the child's ``RLIMIT_AS``), is not served by a child started under the old one."""
    first = _pid(reuse=True)
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    second = _pid(reuse=True)
    assert second != first
    assert _pid(reuse=True, budget=Budget(memory=2.0)) != second


def test_a_forked_process_does_not_use_its_parent_s_kept_child(private_tmp, no_kept_child):
    """A fork (``multiprocessing``'s default on Linux) inherits the kept child's pipes: it starts its own child,
    and the parent's still serves the parent."""
    first = _pid(reuse=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked copy
        try:
            os.write(w, str(_pid(reuse=True)).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    got = int(os.read(r, 64) or b"0")
    os.close(r)
    assert got not in (0, first)
    assert _pid(reuse=True) == first


# --------------------------------------------------------------------------- the zygote

def test_runs_are_forked_from_one_zygote_that_imported_tensorflow(private_tmp, no_kept_child):
    """Every child (a writer's fresh one, a kept one) is a fork of one zygote interpreter that imported TensorFlow
    once: the second fresh child starts without importing it again (measured: 3.7 s for the first run, 0.04 s for
    the next), TensorFlow is in the child before its work begins, and no child outlives its run."""
    def facts():
        return bounded.run(_facts, imports=("tensorflow",))

    first, second = facts(), facts()
    zygote = first["parent"]
    assert second["parent"] == zygote != os.getpid() and first["pid"] != second["pid"]
    assert first["tensorflow"] and second["tensorflow"]
    kept = bounded.run(_facts, imports=("tensorflow",), reuse=True)
    assert kept["parent"] == zygote
    plain = bounded.run(_facts, imports=())  # another key's zygote beside it (MAX_ZYGOTES) leaves this one be
    assert plain["parent"] not in (zygote, os.getpid())
    assert bounded.run(_facts, imports=("tensorflow",))["parent"] == zygote
    assert not any(Path(f"/proc/{f['pid']}").exists() for f in (first, second))
    assert list(private_tmp.iterdir()) == []


def test_a_zygote_that_died_is_replaced_unseen(private_tmp, no_kept_child):
    """The zygote killed while idle (a user's ``kill``, the OOM killer): its kept child goes with it, and the next
    run starts both anew and succeeds."""
    kept = bounded.run(_facts, imports=(), reuse=True)
    os.kill(kept["parent"], 9)
    time.sleep(0.5)
    again = bounded.run(_facts, imports=(), reuse=True)
    assert again["parent"] not in (kept["parent"], os.getpid()) and again["pid"] != kept["pid"]
    assert not _running(kept["pid"])


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (not gone, not a zombie: an orphan's zombie stays where init does not reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _facts() -> dict:
    import sys

    return {"pid": os.getpid(), "parent": os.getppid(), "tensorflow": "tensorflow" in sys.modules}


def test_a_zygote_that_may_not_fork_serves_one_run_itself(private_tmp, no_kept_child):
    """A zygote with a second thread after its imports (``tests/starts_a_thread.py``) does not fork (a fork copies
    one thread; a lock another held stays held): it runs the work itself, as a fresh interpreter did before the
    zygote, and the next run gets a new one."""
    first = bounded.run(_facts, imports=("starts_a_thread",))
    second = bounded.run(_facts, imports=("starts_a_thread",))
    assert first["parent"] == second["parent"] == os.getpid() and first["pid"] != second["pid"]
    assert not any(key[0] == ("starts_a_thread",) for key in bounded._zygotes)
    assert not Path(f"/proc/{first['pid']}").exists()


def test_fork_safety_is_one_thread_and_no_cuda_driver_initialized():
    """:func:`gruconv.tf.bounded._fork_safe` in a fresh interpreter: one thread, safe; a second thread, not.  (A
    CUDA driver initialized before the fork is the GPU tier's test, ``test_fork_safety_sees_cuda_initialized``.)"""
    import subprocess
    import sys

    code = ("from gruconv.tf.bounded import _fork_safe; import threading, time; a = _fork_safe(); "
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); print(a, _fork_safe())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}).stdout.split()
    assert out == ["True", "False"]


@pytest.mark.gpu
def test_fork_safety_sees_cuda_initialized():
    """On a machine with an NVIDIA driver: before ``cuInit`` a fork is safe, after it not (the child's CUDA would
    fail with ``CUDA_ERROR_NOT_INITIALIZED``; tensorflow/tensorflow#57877).  Run where the driver is: the GPU tier."""
    import subprocess
    import sys

    code = ("import ctypes; from gruconv.tf.bounded import _fork_safe; a = _fork_safe(); "
            "assert ctypes.CDLL('libcuda.so.1').cuInit(0) == 0; print(a, _fork_safe())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}).stdout.split()
    assert out == ["True", "False"]


@pytest.mark.slow  # 4 writes and a gruconv process; the quick tier's test_runs_are_forked_from_one_zygote_... keeps the
# fork itself quick, and every graph writer test of the quick tier writes from a fork
def test_a_writer_s_bytes_from_a_forked_child_are_a_fresh_interpreter_s(tmp_path, private_tmp, no_kept_child):
    """The reason a writer never reuses a child, and why a fork of the zygote is as good as a new interpreter: the
    SavedModel writer's output is byte for byte the same from two forked children of one zygote and from a
    ``gruconv`` process of its own (a new zygote), while a child that wrote once before writes other bytes (its
    function names count up)."""
    import subprocess
    import sys

    from gruconv.readers import tfgraph
    from gruconv.tf.rewrite import written

    source = FIXTURES / "graphs" / "frozen_gru.pb"
    graph = tfgraph.read(source).document().tf_graph
    outs = [tmp_path / n for n in ("a", "b", "kept1", "kept2")]
    for out in outs[:2]:
        bounded.run(written, graph, out, out)
    for out in outs[2:]:
        bounded.run(written, graph, out, out, reuse=True)
    cli = tmp_path / "cli"
    gruconv = Path(sys.executable).with_name("gruconv")
    subprocess.run([str(gruconv), "convert", str(source), str(cli), "--format", "saved-model"], check=True,
                   capture_output=True, env={k: v for k, v in os.environ.items() if k != "TMPDIR"})
    a = _digest(outs[0])
    assert a and _digest(outs[1]) == a == _digest(cli) == _digest(outs[2])
    assert _digest(outs[3]) != a


def test_a_run_sees_the_parent_s_working_directory_now(tmp_path, monkeypatch, no_kept_child):
    """A zygote or a kept child started in another directory: each run takes the parent's working directory of the
    moment (found by the slow tier: ``convert DIR --out-dir`` of relative paths after a ``chdir``, and the README's
    ``convert fixtures/graphs/keras3_export cpu_model``, read their inputs from the zygote's directory and failed)."""
    bounded.run(os.getcwd, imports=(), reuse=True)  # a zygote and a kept child, started here
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        monkeypatch.chdir(tmp_path / d)
        assert bounded.run(os.getcwd, imports=()) == str(tmp_path / d)
        assert bounded.run(os.getcwd, imports=(), reuse=True) == str(tmp_path / d)


def test_a_changed_tmpdir_keeps_the_zygote_and_the_kept_child(tmp_path, monkeypatch, no_kept_child):
    """Every run sets its own ``TMPDIR`` (the scratch directory the parent made for it), so a caller's changed
    ``TMPDIR`` is no reason for a new zygote or child (test_bounded's fixture changes it for every test: each
    started a zygote importing TensorFlow); the run's temporary files still land under the caller's new one."""
    first = bounded.run(_facts, imports=(), reuse=True)
    for d in ("t1", "t2"):
        (tmp_path / d).mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / d))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / d))
        assert bounded.run(_facts, imports=(), reuse=True) == first
        assert bounded.run(_facts, imports=())["parent"] == first["parent"]
        made = Path(bounded.run(tempfile.mkdtemp, imports=(), reuse=True))
        assert made.parent.parent == tmp_path / d


def test_a_run_in_another_thread_has_its_own_zygote(private_tmp, no_kept_child):
    """The kept zygote's socket carries one request at a time: a run from a thread other than the main one gets a
    zygote of its own (ended after the run: its parent-death signal is that thread's), and the main thread's stays."""
    import threading

    kept = bounded.run(_facts, imports=())
    got = {}
    t = threading.Thread(target=lambda: got.update(bounded.run(_facts, imports=())))
    t.start()
    t.join(120)
    assert got and got["parent"] not in (kept["parent"], os.getpid()) and not _running(got["parent"])
    assert bounded.run(_facts, imports=())["parent"] == kept["parent"]
