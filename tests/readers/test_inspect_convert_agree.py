"""``inspect`` and ``convert`` never disagree, on every fixture file (issue 31 part 3).

Issue 31 found a tf_keras ``.keras`` zip that ``inspect`` said converts to GRU while ``convert`` said
"already a Keras 3 file, nothing to convert".  Here every file under ``fixtures/`` (every format; a
checkpoint once, by its prefix) goes through both, converted to the output batch mode would pick for it
(:func:`gruconv.writers.planning.batch_output_name`), and:

* a file ``inspect`` calls nothing-to-convert (``nothing_to_convert``, or a detail saying so) converts
  to nothing and writes nothing, and a file ``convert`` finds nothing in is one ``inspect`` says so of;
* when ``convert`` writes, it rewrites exactly the layers ``inspect`` lists, each as ``inspect``'s
  ``converts_to`` says, and the written ``.keras`` holds no CuDNNGRU/CuDNNLSTM and a GRU/LSTM for every
  one of them (under its own name, for readers that keep the model's layers);
* when ``convert`` refuses for want of information (a usage error: an ambiguous TF1 buffer), ``inspect``
  said so first: a layer with no ``converts_to``, or no layer and a detail naming the option to pass;
* a layer the eligibility report calls cuDNN-only (and says what ``convert`` writes for it) is converted;
* a file neither reader takes is refused by both, and so is a file whose reader cannot read it (a
  SavedModel missing its variables data);
* a file ``convert`` refuses (a graph running cuDNN ops, exit 3) is one ``inspect`` says so of
  (``refused``).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES
from gruconv import api, readers
from gruconv.errors import GruconvError, UsageError
from gruconv.options import Options
from gruconv.writers.planning import batch_output_name

CUDNN = ("CuDNNGRU", "CuDNNLSTM")


def _inputs() -> list:
    out = []
    for p in sorted(FIXTURES.rglob("*")):
        if not p.is_file() or p.suffix in (".py", ".md"):
            continue
        if p.name == "checkpoint" or ".data-" in p.name:
            continue  # a checkpoint's other files: the checkpoint is its prefix
        if p.relative_to(FIXTURES).parts[0] == "graphs_hostile":
            continue  # graphs that fail only when run (an endless loop, a huge Fill, an assert): inspect never runs a
            # graph, so it cannot agree with the bounded run's refusal; tests/tf/test_bounded.py and test_hostile cover them
        if p.name.endswith(".index"):
            p = p.with_suffix("")
        out.append(p)
    return out


INPUTS = _inputs()


def _says_nothing(info: dict) -> bool:
    return info.get("nothing_to_convert") is True or any("nothing to convert" in d for d in info.get("details", []))


def _layers(config) -> list:
    """(class, name) of every layer object anywhere in a Keras config."""
    out, stack = [], [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("class_name"), str) and isinstance(node.get("config"), dict):
                out.append((node["class_name"], node["config"].get("name")))
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(node)
    return out


def _check_keras_output(path: Path, rnns: list, graph: bool) -> None:
    with zipfile.ZipFile(path) as z:
        layers = _layers(json.loads(z.read("config.json")))
    classes = [c for c, _ in layers]
    assert not set(classes) & set(CUDNN), f"{path}: a cuDNN-only class left in the output"
    assert sum(c in ("GRU", "LSTM") for c in classes) >= len(rnns)
    if graph:  # the model's own layers: each converted layer by its name
        for r in rnns:
            leaf = r["name"].rsplit("/", 1)[-1]
            target = r["converts_to"].split("(", 1)[0]
            if target in ("Bidirectional", "TimeDistributed"):
                wrapper, target = target, r["converts_to"].split("(", 2)[1]
                assert (wrapper, r["name"].rsplit("/", 2)[-2]) in layers, (path, r["name"])
            if target != r["converts_to"].split("(", 1)[0] and r["converts_to"].startswith("Bidirectional"):
                # Keras names the halves forward_<layer>, backward_<layer>
                assert (target, f"forward_{leaf}") in layers and (target, f"backward_{leaf}") in layers, \
                    (path, r["name"], r["converts_to"])
            else:
                assert (target, leaf) in layers, (path, r["name"], r["converts_to"])


def test_every_fixture_is_covered():
    names = {p.relative_to(FIXTURES).parts[0] for p in INPUTS}
    assert {"keras", "keras3", "keras_lstm", "keras_user", "tf1", "tf1_lstm", "tf2", "tf_keras_zip",
            "trained", "graphs"} <= names


#: Graph inputs (``.pb``/``.pbtxt``/SavedModel) kept in the quick tier: a frozen GRU.  A graph's natural output is
#: a SavedModel, whose writer checks that it serves in a fresh bounded child that imports TensorFlow (~5 s of CPU
#: each: 19 graphs were 110 of this module's 113 CPU s), so the other graphs (a Keras 3 export and a golden LSTM
#: were quick until issue 47's budget) run in the slow tier (``make test-slow``, CI); inspect and convert of those
#: two agree quickly through ``tests/readers/test_graphs.py`` and ``tests/writers/test_graph_stacks.py``.
QUICK_GRAPHS = {"graphs/frozen_gru.pb"}


def _is_graph(path: Path) -> bool:
    return path.suffix in (".pb", ".pbtxt") and path.relative_to(FIXTURES).parts[0] in ("graphs", "graphs_golden")


def _case(path: Path):
    name = str(path.relative_to(FIXTURES))
    slow = _is_graph(path) and name not in QUICK_GRAPHS
    return pytest.param(path, id=name, marks=pytest.mark.slow) if slow else pytest.param(path, id=name)


def test_quick_graphs_exist():
    assert QUICK_GRAPHS <= {str(p.relative_to(FIXTURES)) for p in INPUTS if _is_graph(p)}


@pytest.mark.parametrize("path", [_case(p) for p in INPUTS])
def test_inspect_and_convert_agree(path, tmp_path):
    try:
        fmt = readers.detect(path)
    except GruconvError:
        with pytest.raises(GruconvError):
            api.inspect(path)
        with pytest.raises(GruconvError):
            api.convert(path, tmp_path / "out.keras")
        return
    module = readers.module(fmt)
    try:
        info = api.inspect(path)
    except GruconvError:  # detected, and damaged: convert refuses it too
        with pytest.raises(GruconvError):
            api.convert(path, tmp_path / "out.keras")
        return
    output = tmp_path / batch_output_name(module, path, Options(), "out")
    try:
        result = api.convert(path, output)
    except UsageError as e:  # wants more than the file says: inspect said so first
        assert not _says_nothing(info), e.message
        assert any(r["converts_to"] is None for r in info["rnns"]) or \
            (not info["rnns"] and any("--" in d for d in info["details"])), (info["rnns"], e.message)
        assert not output.exists()
        return
    except GruconvError as e:  # refused: inspect said so first, in the same words
        assert info.get("refused") == e.message, (info.get("refused"), e.message)
        assert not output.exists()
        return
    assert not info.get("refused"), info["refused"]
    # inspect's eligibility report names what convert writes for each cuDNN-only layer (issue 31: it did
    # so for a tf_keras zip that convert passed over)
    cudnn_said = [e for e in (info.get("cudnn_eligibility") or {}).get("layers", []) if e["class"] in CUDNN]
    if info.get("cudnn_eligibility") is not None:  # a file with an architecture
        assert bool(cudnn_said) == bool(result.rnns), ([e["path"] for e in cudnn_said], result.reason)
    if _says_nothing(info) or result.nothing_to_convert:
        assert _says_nothing(info) and result.nothing_to_convert, (info["summary"], result.reason)
        assert not info["rnns"] and not result.rnns and not result.outputs
        assert not output.exists()
        return
    assert [r["name"] for r in result.rnns] == [r["name"] for r in info["rnns"]]
    assert all(r["converts_to"] for r in info["rnns"])
    assert [r["converts_to"] for r in result.rnns] == [r["converts_to"] for r in info["rnns"]]
    assert result.outputs and all(Path(o).exists() for o in result.outputs)
    written = [Path(o) for o in result.outputs]
    files = [f for o in written for f in (sorted(o.iterdir()) if o.is_dir() else [o])]
    kerases = [f for f in files if f.suffix == ".keras"]
    if kerases and len(kerases) == 1:
        _check_keras_output(kerases[0], info["rnns"], "graph" in module.CONTENTS)
    elif kerases:  # one file per stack: each holds its own stack
        for f in kerases:
            _check_keras_output(f, [], False)
