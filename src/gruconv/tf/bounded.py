"""Every run of a user's graph, in a child process with a wall-time budget and a memory bound.

Why a child process: a graph is the user's program.  Its signatures may loop forever (a ``tf.while_loop``
whose condition never turns false), allocate without end (a ``Fill`` of a shape from a ``Const``), or crash
TensorFlow.  Run in gruconv's own process, none of that can be stopped: measured before this module (issue
45), ``convert hang/ out --format saved-model`` of a SavedModel holding a ``CudnnRNN`` node and an endless
loop ran past 10 minutes on a full core, and SIGTERM sent at 120 s did not stop it -- a Python signal handler
runs between bytecodes, never while TensorFlow is inside a graph.  A child can be killed whatever it is doing.

What runs here (:func:`run`): the ``saved-model`` writer's rewrite and serve check, the whole-graph ONNX writer
(tf2onnx folds constant subgraphs by running them with TensorFlow), the evaluation of a graph's cuDNN params
for the stacks route, and verify's end-to-end reference.  The child is a fresh interpreter
(``python -c``, the parent's ``sys.path``; not a fork: the parent may hold a TensorFlow runtime already, whose
threads a fork would not carry; not multiprocessing's ``spawn``: it imports the caller's ``__main__`` again, and
a script without a main guard would start itself over).  It reads its work pickled on stdin, imports TensorFlow
quietly, says it is ready, then runs the function; its stdout and stderr go to a log in its scratch directory
(TensorFlow's C++ lines; the outcome comes back through a pipe).

The bounds (:class:`gruconv.options.Budget`, ``--graph-timeout``/``--graph-memory``; defaults 300 s, 8 GiB):

* **time**: the budget counts from the child's "ready" (TensorFlow imported: 3-20 s here, depending on the
  machine's load, which is not the graph's doing); the start itself may take up to :data:`START_SECONDS`.
  Past it the child is killed (SIGKILL: TensorFlow in a graph cannot run a handler) and the run is one line,
  exit 3: "the graph did not finish on probe inputs within 300 s".
* **memory**: the parent polls the child's resident set (``/proc/PID/status`` ``VmRSS``) every
  :data:`POLL_SECONDS` and kills it past the bound; and the child's address space is limited to the bound plus
  :data:`ADDRESS_HEADROOM` (``RLIMIT_AS``), so an allocation far past the bound fails at once inside TensorFlow
  (``ResourceExhaustedError: OOM when allocating ...``) instead of being tried.  Why both: measured here
  (TensorFlow 2.21, 2 cores), TensorFlow's address space after import is 1.7 GB and 2.1 GB after a first op
  (thread stacks, allocator arenas: more with more cores) while its resident set is 0.7 GB; an ``RLIMIT_AS`` of
  the bound alone would refuse TensorFlow's start on a machine of many cores, while a resident-set watchdog alone
  lets one huge ``Fill`` be tried (overcommit hands out the pages, and filling 12 GB took the resident set to
  13.5 GB before it finished).  Under a 4 GiB or 8 GiB ``RLIMIT_AS`` TensorFlow starts and runs, and a ``Fill``
  of 12 GB fails with ``ResourceExhaustedError`` (measured).  Either way: "the graph needed more than 8 GiB
  ...", exit 3.
* **signals**: the parent waits in Python (a poll every :data:`POLL_SECONDS`), so SIGTERM/SIGINT raise
  :class:`gruconv.signals.Interrupted` there at once; the child is killed in the ``finally``.  The child ends
  itself if the parent dies (:func:`gruconv.signals.die_with_parent`) and ignores the terminal's SIGINT (the
  parent decides).  Its temporary files live in a scratch directory the parent made and removes.

Nothing half-written: the callers write into the output transaction's temporary path, which the transaction
removes on any error; the input is only read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

#: How often the parent looks at the child (signals, time, memory).
POLL_SECONDS = 0.05
#: The most the child's start (a fresh interpreter importing TensorFlow) may take before the budget starts.
START_SECONDS = 300.0
#: Address space the child may have beyond the memory bound (TensorFlow's own mappings: 2.1 GB measured).
ADDRESS_HEADROOM = 4 * 2**30
#: The child's stdout and stderr (TensorFlow's log), in the scratch directory.
LOG = "child.log"
#: What TensorFlow logs when an allocation fails (``bfc_allocator.cc``, ``op_kernel.cc``): a run that failed
#: with one of these in its log failed for memory, whatever error its caller made of it (Grappler's constant
#: folding of a huge ``Fill`` surfaces as "Cannot parse tensor from proto").
OOM_LOG = (b"OOM when allocating", b"ran out of memory trying to allocate")
#: What TensorFlow logs before an allocation it may not survive (``cpu_allocator_impl.cc``): a child that then
#: died without a word died of it (measured: Grappler's constant folding of a 100 GB ``Fill`` under the bound,
#: in tf2onnx's loader, ended in a CHECK failure, SIGABRT).
BIG_ALLOCATION_LOG = (b"exceeds 10% of free system memory",)


def _log_says_oom(scratch, crashed: bool = False) -> bool:
    try:
        with open(os.path.join(scratch, LOG), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 2**20))
            tail = f.read()
    except OSError:
        return False
    return any(m in tail for m in OOM_LOG + (BIG_ALLOCATION_LOG if crashed else ()))


def _rss(pid: int):
    """The resident set of process ``pid`` in bytes, or None where ``/proc`` does not tell."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` (or an exception it was raised from or during) is TensorFlow or Python running out of the
    memory the child was given."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryError) or type(e).__name__ == "ResourceExhaustedError" \
                or "OOM when allocating" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


