"""Seeded fuzzing of every reader: the only allowed outcomes are success or a ``GruconvError``.

Byte-level mutations of the valid fixtures — bit flips, byte sets, zeroed runs, truncations,
chunk duplications (inserted or overwritten) — are fed to each reader:

* ``keras-h5``: several legacy Keras HDF5 fixtures (mutations biased towards the first 4 KB,
  where HDF5 keeps most of its metadata);
* ``tf1-index``: the ``.index`` file of several TF1 checkpoints;
* ``tf1-data``: their data shards;
* ``tf1-tensors``: structured changes behind valid checksums (rewritten with
  ``make_bad_inputs.write_bundle``) — keys renamed or dropped, tensors re-typed, reshaped,
  shortened, lengthened, duplicated under another scope, NaN-filled — since byte damage rarely
  gets past the index's checksums to the checkpoint reader's own logic.

Every case runs :func:`gruconv.api.inspect` (no Keras), then for a readable Keras file the
legacy writer :func:`gruconv.writers.legacy_graph.write` (no Keras either), and for one case in
:data:`CONVERT_EVERY` the full :func:`gruconv.api.convert` (Keras 3).  Any other exception is a
bug.  Each reader runs in its own worker process, so a crash inside a C library (HDF5) or a hang
is caught too, with the case that caused it.

Number of cases per reader: ``GRUCONV_FUZZ_CASES`` (default 300); ``make fuzz`` runs 5000.
Seed: ``GRUCONV_FUZZ_SEED`` (default fixed); ``GRUCONV_FUZZ_READERS=keras-h5,tf1-tensors`` runs only
those.  A failure prints the reader, case number, fixture
and mutation; reproduce one case with::

    .venv/bin/python tests/readers/test_fuzz.py --reproduce READER CASE OUT_DIR   # writes the mutated input

A second test feeds hypothesis-generated JSON into ``model_config`` (random values spliced into
a real config at random places) through the same read / write path.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERAS = ROOT / "fixtures" / "keras"
GRAPHS = ROOT / "fixtures" / "graphs"
HOSTILE_GRAPHS = ROOT / "fixtures" / "graphs_hostile"
TF1 = ROOT / "fixtures" / "tf1"

CASES = int(os.environ.get("GRUCONV_FUZZ_CASES", "300"))
SEED = int(os.environ.get("GRUCONV_FUZZ_SEED", "1729"))
CONVERT_EVERY = 10

READERS = {
    "keras-h5": [KERAS / n for n in ("sequential.h5", "bidir_concat.h5", "nested.h5", "float16.h5",
                                     "weights_only.h5", "options.h5", "functional_two_gru.h5")],
    "tf1-index": [TF1 / n for n in ("layer_uni", "layer_bidir", "tf13", "multi_stack", "sharded")],
    "tf1-data": [TF1 / n for n in ("layer_uni", "layer_bidir", "tf13", "float16", "sharded")],
    # structured mutations behind valid checksums: what the reader's own logic sees
    "tf1-tensors": [TF1 / n for n in ("layer_uni", "layer_bidir", "tf13", "tf14_opaque_only", "multi_stack",
                                      "opaque_only_skip_uni", "float16", "layer_uni_1l")],
    # graphs holding cuDNN ops (binary and text GraphDefs, a SavedModel's graph) and a tf.keras SavedModel's
    # keras_metadata.pb / graph: the tf-graph and tf2 readers' protobuf walks
    "tf-graph": [GRAPHS / n for n in ("frozen_gru.pb", "frozen_gru_bidir_skip.pbtxt", "keras3_export",
                                      "tf_keras_cudnngru")]
    # graphs that loop forever, allocate 100 GB or assert, beside a real CudnnRNN node: their runs are bounded
    + [HOSTILE_GRAPHS / n for n in ("endless_loop", "huge_fill", "asserts")],
}


# --------------------------------------------------------------------------- mutations


def mutate(data: bytes, rng: random.Random, *, head_bias: int = 0) -> tuple:
    """One seeded mutation of ``data``: (new bytes, description)."""
    n = len(data)

    def pos() -> int:
        if head_bias and rng.random() < 0.5:
            return rng.randrange(min(n, head_bias))
        return rng.randrange(n)

    kind = rng.choice(["flip", "flip", "set", "zero", "truncate", "dup_insert", "dup_overwrite"])
    b = bytearray(data)
    if kind == "flip":
        spots = [(pos(), rng.randrange(8)) for _ in range(rng.randint(1, 4))]
        for p, bit in spots:
            b[p] ^= 1 << bit
        return bytes(b), f"flip bits {spots}"
    if kind == "set":
        spots = [(pos(), rng.choice([0, 0xFF, rng.randrange(256)])) for _ in range(rng.randint(1, 8))]
        for p, v in spots:
            b[p] = v
        return bytes(b), f"set bytes {spots}"
    if kind == "zero":
        p, length = pos(), rng.randint(1, 64)
        b[p:p + length] = bytes(len(b[p:p + length]))
        return bytes(b), f"zero {length} bytes at {p}"
    if kind == "truncate":
        length = rng.randrange(n)
        return data[:length], f"truncate to {length} of {n} bytes"
    a = pos()
    length = rng.randint(1, min(256, n - a))
    chunk = data[a:a + length]
    at = pos()
    if kind == "dup_insert":
        return data[:at] + chunk + data[at:], f"insert copy of [{a}, {a + length}) at {at}"
    b[at:at + length] = chunk
    return bytes(b[:max(n, at + length)]), f"overwrite [{at}, {at + length}) with copy of [{a}, {a + length})"


def build_case(reader: str, case: int, work: Path) -> tuple:
    """Write case ``case`` of ``reader`` into ``work`` (emptied); return (input path, description)."""
    rng = random.Random(f"{SEED}:{reader}:{case}")
    fixtures = READERS[reader]
    fixture = fixtures[case % len(fixtures)]
    if work.exists():
        shutil.rmtree(work)
    if reader == "keras-h5":
        work.mkdir(parents=True)
        data, what = mutate(fixture.read_bytes(), rng, head_bias=4096)
        target = work / fixture.name
        target.write_bytes(data)
        return target, f"{fixture.relative_to(ROOT)}: {what}"
    if reader == "tf1-tensors":
        return _tensor_case(fixture, rng, work)
    if reader == "tf-graph" and fixture.is_file():
        work.mkdir(parents=True)
        data, what = mutate(fixture.read_bytes(), rng)
        (work / fixture.name).write_bytes(data)
        return work / fixture.name, f"{fixture.relative_to(ROOT)}: {what}"
    if reader == "tf-graph":
        shutil.copytree(fixture, work)
        victim = rng.choice(sorted(p for p in work.glob("*.pb") if p.name != "fingerprint.pb"))
        data, what = mutate(victim.read_bytes(), rng)
        victim.write_bytes(data)
        return work, f"{fixture.relative_to(ROOT)} {victim.name}: {what}"
    shutil.copytree(fixture, work)
    if reader == "tf1-index":
        victim = work / "model.ckpt.index"
    else:
        victim = rng.choice(sorted(work.glob("model.ckpt.data-*")))
    data, what = mutate(victim.read_bytes(), rng)
    victim.write_bytes(data)
    return work, f"{fixture.relative_to(ROOT)} {victim.name}: {what}"


def _tensor_case(fixture: Path, rng: random.Random, work: Path) -> tuple:
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the support modules
    from make_bad_inputs import read_bundle, write_bundle

    ts = read_bundle(fixture)
    done = []
    for _ in range(rng.randint(1, 3)):
        if not ts:
            break
        key = rng.choice(sorted(ts))
        a = ts[key]
        op = rng.choice(["rename", "drop", "dtype", "reshape", "shorten", "lengthen", "duplicate", "nan", "scalar"])
        if op == "rename":
            parts = key.split("/")
            i = rng.randrange(len(parts))
            parts[i] = rng.choice(["", "cell_9", "fw", "bw", "opaque_kernel", "kernel", "bias", parts[i][::-1],
                                   parts[i] + "_1", "multi_rnn_cell", "cudnn_compatible_gru_cell"])
            ts["/".join(parts)] = ts.pop(key)
        elif op == "drop":
            ts.pop(key)
        elif op == "dtype":
            ts[key] = a.astype(rng.choice([np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8]))
        elif op == "reshape":
            if a.ndim == 2:
                ts[key] = np.ascontiguousarray(a.T)
            elif a.size:
                ts[key] = a.reshape((1,) + a.shape) if rng.random() < 0.5 else a.reshape(-1, 1)
        elif op == "shorten" and a.size:
            ts[key] = a.reshape(-1)[:rng.randrange(a.size)]
        elif op == "lengthen":
            ts[key] = np.concatenate([a.reshape(-1), np.zeros(rng.randint(1, 50), a.dtype)])
        elif op == "duplicate":
            ts["copy/" + key] = a.copy()
        elif op == "nan" and a.dtype.kind == "f" and a.size:
            b = a.copy().reshape(-1)
            b[rng.randrange(b.size)] = rng.choice([np.nan, np.inf, -np.inf])
            ts[key] = b.reshape(a.shape)
        elif op == "scalar":
            ts[key] = np.asarray(a.reshape(-1)[:1].sum(), dtype=a.dtype)
        done.append(f"{op} {key}")
    write_bundle(work / "model.ckpt", ts)
    return work, f"{fixture.relative_to(ROOT)}: " + "; ".join(done)


# --------------------------------------------------------------------------- the worker


def _worker(reader: str, start: int, count: int, out_dir: Path, progress: Path) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from gruconv import api, readers
    from gruconv.errors import GruconvError
    from gruconv.readers import keras_h5
    from gruconv.writers import legacy_graph

    stats = {"reader": reader, "cases": 0, "ok": 0, "refused": {}, "converted": 0, "failures": []}
    work = out_dir / "case"
    with open(progress, "a") as prog:
        for case in range(start, count):
            prog.write(f"{case}\t(building the case)\n")
            prog.flush()
            path, what = build_case(reader, case, work)
            prog.write(f"{case}\t{what}\n")
            prog.flush()
            stats["cases"] += 1
            stage = "inspect"
            try:
                api.inspect(path)
                if reader == "keras-h5":
                    stage = "legacy_graph.write"
                    doc = keras_h5.read(path)
                    legacy_graph.write(doc, out_dir / "legacy.h5", include_model=doc.model_config is not None)
                if case % CONVERT_EVERY == 0:
                    stage = "convert"
                    conv = out_dir / "converted"
                    shutil.rmtree(conv, ignore_errors=True)
                    conv.mkdir()
                    if reader == "keras-h5":  # a weights-only file converts to .h5 weights
                        target = conv / ("out.h5" if doc.kind == "weights" else "out.keras")
                    elif reader == "tf-graph":  # a graph or a tf.keras SavedModel: one model
                        target = conv / "out.keras"
                    else:  # a directory takes every stack of a checkpoint
                        target = conv
                    # a graph's runs are bounded (gruconv.tf.bounded): small bounds keep a hostile one quick
                    bounds = {"graph_timeout": 5.0, "graph_memory": 2.0} if readers.detect(path) == "tf-graph" else {}
                    api.convert(path, target, force=True, **bounds)
                    stats["converted"] += 1
                stats["ok"] += 1
            except GruconvError as e:
                name = type(e).__name__
                stats["refused"][name] = stats["refused"].get(name, 0) + 1
            except Exception:  # noqa: BLE001 - that is the point: anything else is a bug
                stats["failures"].append({"case": case, "what": what, "stage": stage,
                                          "traceback": traceback.format_exc()})
    return stats


#: A worker that reports no new case for this long is stuck in a case (seconds).  Not 20: a mutated
#: config outside the streaming writer's vocabulary takes the Keras-built route, whose first case in
#: a worker imports Keras and TensorFlow: ``make fuzz`` on 2026-11-27 (load average 8) flagged four
#: such cases as hung; each alone took 11.0-13.7 s to its one-line answer on this 2-core machine.  Not 60:
#: a graph case starts a bounded TensorFlow child (the 5 s budget counts after its import); ``make fuzz`` on
#: 2026-12-07 beside ``make compat`` flagged six graph cases as hung at 60 s, each 9-11 s alone.
STALL_S = 150.0


class _Runner:
    """One reader's worker process, restarted after the case that hung or crashed it."""

    def __init__(self, reader: str, tmp: Path):
        self.reader, self.dir = reader, tmp / reader
        self.dir.mkdir()
        self.progress = self.dir / "progress.txt"
        self.problems: list = []
        self.stats: list = []
        self.t0 = time.monotonic()
        self._start(0)

    def _start(self, start: int) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", self.reader, str(start), str(CASES),
                                      str(self.dir), str(self.progress)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.last_change, self.last_size = time.monotonic(), self._size()

    def _size(self) -> int:
        return self.progress.stat().st_size if self.progress.exists() else 0

    def _current(self) -> tuple:
        lines = self.progress.read_text().strip().splitlines() if self.progress.exists() else []
        if not lines:
            return -1, "?"
        case, _, what = lines[-1].partition("\t")
        return int(case), what

    def poll(self) -> bool:
        """Advance; True when this reader is done."""
        code = self.proc.poll()
        if code is None:
            size = self._size()
            if size != self.last_size:
                self.last_change, self.last_size = time.monotonic(), size
                return False
            if time.monotonic() - self.last_change < STALL_S:
                return False
            self.proc.kill()
            self.proc.communicate()
            return self._resume(f"hung (no progress for {STALL_S:.0f} s)", "")
        out, err = self.proc.communicate()
        if code == 0:
            self.stats.append(json.loads(out.strip().splitlines()[-1]))
            return True
        return self._resume(f"worker died (exit {code})", err[-3000:])

    def _resume(self, why: str, err: str) -> bool:
        case, what = self._current()
        self.problems.append({"case": case, "what": what, "stage": why, "traceback": err})
        if case < 0 or case + 1 >= CASES or len(self.problems) > 50:
            return True
        self._start(case + 1)
        return False


