"""Options are accepted or refused by the target kind a run writes (issue 45 item 3), never by a reader's yes/no.

Two halves, each able to fail:

* **refused**: for every (input kind x output) cell, each option outside the cell's set (written here by hand,
  not derived from the code under test) is refused alone: exit 2, one line, the flag and the target named
  (the target was once an empty name: "converted to : refusing"), nothing written; each option inside it
  passes the refusal.
* **read**: a real conversion of each cell, with an ``Options`` that records which fields the readers and
  writers read, reads every option the cell accepts: an accepted option nobody reads would be dropped silently.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv import api, readers, run_options
from gruconv.cli import main as cli
from gruconv.errors import UsageError
from gruconv.options import Options

#: Each option's command-line flag and a value (``None``: a flag), for planting it.
FLAGS = {
    "config": ("--config", str(FIXTURES / "keras" / "weights_only.json")),
    "hints": ("--num-units", "4"),
    "rnn": ("--rnn", "x"),
    "prefer": ("--prefer", "opaque"),
    "initial_state": ("--initial-state", None),
    "return_state": ("--return-state", None),
    "mask_input": ("--mask-input", None),
    "check_load": ("--check-load", None),
    "custom_objects": ("--custom-objects", "layers.py"),
    "graph_timeout": ("--graph-timeout", "5"),
    "graph_memory": ("--graph-memory", "2"),
    "batch_size": ("--batch-size", "2"),
    "micro": ("--micro", None),
    "timesteps": ("--timesteps", "4"),
    "int8": ("--int8", "calib.npz"),
}
#: The kwargs of the same options for the Python API.
VALUES = {"config": FLAGS["config"][1], "hints": {"num_units": 4}, "rnn": "x", "prefer": "opaque",
          "initial_state": True, "return_state": True, "mask_input": True, "check_load": True,
          "custom_objects": "layers.py", "graph_timeout": 5.0, "graph_memory": 2.0, "batch_size": 2, "micro": True,
          "timesteps": 4, "int8": "calib.npz"}
assert set(FLAGS) | {"force", "format"} == {f.name for f in dataclasses.fields(Options)}, "a new option: add its flag"

INPUTS = {"keras-h5": FIXTURES / "keras" / "sequential.h5", "tf1": FIXTURES / "tf1" / "layer_uni",
          "tf-graph": FIXTURES / "graphs" / "frozen_gru.pb"}
INTERFACE = {"initial_state", "return_state", "mask_input"}
BOUNDS = {"graph_timeout", "graph_memory"}
PROFILE = {"batch_size", "micro", "timesteps", "int8"}  # the .tflite profiles  # the graph reader's: every run of the graph, whatever the output
#: ``(input, output, --format) -> (the options the run reads, the target's words)``, by hand.
CELLS = {
    ("keras-h5", "o.keras", None): ({"config", "check_load", "custom_objects"}, "converted to .keras"),
    ("keras-h5", "o.weights.h5", None): ({"config", "check_load", "custom_objects"}, "converted to .weights.h5"),
    ("keras-h5", "o.h5", None): ({"config"}, "converted to .h5"),
    ("keras-h5", "o.safetensors", None): ({"config"}, "converted to .safetensors"),
    ("keras-h5", "o.onnx", None): ({"config"}, "converted to .onnx"),
    ("keras-h5", "out", "onnx"): ({"config"}, "converted to a directory of .onnx files (out)"),
    ("keras-h5", "out", "saved-model"): ({"config"}, "converted to a SavedModel directory (--format saved-model: out)"),
    ("tf1", "o.keras", None): ({"rnn", "prefer", "hints", "check_load"} | INTERFACE, "converted to .keras"),
    ("tf1", "o.weights.h5", None): ({"rnn", "prefer", "hints", "check_load"} | INTERFACE, "converted to .weights.h5"),
    ("tf1", "o.h5", None): ({"rnn", "prefer", "hints"}, "converted to .h5"),
    ("tf1", "o.safetensors", None): ({"rnn", "prefer", "hints"}, "converted to .safetensors"),
    ("tf1", "o.onnx", None): ({"rnn", "prefer", "hints", "initial_state", "mask_input"}, "converted to .onnx"),
    ("tf1", "out", None): ({"rnn", "prefer", "hints", "check_load"} | INTERFACE,
                           "converted to a directory of .keras files (out)"),
    ("tf1", "out", "onnx"): ({"rnn", "prefer", "hints", "initial_state", "mask_input"},
                             "converted to a directory of .onnx files (out)"),
    ("tf1", "out", "saved-model"): ({"rnn", "prefer", "hints"},
                                    "converted to a SavedModel directory (--format saved-model: out)"),
    ("tf-graph", "o.keras", None): ({"check_load"} | INTERFACE | BOUNDS, "converted to .keras"),
    ("tf-graph", "o.weights.h5", None): ({"check_load"} | INTERFACE | BOUNDS, "converted to .weights.h5"),
    ("tf-graph", "o.h5", None): (set(BOUNDS), "converted to .h5"),
    ("tf-graph", "o.safetensors", None): (set(BOUNDS), "converted to .safetensors"),
    ("tf-graph", "o.onnx", None): (set(BOUNDS), "converted to .onnx"),
    ("tf-graph", "out", None): (set(BOUNDS), "converted to a SavedModel directory (--format saved-model: out)"),
    ("tf-graph", "out", "saved-model"): (set(BOUNDS), "converted to a SavedModel directory (--format saved-model: out)"),
    ("tf-graph", "out", "onnx"): ({"initial_state", "mask_input"} | BOUNDS, "converted to a directory of .onnx files (out)"),
    # OpenVINO IR: a bare stack reads the interface options its ONNX model has (--mask-input to refuse it at write,
    # with the reason); a Keras model's IR is the model's own interface.
    ("keras-h5", "o.xml", None): ({"config"}, "converted to .xml"),
    ("tf1", "o.xml", None): ({"rnn", "prefer", "hints", "initial_state", "mask_input"}, "converted to .xml"),
    ("tf-graph", "o.xml", None): ({"initial_state", "mask_input"} | BOUNDS, "converted to .xml"),
    # .tflite: the profile options everywhere; a bare stack's model reads the interface options its file has.
    ("keras-h5", "o.tflite", None): ({"config"} | PROFILE, "converted to .tflite"),
    ("tf1", "o.tflite", None): ({"rnn", "prefer", "hints", "initial_state", "mask_input"} | PROFILE, "converted to .tflite"),
    ("tf-graph", "o.tflite", None): ({"initial_state", "mask_input"} | PROFILE | BOUNDS, "converted to .tflite"),
}


def _args(field: str) -> list:
    flag, value = FLAGS[field]
    return [flag] if value is None else [flag, value]


@pytest.mark.parametrize("cell", sorted(CELLS, key=str), ids=lambda c: "-".join(x for x in c if x))
def test_every_option_the_target_kind_does_not_read_is_refused_naming_the_target(cell, tmp_path):
    name, out, fmt = cell
    accepted, words = CELLS[cell]
    fmt_args = ["--format", fmt] if fmt else []
    for field in sorted(set(FLAGS) - accepted):
        r = CliRunner().invoke(cli, ["convert", str(INPUTS[name]), str(tmp_path / out), *fmt_args, *_args(field)])
        assert r.exit_code == 2, (field, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gruconv: error: "), r.output
        assert f"{FLAGS[field][0]} does not apply to " in lines[0] and f"{words}: refusing to ignore it" in lines[0], \
            (field, lines[0])
        assert list(tmp_path.iterdir()) == [], field
    module = readers.module(run_options.reader_for(INPUTS[name], tmp_path / out))
    for field in sorted(accepted):  # each accepted one passes the refusal (the conversion itself is not run)
        api.refuse_unread(module, tmp_path / out, Options(format=fmt, **{field: VALUES[field]}))


def test_a_planted_option_the_writer_does_not_declare_is_refused(monkeypatch, tmp_path):
    """The refusal follows the writer's declaration: an onnx writer that stops reading ``--initial-state``
    for a stack has it refused."""
    from gruconv.writers import onnx

    cell = ("tf1", "o.onnx", None)
    monkeypatch.setattr(onnx, "INTERFACE_OPTIONS", frozenset({"mask_input"}))
    r = CliRunner().invoke(cli, ["convert", str(INPUTS["tf1"]), str(tmp_path / cell[1]), "--initial-state"])
    assert r.exit_code == 2 and "--initial-state does not apply to a TensorFlow checkpoint converted to .onnx" \
        in r.output, r.output


# --------------------------------------------------------------------------- read: every accepted option is read

class _Recording(Options):
    """An ``Options`` that notes each field a reader or writer module reads (``getattr`` included); the
    drivers' reads (the refusal lists every field) are not counted."""

    def __getattribute__(self, name):
        if name in Options.__dataclass_fields__:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith(("gruconv.readers", "gruconv.writers", "gruconv.keras3")) \
                    and caller not in ("gruconv.writers.planning", "gruconv.writers.registry"):
                READ.add(name)
        return object.__getattribute__(self, name)


