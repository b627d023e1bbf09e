"""Every run of a user's graph, in a child process with a wall-time budget and a memory bound.

Why a child process: a graph is the user's program.  Its signatures may loop forever (a ``tf.while_loop``
whose condition never turns false), allocate without end (a ``Fill`` of a shape from a ``Const``), or crash
TensorFlow.  Run in gruconv's own process, none of that can be stopped: measured before this module (issue
45), ``convert hang/ out --format saved-model`` of a SavedModel holding a ``CudnnRNN`` node and an endless
loop ran past 10 minutes on a full core, and SIGTERM sent at 120 s did not stop it -- a Python signal handler
runs between bytecodes, never while TensorFlow is inside a graph.  A child can be killed whatever it is doing.

What runs here (:func:`run`): the ``saved-model`` writer's rewrite and serve check, the whole-graph ONNX writer
(tf2onnx folds constant subgraphs by running them with TensorFlow), the evaluation of a graph's cuDNN params
for the stacks route, and verify's end-to-end reference.  Each child is a fork of a **zygote** (:class:`_Zygote`): a
fresh interpreter (``python -c``, the parent's ``sys.path``; not multiprocessing's ``spawn``: it imports the
caller's ``__main__`` again, and a script without a main guard would start itself over) that imports TensorFlow
once, quietly and without asking for a device, then forks a child per run.  Not a fork of gruconv itself: it may
hold a TensorFlow runtime already, whose threads a fork would not carry.  A fork of the zygote has run no graph and
made no function, so a writer's bytes from it are a new interpreter's (``tests/tf/test_bounded.py`` compares them),
and it starts in 0.05 s where an interpreter importing TensorFlow takes 3.6-5 s (measured, 2 cores, TensorFlow
2.21).  Where a fork is not safe (:func:`_fork_safe`: a second thread, a CUDA driver initialized) the zygote runs
the one run itself, a fresh interpreter as before.  The child reads its work pickled from a pipe, says it is
ready, then runs the function; its stdout and stderr go to a log in the run's scratch directory (TensorFlow's C++
lines; the outcome comes back through another pipe).  Where the caller says the result cannot depend on what the
child ran before (``reuse``: numbers, not a writer's bytes), the child is kept for the next run of the same
process; the zygote is kept too, for the next fresh child.

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
  :class:`gruconv.signals.Interrupted` there at once; the child is killed in the ``finally``, the zygote at exit.
  The zygote ends itself if the parent dies, and a child if the zygote dies
  (:func:`gruconv.signals.die_with_parent`); both ignore the terminal's SIGINT (the parent decides).  A run's
  temporary files live in a scratch directory the parent made and removes.

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

#: Runs one child may serve before it is retired (:func:`run`'s ``reuse``), and the resident set past which it
#: is retired after a run, as a fraction of the memory bound: what a run leaves behind (loaded functions,
#: allocator arenas) must not add up to the next run's bound.
MAX_RUNS = 64
RETIRE_FRACTION = 0.5


def _zygote_main() -> None:
    """The zygote interpreter's entry (``python -c``); its socket (``AF_UNIX``, ``SOCK_SEQPACKET``: one message per
    send) is the file descriptor ``argv[1]``.  First ``(parent, imports)`` comes down it; then, one at a time,
    ``("fork", memory)`` with two file descriptors (the run's message pipe's write end, its work pipe's read end),
    answered ``("forked", pid, forked)``; and ``("reap", pid)``, answered ``("reaped", returncode)``.  ``forked``
    False: no fork was safe here (:func:`_fork_safe`) and this process serves the run itself, as a fresh child."""
    import pickle
    import select
    import socket
    import sys

    global _in_child
    _in_child = True
    sock = socket.socket(fileno=int(sys.argv[1]))
    parent, imports = pickle.loads(sock.recv(1 << 16))
    from ..signals import die_with_parent

    die_with_parent(parent, watch=False)  # no second thread in a process that forks; the loop below polls
    # TensorFlow's warnings (an allocation it could not make) go to a run's log, which the parent reads; oneDNN's
    # allocator is off: under a memory bound it hung after a failed allocation (measured: past 60 s), TensorFlow's
    # own fails the op at once.  One OpenBLAS thread: numpy's pool is the one thread importing TensorFlow starts
    # (measured, TensorFlow 2.21), and a process of one thread is what forks safely.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    _without_jax()
    for name in imports:
        try:
            from .runtime import import_quietly

            import_quietly(name, probe=False)
        except ImportError:
            pass  # a run's ``fn`` says so in its own words
    forks = _fork_safe()
    while True:
        if not select.select([sock], [], [], 1.0)[0]:
            if os.getppid() != parent:
                os._exit(128 + 15)
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        except OSError:
            return
        if not data:
            return  # the parent closed its end: no more runs
        request = pickle.loads(data)
        if request[0] == "reap":
            try:
                code = os.waitstatus_to_exitcode(os.waitpid(request[1], 0)[1])
            except ChildProcessError:
                code = None
            sock.send(pickle.dumps(("reaped", code)))
            continue
        try:
            pid = os.fork() if forks else 0
        except OSError:
            for fd in fds:
                os.close(fd)
            sock.send(pickle.dumps(("forked", None, True)))
            continue
        if pid:
            for fd in fds:
                os.close(fd)
            sock.send(pickle.dumps(("forked", pid, True)))
            continue
        from multiprocessing.connection import Connection

        if not forks:
            sock.send(pickle.dumps(("forked", os.getpid(), False)))
        zygote = os.getppid() if forks else parent
        sock.close()
        code = 1
        try:
            _child(Connection(fds[0], readable=False), Connection(fds[1], writable=False), request[1], zygote)
            code = 0
        finally:
            os._exit(code)  # a fork must not return into the zygote's loop, nor run its exit handlers


def _fork_safe() -> bool:
    """Whether a fork of this process (TensorFlow imported, no graph run) can run TensorFlow: one thread (a fork
    copies only the calling thread, and a lock another thread held stays held in the copy), and no CUDA driver
    initialized (after ``cuInit`` in the parent, CUDA fails in a forked child: ``CUDA_ERROR_NOT_INITIALIZED``,
    tensorflow/tensorflow#57877).  Listing TensorFlow's devices initializes CUDA, so the zygote imports without it
    (:func:`gruconv.tf.runtime.import_quietly`'s ``probe``); whether ``import tensorflow`` alone does on a GPU
    machine is not measured (no machine here has both), and this probe is what decides: ``cuDeviceGetCount`` answers
    ``CUDA_ERROR_NOT_INITIALIZED`` (3) before ``cuInit`` (CUDA Driver API, "Initialization"), and where no driver
    loads there is nothing to initialize.  Where ``/proc`` cannot say how many threads there are: not safe."""
    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return False
    except OSError:
        return False
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    count = ctypes.c_int()
    try:
        return cuda.cuDeviceGetCount(ctypes.byref(count)) == 3
    except AttributeError:
        return False


def _to_scratch(scratch: str) -> None:
    """This run's temporary files and log in the parent's scratch directory for it (removed by the parent)."""
    import tempfile

    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch
    log = os.open(os.path.join(scratch, LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def _without_jax() -> None:
    """``import jax`` fails in this child (an ``ImportError``, as where JAX is not installed).  Why:
    ``import tensorflow`` imports JAX when it is installed, through ``tensorflow/lite/python/util.py``'s ``try: from
    jax import jit`` (TensorFlow 2.21, ``python -X importtime``): 0.75 of the child's 5.4 s start, for a TFLite path
    no work here takes (a graph's params, served outputs, the rewrite, tf2onnx).  Every child starts it, and
    ``convert`` of a graph starts one or two.  Not under ``KERAS_BACKEND=jax``: verify's graph rows then run Keras
    on JAX in the child (blocked, ``verify GRAPH OUT`` was an internal error; ``tests/tf/test_bounded.py``)."""
    import sys

    if "jax" not in sys.modules and os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        sys.modules["jax"] = None


def _child(conn, jobs, memory: int, parent: int) -> None:
    """A child process (forked by the zygote, or the zygote itself): its bounds, then ``fn(*args)`` for each job,
    each outcome sent to the parent.  TensorFlow was imported by the zygote (:func:`_zygote_main`)."""
    import gc
    import traceback

    from ..signals import die_with_parent

    die_with_parent(parent)
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory + ADDRESS_HEADROOM
        limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)  # a lower limit given us stays
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):
        pass  # no RLIMIT_AS here: the resident-set watchdog alone bounds it
    from ..errors import GruconvError

    while True:
        try:
            fn, args, scratch, cwd = jobs.recv()
        except (EOFError, OSError):
            return  # the parent is done with this child
        try:
            if cwd is not None:
                os.chdir(cwd)  # the parent's now: a zygote or a kept child started in another (relative paths)
        except OSError:
            pass  # gone: the run's own paths say so
        _to_scratch(scratch)
        conn.send(("ready",))
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent, which decides
            if _out_of_memory(e):
                conn.send(("memory",))
            elif isinstance(e, GruconvError):
                conn.send(("error", type(e), e.message, e.path))
            else:
                line = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
                conn.send(("bug", f"{type(e).__name__}: {line}" if line else type(e).__name__,
                           traceback.format_exc()))
        else:
            conn.send(("ok", result))
        del fn, args
        result = None
        gc.collect()


class _Zygote:
    """A fresh interpreter that imports TensorFlow once and forks a child for each run (:func:`_zygote_main`).
    Why: a fresh interpreter importing TensorFlow is 3.6-5 CPU s, a fork of one that has 0.05 s; a writer's run
    needs a child that ran nothing before (its bytes count up per process), and a conversion of a graph to a
    SavedModel with ``--verify`` starts three children.  Not a fork of gruconv's own process: that one may hold a
    TensorFlow runtime already, whose threads a fork would not carry.  Forked before any graph ran, a child is as
    fresh as a new interpreter: the same modules imported, no function, no device, no thread started."""

    def __init__(self, imports: tuple, key):
        import pickle
        import socket
        import subprocess
        import sys

        # a fresh interpreter, not multiprocessing's spawn: that one imports the caller's __main__ again (a
        # script without a main guard would start itself over); the zygote gets this process's sys.path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from gruconv.tf.bounded import _zygote_main; _zygote_main()",
                 str(theirs.fileno())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), env=env, close_fds=True)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock, self.key, self.owner, self.spent = mine, key, os.getpid(), False
        try:
            mine.send(pickle.dumps((os.getpid(), tuple(imports))))
        except OSError:  # it died at once: its first answer finds it gone
            pass

    def alive(self) -> bool:
        return not self.spent and self.owner == os.getpid() and self.process.poll() is None

    def ask(self, request: tuple, fds: tuple = ()) -> None:
        import pickle
        import socket

        try:
            socket.send_fds(self.sock, [pickle.dumps(request)], list(fds))
        except OSError:  # it died: its answer finds it gone
            pass

    def answer(self, timeout: float):
        """The zygote's next answer within ``timeout`` seconds; None while there is none, ``("gone",)`` when it
        died."""
        import pickle
        import select

        if not select.select([self.sock], [], [], timeout)[0]:
            return None
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            return ("gone",)
        return pickle.loads(data) if data else ("gone",)

    def close(self) -> None:
        """End the zygote (its children end with it: ``PR_SET_PDEATHSIG``) unless it became a run's child."""
        if self.owner != os.getpid():  # a forked copy of the owner: the zygote is the owner's to end
            return
        if not self.spent:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        self.sock.close()


class _Forked:
    """A child the zygote forked, with the part of :class:`subprocess.Popen` that :func:`_wait` and :class:`_Child`
    use.  The zygote is its parent: it reaps the child when asked, and until then a child that ended stays a
    zombie, so its pid is not reused while this process may still signal it."""

    def __init__(self, zygote: _Zygote, pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self):
        if self.returncode is None:
            try:
                with open(f"/proc/{self.pid}/stat") as f:
                    ended = f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
            except (OSError, IndexError):
                ended = True
            if ended:
                self.wait()
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            import signal

            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self):
        """Its exit status, from the zygote (after :meth:`kill`, or once it ended).  With the zygote gone, the child
        went too (its parent-death signal) and init reaped it: SIGKILL is as much as is known."""
        import signal

        if self.returncode is None:
            answer = None
            if self.zygote.process.poll() is None:
                self.zygote.ask(("reap", self.pid))
                answer = self.zygote.answer(60.0)
                if answer is None or answer[0] != "reaped":
                    _drop(self.zygote)  # no answer in time: a late one would be read as the next request's
            self.returncode = answer[1] if answer and answer[0] == "reaped" and answer[1] is not None \
                else -signal.SIGKILL
        return self.returncode


class _Child:
    """A child :func:`run` asked a zygote for: its process (once the zygote answered, :meth:`started`), the pipe its
    work goes down, the pipe its messages come up, and how many runs it served."""

    def __init__(self, zygote: _Zygote, memory: int, key):
        from multiprocessing.connection import Connection

        up_read, up_write = os.pipe()
        down_read, down_write = os.pipe()
        try:
            zygote.ask(("fork", memory), (up_write, down_read))
        finally:
            os.close(up_write)
            os.close(down_read)
        self.receive = Connection(up_read, writable=False)
        self.jobs = Connection(down_write, readable=False)
        self.zygote, self.process = zygote, None
        self.key, self.runs, self.owner = key, 0, os.getpid()

    def started(self, timeout: float):
        """True once the child exists, False when the zygote died first (or could not fork), None while the zygote
        has not answered yet (it is importing TensorFlow)."""
        answer = self.zygote.answer(timeout)
        if answer is None:
            return None
        if answer[0] != "forked" or answer[1] is None:
            return False
        _, pid, forked = answer
        if forked:
            self.process = _Forked(self.zygote, pid)
        else:  # the zygote serves this run itself: it is the child now, and no zygote any more
            self.process, self.zygote.spent = self.zygote.process, True
        return True

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process is not None and self.process.poll() is None

    def returncode(self):
        return (self.process or self.zygote.process).returncode

    def close(self) -> None:
        """Kill the child (if still running), reap it, close the pipes.  A child the zygote never answered for:
        the zygote is ended, its state unknown."""
        if self.owner != os.getpid():  # a forked copy of the owner: the child is the owner's to end
            return
        if self.process is None:
            _drop(self.zygote)
        else:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        for c in (self.receive, self.jobs):
            try:
                c.close()
            except OSError:
                pass


#: The zygotes kept for the next runs (:func:`run`), by key, least recently used first, in the process that
#: started them.
_zygotes: dict = {}
#: How many zygotes a process keeps.  Two, not one: a process that alternates between two keys (a test module's
#: plain-function runs, ``imports=()``, beside graph runs; a changed ``KERAS_BACKEND``) would otherwise import
#: TensorFlow again at every switch.  An idle zygote holding TensorFlow is ~0.4 GB resident, shared copy-on-write
#: with its children.
MAX_ZYGOTES = 2


def _zygote(imports: tuple, key, keep: bool) -> _Zygote:
    """A zygote for ``key``: with ``keep`` (the main thread), the kept one if alive, else a new one kept (the least
    recently used beyond :data:`MAX_ZYGOTES` ended); without, a new one of the caller's own, which it ends after
    its run.  Why not share the kept one with another thread: its socket carries one request and its answer at a
    time, and two threads asking at once would read each other's answers."""
    if not keep:
        return _Zygote(imports, key)
    zygote = _zygotes.pop(key, None)
    if zygote is not None and not zygote.alive():
        zygote.close()
        zygote = None
    zygote = _zygotes[key] = zygote or _Zygote(imports, key)
    while len(_zygotes) > MAX_ZYGOTES:
        _zygotes.pop(next(iter(_zygotes))).close()
    return zygote


def _drop(zygote: _Zygote) -> None:
    """End ``zygote`` and forget it."""
    if _zygotes.get(zygote.key) is zygote:
        del _zygotes[zygote.key]
    zygote.close()


#: The child kept for the next run (:func:`run`'s ``reuse``): at most one, in the process that started it.
_warm: dict = {}


#: Environment variables that decide nothing a kept child does differently.  ``PYTEST_CURRENT_TEST`` changes with
#: every test.  The others are what importing TensorFlow or Keras sets in a process (``os.environ.setdefault`` in
#: ``tensorflow/__init__.py``, TensorFlow's Keras saving modules, :mod:`gruconv.keras3.runtime`): the parent
#: gains them between two runs when it imports TensorFlow or Keras for itself, as ``convert --verify`` does after
#: a graph's params were evaluated, while the child set them on its own import (``TF_CPP_MIN_LOG_LEVEL`` and
#: ``TF_ENABLE_ONEDNN_OPTS`` it sets itself, :func:`_zygote_main`).  Measured before this list: ``convert GRAPH
#: m.keras --verify`` started a second child for the same graph because these nine had appeared in the parent.
#: ``TMPDIR`` too: every run sets its own, the scratch directory the parent made for it (:func:`_to_scratch`), so
#: the one a zygote or a kept child started with is never used (a caller changing it, as test_bounded's fixture
#: does for each test, started a zygote importing TensorFlow each time).
_KEY_IGNORES = frozenset({"TMPDIR", "PYTEST_CURRENT_TEST", "ENABLE_RUNTIME_UPTIME_TELEMETRY", "HDF5_PLUGIN_PATH",
                          "TF2_BEHAVIOR", "TPU_ML_PLATFORM", "TPU_ML_PLATFORM_VERSION", "TPU_SKIP_MDS_QUERY",
                          "TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS"})


def _key(memory: int, imports: tuple):
    """What a kept child must share with the next run to serve it: the memory bound (its ``RLIMIT_AS``), the
    modules it imported, and the environment and ``sys.path`` it started with (``KERAS_BACKEND``,
    ``CUDA_VISIBLE_DEVICES``, thread counts are read at import), less :data:`_KEY_IGNORES`.  ``KERAS_BACKEND``
    unset and ``tensorflow`` are one key: the child has TensorFlow, so Keras and gruconv's backend choice
    (:func:`gruconv.keras3.runtime.pick_backend`) both take it there."""
    import sys

    env = {k: v for k, v in os.environ.items() if k not in _KEY_IGNORES}
    if env.get("KERAS_BACKEND") == "tensorflow":
        del env["KERAS_BACKEND"]
    return memory, tuple(imports), tuple(sorted(env.items())), tuple(sys.path)


def release(zygote: bool = True) -> None:
    """End the kept child, if any, and the kept zygotes unless ``zygote`` is False (at exit, and for a long-lived
    process that is done with graphs)."""
    while _warm:
        _, child = _warm.popitem()
        child.close()
    while zygote and _zygotes:
        _zygotes.popitem()[1].close()


def _forget_after_fork() -> None:
    _warm.clear()  # the kept child's and the zygote's pipes are the parent's; this process starts its own
    _zygotes.clear()


def _setup_process_hooks() -> None:
    import atexit

    atexit.register(release)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_after_fork)


_setup_process_hooks()


def run(fn, *args, budget=None, path=None, doing: str = "on probe inputs", imports: tuple = ("tensorflow",),
        reuse: bool = False):
    """``fn(*args)`` run in a child process within ``budget`` (:class:`gruconv.options.Budget`; None: the
    defaults); its result, or its :class:`~gruconv.errors.GruconvError` raised again here.  Past the budget:
    :class:`~gruconv.errors.UnsupportedError` (exit 3), said of ``path`` (the input).  ``fn`` and ``args`` are
    pickled (``fn`` a module-level function).  ``imports``: modules the child imports before the budget starts.
    Inside such a child already: ``fn(*args)`` in place.

    ``reuse``: the child may have served an earlier run and may serve the next.  A fresh interpreter importing
    TensorFlow is 3-5 CPU s (measured: 55 runs of the quick test tier spent 221 of their 307 s starting), and
    ``convert --verify`` of a graph or a batch of graphs runs several.  Only for work whose result cannot depend
    on what the process ran before: numbers (a graph's params, served outputs, verify's rows), never a writer's
    bytes (a SavedModel's function names and tf2onnx's node names count up per process).  A kept child is
    retired after a run that did not end with a result or a gruconv error (its state is unknown then), after
    :data:`MAX_RUNS` runs, past :data:`RETIRE_FRACTION` of the memory bound, when the environment changed, and
    in a thread other than the main one (``PR_SET_PDEATHSIG`` ends it with the thread that started it).  A run
    without ``reuse`` (a writer's) gets its own fresh child and leaves the kept one for the next run that may use it
    (a batch writing SavedModels with ``--verify`` alternates the two)."""
    import threading

    if _in_child:
        return fn(*args)

    from ..errors import UnsupportedError
    from ..files.outputs import scratch_dir
    from ..options import Budget

    budget = budget or Budget()
    memory = int(budget.memory * 2**30)
    main = threading.current_thread() is threading.main_thread()
    reuse = reuse and main
    key = _key(memory, imports)
    child = zygote = None
    if reuse:
        child = _warm.pop(key, None)
        release(zygote=False)  # at most one kept child: another key's is of no use now
    keep = False
    with scratch_dir(prefix="gruconv-graph-run-") as scratch:
        try:
            while True:
                fresh = child is None or not child.alive()
                if fresh:
                    if child is not None:
                        child.close()
                    zygote = _zygote(imports, key[1:], keep=main)
                    child = _Child(zygote, memory, key)
                message, ready = _wait(child, (fn, args, str(scratch), _cwd()), budget)
                if message is None and not ready and not fresh:
                    continue  # a kept child that died before this run began: start a fresh one
                break
            keep = reuse and message is not None and message[0] in ("ok", "error")
            if keep:
                child.runs += 1
                rss = _rss(child.process.pid)
                keep = child.runs < MAX_RUNS and rss is not None and rss < RETIRE_FRACTION * memory
        finally:
            if keep:
                _warm[key] = child
            elif child is not None:
                child.close()
            if zygote is not None and (zygote.spent or not main):
                _drop(zygote)  # it became this run's child; or this thread's, and its parent-death signal with it
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

    code = child.returncode()
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    raise UnsupportedError(f"TensorFlow crashed running the graph {doing} ({how}); nothing written", path=path)


def _cwd():
    """This process's working directory, which a child takes for each run (None where it was removed)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _wait(child: _Child, job: tuple, budget):
    """Send ``job`` to ``child`` once it exists, then ``(message, ready)``: the child's last message,
    ``("timeout",)``/``("memory",)`` when the parent killed it, or None when it died without a word; ``ready``:
    whether it said it had begun this run."""
    memory = int(budget.memory * 2**30)
    deadline = time.monotonic() + START_SECONDS
    while child.process is None:  # the zygote is importing TensorFlow
        started = child.started(POLL_SECONDS)
        if started is False:
            return None, False
        if started is None and time.monotonic() > deadline:
            return ("timeout",), False  # closing the child ends the zygote that never answered
    try:
        child.jobs.send(job)
    except OSError:  # the child died: found below
        pass
    receive, process = child.receive, child.process
    ready = False
    while True:
        if receive.poll(POLL_SECONDS):
            try:
                message = receive.recv()
            except (EOFError, OSError):
                return None, ready
            if message[0] == "ready":
                ready = True
                deadline = time.monotonic() + budget.seconds
                continue
            return message, ready
        if process.poll() is not None:
            try:
                return (receive.recv() if receive.poll(0) else None), ready
            except (EOFError, OSError):
                return None, ready
        if time.monotonic() > deadline:
            process.kill()
            return ("timeout",), ready
        rss = _rss(process.pid)
        if rss is not None and rss > memory:
            process.kill()
            return ("memory",), ready