def _run_workers(readers: list, tmp_path: Path) -> list:
    runners = [_Runner(r, tmp_path) for r in readers]
    active = list(runners)
    while active:
        active = [r for r in active if not r.poll()]
        time.sleep(0.05)
    return runners


def _check(runners: list) -> None:
    problems = []
    lines = []
    for r in runners:
        failures = r.problems + [f for s in r.stats for f in s["failures"]]
        refused: dict = {}
        for s in r.stats:
            for k, v in s["refused"].items():
                refused[k] = refused.get(k, 0) + v
        lines.append(f"{r.reader}: {sum(s['cases'] for s in r.stats)} cases in the last worker(s), "
                     f"ok {sum(s['ok'] for s in r.stats)}, converted {sum(s['converted'] for s in r.stats)}, "
                     f"refused {refused}, problems {len(failures)}, {time.monotonic() - r.t0:.1f}s")
        for f in failures:
            problems.append(f"{r.reader} case {f['case']} ({f['what']}), {f['stage']}:\n{f['traceback']}"
                            f"reproduce: GRUCONV_FUZZ_SEED={SEED} .venv/bin/python tests/readers/test_fuzz.py --reproduce "
                            f"{r.reader} {f['case']} /tmp/fuzzcase")
    summary = "\n".join(lines)
    assert not problems, (summary + "\n\n" + "\n\n".join(problems[:10])
                          + (f"\n... {len(problems) - 10} more" if len(problems) > 10 else ""))