READ: set = set()
#: The cells a quick conversion can run (no TensorFlow); an option whose reader needs a value to be read at all
#: is given one (``custom_objects`` is read when the output is loaded back: ``check_load``).
QUICK = [c for c in CELLS if c[0] != "tf-graph" and c[2] != "saved-model" and not c[1].endswith((".xml", ".tflite"))]
GIVEN = {"check_load": True}


#: The edge outputs' cells that convert without TensorFlow graphs (each run converts through TensorFlow and the
#: target's runtime: the slow tier).
EDGE = [c for c in CELLS if c[0] != "tf-graph" and c[1].endswith((".xml", ".tflite"))]


@pytest.mark.slow
@pytest.mark.parametrize("cell", sorted(EDGE, key=str), ids=lambda c: "-".join(x for x in c if x))
def test_every_option_an_edge_run_accepts_is_read(cell, tmp_path):
    test_every_option_a_run_accepts_is_read_by_the_reader_or_the_writer_of_that_kind(cell, tmp_path)


@pytest.mark.parametrize("cell", sorted(QUICK, key=str), ids=lambda c: "-".join(x for x in c if x))
def test_every_option_a_run_accepts_is_read_by_the_reader_or_the_writer_of_that_kind(cell, tmp_path):
    name, out, fmt = cell
    accepted, _ = CELLS[cell]
    if "check_load" in accepted:
        pytest.importorskip("keras")
    READ.clear()
    given = {k: v for k, v in GIVEN.items() if k in accepted}
    opts = _Recording(format=fmt, **given)
    try:
        api.convert(INPUTS[name], tmp_path / out, opts)
    except UsageError as e:  # a target the plan refuses for this input (a full Keras model to ONNX): read first
        assert "ONNX target" in e.message, e.message
    assert accepted <= READ, f"accepted and never read: {sorted(accepted - READ)}"


def test_the_recorder_catches_an_option_nobody_reads(tmp_path):
    """The check above can fail: a writer declaring an option it never reads (planted) is caught."""
    READ.clear()
    api.convert(INPUTS["tf1"], tmp_path / "o.h5", _Recording())
    assert "initial_state" not in READ  # legacy .h5 weights have no interface: a declaration of it would be caught