#: True in a child process :func:`run` started: a run inside it (the saved-model writer called by verify's
#: reference) runs in place, under the child's bounds.
_in_child = False


def _main() -> None:
    """The child interpreter's entry (``python -c``): its work, pickled, on stdin; its messages on the pipe whose
    file descriptor is ``argv[1]``."""
    import pickle
    import sys
    from multiprocessing.connection import Connection

    conn = Connection(int(sys.argv[1]), readable=False)
    job = pickle.loads(sys.stdin.buffer.read())
    _child(conn, *job)


def _child(conn, fn, args, memory: int, parent: int, scratch: str, imports: tuple) -> None:
    """The child process: bounds, TensorFlow, ``fn(*args)``, the outcome sent to the parent."""
    import tempfile
    import traceback

    from ..signals import die_with_parent

    global _in_child
    _in_child = True
    die_with_parent(parent)
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch
    # TensorFlow's warnings (an allocation it could not make) go to a log the parent reads; oneDNN's allocator
    # is off: under a memory bound it hung after a failed allocation (measured: past 60 s), TensorFlow's own
    # fails the op at once
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    log = os.open(os.path.join(scratch, LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory + ADDRESS_HEADROOM
        limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)  # a lower limit given us stays
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass  # no RLIMIT_AS here: the resident-set watchdog alone bounds it
    for name in imports:
        try:
            from .runtime import import_quietly

            import_quietly(name)
        except ImportError:
            pass  # ``fn`` says so in its own words
    conn.send(("ready",))
    from ..errors import GruconvError

    try:
        result = fn(*args)
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent, which decides
        if _out_of_memory(e):
            conn.send(("memory",))
        elif isinstance(e, GruconvError):
            conn.send(("error", type(e), e.message, e.path))
        else:
            line = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            conn.send(("bug", f"{type(e).__name__}: {line}" if line else type(e).__name__, traceback.format_exc()))
        return
    conn.send(("ok", result))


def run(fn, *args, budget=None, path=None, doing: str = "on probe inputs", imports: tuple = ("tensorflow",)):
    """``fn(*args)`` run in a child process within ``budget`` (:class:`gruconv.options.Budget`; None: the
    defaults); its result, or its :class:`~gruconv.errors.GruconvError` raised again here.  Past the budget:
    :class:`~gruconv.errors.UnsupportedError` (exit 3), said of ``path`` (the input).  ``fn`` and ``args`` are
    pickled (``fn`` a module-level function).  ``imports``: modules the child imports before the budget starts.
    Inside such a child already: ``fn(*args)`` in place."""
    import pickle
    import subprocess
    import sys
    from multiprocessing.connection import Connection

    if _in_child:
        return fn(*args)

    from ..errors import UnsupportedError
    from ..files.outputs import scratch_dir
    from ..options import Budget

    budget = budget or Budget()
    memory = int(budget.memory * 2**30)
    with scratch_dir(prefix="gruconv-graph-run-") as scratch:
        job = pickle.dumps((fn, args, memory, os.getpid(), str(scratch), tuple(imports)))
        # a fresh interpreter, not multiprocessing's spawn: that one imports the caller's __main__ again (a
        # script without a main guard would start itself over); the child gets this process's sys.path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        read_fd, write_fd = os.pipe()
        receive = Connection(read_fd, writable=False)
        child = None
        try:
            child = subprocess.Popen([sys.executable, "-c", "from gruconv.tf.bounded import _main; _main()",
                                      str(write_fd)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, pass_fds=(write_fd,), env=env, close_fds=True)
            os.close(write_fd)
            write_fd = None
            try:
                child.stdin.write(job)
                child.stdin.close()
            except BrokenPipeError:  # the child died at once: _wait finds it gone
                pass
            message = _wait(child, receive, budget, memory)
        finally:
            if write_fd is not None:
                os.close(write_fd)
            if child is not None:
                if child.poll() is None:
                    child.kill()
                child.wait()
            receive.close()
        if (not message or message[0] != "ok") and _log_says_oom(scratch, crashed=not message):
            message = ("memory",)
    kind = message[0] if message else None
    if kind == "ok":
        return message[1]
    if kind == "error":
        _, cls, text, where = message
        raise cls(text, path=where)
    if kind == "timeout":
        raise UnsupportedError(f"the graph did not finish {doing} within {budget.seconds:g} s (--graph-timeout "
                               "SECONDS raises the budget); nothing written", path=path)
    if kind == "memory":
        raise UnsupportedError(f"the graph needed more than {budget.memory:g} GiB {doing} (--graph-memory GIB "
                               "raises the bound); nothing written", path=path)
    if kind == "bug":
        err = RuntimeError(f"{message[1]} (in the child process that runs the graph)")
        err.add_note(message[2])
        raise err
    import signal

    code = child.returncode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    raise UnsupportedError(f"TensorFlow crashed running the graph {doing} ({how}); nothing written", path=path)


def _wait(child, receive, budget, memory: int):
    """The child's last message, ``("timeout",)``/``("memory",)`` when the parent killed it, or None when it
    died without a word."""
    started = time.monotonic()
    deadline = started + START_SECONDS
    while True:
        if receive.poll(POLL_SECONDS):
            try:
                message = receive.recv()
            except (EOFError, OSError):
                return None
            if message[0] == "ready":
                deadline = time.monotonic() + budget.seconds
                continue
            return message
        if child.poll() is not None:
            try:
                return receive.recv() if receive.poll(0) else None
            except (EOFError, OSError):
                return None
        if time.monotonic() > deadline:
            child.kill()
            return ("timeout",)
        rss = _rss(child.pid)
        if rss is not None and rss > memory:
            child.kill()
            return ("memory",)