@pytest.mark.slow  # fuzz seeds: make test-all (300 cases per reader), make fuzz (5000)
@pytest.mark.parametrize("readers", [["keras-h5", "tf1-index", "tf1-data", "tf1-tensors", "tf-graph"]],
                         ids=["all-readers"])
def test_mutated_fixtures_only_succeed_or_raise_gruconv_errors(readers, tmp_path):
    if not _have_tf1():
        readers = [r for r in readers if not r.startswith("tf1")]
    only = os.environ.get("GRUCONV_FUZZ_READERS")
    if only:
        readers = [r for r in readers if r in only.split(",")]
    _check(_run_workers(readers, tmp_path))


def _have_tf1() -> bool:
    try:
        import gruconv.readers.tf1  # noqa: F401
        return True
    except ImportError:
        return False


def test_mutations_are_deterministic(tmp_path):
    a, da = build_case("keras-h5", 7, tmp_path / "a")
    b, db = build_case("keras-h5", 7, tmp_path / "b")
    assert da == db and a.read_bytes() == b.read_bytes()
    kinds = {build_case("tf1-index", i, tmp_path / "c")[1].split(": ")[1].split()[0] for i in range(60)}
    assert kinds >= {"flip", "set", "zero", "truncate", "insert", "overwrite"}


# --------------------------------------------------------------------------- model_config fuzz (hypothesis)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                          st.text(max_size=12), st.sampled_from(["CuDNNGRU", "Bidirectional", "Sequential",
                                                                 "Functional", "Model", "Lambda", "GRU",
                                                                 "TimeDistributed", "cu_dnngru", "layers",
                                                                 "config", "class_name", "layer",
                                                                 # issue 45 item 6: Keras's namespace functions
                                                                 # as classes, code a carried config may hold
                                                                 "deserialize", "serialize", "Input", "add",
                                                                 "TFSMLayer", "__lambda__", "lambda",
                                                                 "Pkg>Lambda", "MyCustomLayer"]))
_json = st.recursive(_json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4),
    st.dictionaries(st.sampled_from(["class_name", "config", "layers", "layer", "backward_layer", "name",
                                     "units", "merge_mode", "inbound_nodes", "input_layers", "output_layers",
                                     "time_major", "module", "x", "function", "function_type", "filepath",
                                     "code", "registered_name"]), kids, max_size=5)), max_leaves=20)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _splice(cfg, path, value):
    if not path:
        return value
    node = cfg
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return cfg


@pytest.fixture(scope="module")
def config_corpus(tmp_path_factory):
    import h5py

    out = {}
    for name in ("sequential.h5", "bidir_concat.h5", "nested.h5"):
        with h5py.File(KERAS / name, "r") as f:
            cfg = json.loads(f.attrs["model_config"])
        out[name] = (cfg, list(_paths(cfg)))
    return out, tmp_path_factory.mktemp("cfgfuzz")


@pytest.mark.slow  # fuzz seeds: make test-all (300 cases per reader), make fuzz (5000)
@settings(max_examples=max(50, CASES // 3), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_model_configs_only_succeed_or_raise_gruconv_errors(config_corpus, data):
    import copy

    import h5py

    from gruconv import api, readers
    from gruconv.errors import GruconvError
    from gruconv.readers import keras_h5
    from gruconv.writers import legacy_graph

    corpus, work = config_corpus
    name = data.draw(st.sampled_from(sorted(corpus)))
    cfg, paths = corpus[name]
    cfg = copy.deepcopy(cfg)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        try:
            cfg = _splice(cfg, path, data.draw(_json))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier splice removed this path
    target = work / name
    shutil.copyfile(KERAS / name, target)
    try:
        text = json.dumps(cfg)
    except ValueError:
        return
    with h5py.File(target, "r+") as f:
        f.attrs["model_config"] = text.encode("utf-8")
    from gruconv.keras3.archive import check_rnn_inputs
    from gruconv.keras3.config import CARRY, translate
    from gruconv.model.keras_config import code_in

    try:
        api.inspect(target)
        doc = keras_h5.read(target)
        keras_h5.converted_config(doc.model_config)
        legacy_graph.write(doc, work / "out.h5")
    except GruconvError:
        return
    # the streaming .keras writer's checks and translations (convert's exit 4 on damaged configs came from
    # these: check_rnn_inputs -> _features, translate -> _refs) refuse a damaged config as a GruconvError ...
    try:
        check_rnn_inputs(doc, [])
    except GruconvError:
        pass
    # ... and whatever the config, a Keras 3 config gruconv writes from a file it read never holds code (issue
    # 45 item 6): the streaming writer's translation and the Keras-built route's both refuse it or leave it out
    for outside in (None, CARRY):
        try:
            written = translate(doc.model_config, outside=outside)
        except GruconvError:
            continue
        assert code_in(written) == [], (outside, code_in(written))


# --------------------------------------------------------------------------- command line


def main(argv) -> int:
    if argv[:1] == ["--worker"]:
        reader, start, count, out_dir, progress = argv[1], int(argv[2]), int(argv[3]), Path(argv[4]), Path(argv[5])
        print(json.dumps(_worker(reader, start, count, out_dir, progress)))
        return 0
    if argv[:1] == ["--reproduce"]:
        reader, case, out_dir = argv[1], int(argv[2]), Path(argv[3])
        path, what = build_case(reader, case, out_dir / f"{reader}-{case}")
        print(f"{path}\n{what}")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
