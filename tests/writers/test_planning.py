"""``writers.planning.plan``: every decision about what a conversion writes, as data, before any work
(issue 28): the writer, file or directory, the targets and ``rest.npz``, and the refusals (nothing to
convert, a format the input cannot go to, ``Lambda`` layers, weights only, several stacks to one
file, a directory that is not empty, an output that is an input).  No file is written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from gruconv import readers
from gruconv.errors import OutputError, UnsupportedError, UsageError
from gruconv.model.canonical import Document
from gruconv.options import Options
from gruconv.writers.planning import plan


def document(path, **kw):
    path = FIXTURES / path
    return readers.module(readers.detect(path)).read(path, Options.of(**kw)).document()


def decided(p) -> tuple:
    """A plan as plain data: (route, format, directory name, [(kind, file name, stack, name)], rest name)."""
    return (p.route, p.format, p.directory.name if p.directory else None,
            [(t.kind, t.path.name, t.stack, t.name) for t in p.targets], p.rest.name if p.rest else None)


# --------------------------------------------------------------------------- a Keras graph

@pytest.mark.parametrize("name, fmt", [("o.keras", "keras"), ("o.h5", "h5-weights"),
                                       ("o.weights.h5", "keras-weights"), ("o.safetensors", "torch")])
def test_a_keras_graph_goes_to_one_file_of_the_writer_its_name_claims(tmp_path, name, fmt):
    p = plan(document("keras/sequential.h5"), tmp_path / name, Options())
    assert decided(p) == ("graph", fmt, None, [("graph", name, None, None)], None)


def test_format_overrides_the_name(tmp_path):
    p = plan(document("keras/sequential.h5"), tmp_path / "o.bin", Options(format="h5-weights"))
    assert decided(p)[:2] == ("graph", "h5-weights")


def test_an_output_name_no_writer_claims_is_refused(tmp_path):
    with pytest.raises(UsageError, match="cannot tell the output format from 'o.txt'"):
        plan(document("keras/sequential.h5"), tmp_path / "o.txt", Options())


def test_lambda_layers_are_refused_by_writers_that_build_the_model_only(tmp_path):
    doc = document("keras/sequential.h5")
    doc.graph.lambdas = ["evil"]
    for name in ("o.keras", "o.weights.h5"):
        with pytest.raises(UnsupportedError, match="Lambda layer.*evil"):
            plan(doc, tmp_path / name, Options())
    assert plan(doc, tmp_path / "o.h5", Options()).format == "h5-weights"


def test_a_weights_only_graph_needs_its_architecture_for_a_model(tmp_path):
    doc = document("keras/weights_only.h5")
    with pytest.raises(UsageError, match="weights-only file needs --config"):
        plan(doc, tmp_path / "o.keras", Options())
    assert plan(doc, tmp_path / "o.h5", Options()).route == "graph"
    with_config = document("keras/weights_only.h5", config=str(FIXTURES / "keras/weights_only.json"))
    assert plan(with_config, tmp_path / "o.keras", Options()).format == "keras"
    assert FIXTURES / "keras/weights_only.json" in with_config.inputs  # never an output


def test_a_graph_to_onnx_is_one_file_per_rnn_in_a_directory(tmp_path):
    doc = document("keras/weights_only.h5")
    p = plan(doc, tmp_path / "odir", Options(format="onnx"))
    assert p.route == "graph-many" and p.directory == tmp_path / "odir"
    assert [(t.kind, t.stack, t.path.suffix) for t in p.targets] == [
        ("graph-rnn", i, ".onnx") for i in range(len(doc.stacks))]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(OutputError, match="not empty"):
        plan(doc, tmp_path / "full", Options(format="onnx"))


def test_a_tf_keras_zip_does_not_go_to_legacy_h5(tmp_path):
    doc = document("tf_keras_zip/gru.keras")
    with pytest.raises(UnsupportedError, match="does not convert to legacy .h5 weights"):
        plan(doc, tmp_path / "o.h5", Options())
    assert plan(doc, tmp_path / "o.keras", Options()).format == "keras"


def test_a_tf2_checkpoint_without_config_says_what_it_lacks(tmp_path):
    doc = document("tf2/ckpt_seq")
    with pytest.raises(UsageError, match=r"TF2 checkpoint without --config .* for a \.weights\.h5 file") as e:
        plan(doc, tmp_path / "o.weights.h5", Options())
    assert Path(e.value.path) == FIXTURES / "tf2/ckpt_seq"
    assert decided(plan(doc, tmp_path / "o.safetensors", Options()))[:2] == ("graph", "torch")
    assert doc.inputs[0].parent == FIXTURES / "tf2/ckpt_seq"  # read from the bundle: the checkpoint's own files


# --------------------------------------------------------------------------- bare stacks

def test_one_stack_to_one_file_with_rest_npz_beside_it(tmp_path):
    doc = document("tf1/layer_uni")
    p = plan(doc, tmp_path / "o.keras", Options())
    assert decided(p) == ("stacks", "keras", None, [("stack", "o.keras", 0, doc.names[0] or "gru_stack")],
                          "o.keras.rest.npz" if doc.other_tensors else None)


def test_several_stacks_go_to_a_directory_or_one_whole_document_file(tmp_path):
    doc = document("tf1/multi_stack")
    assert len(doc.stacks) > 1
    p = plan(doc, tmp_path / "odir", Options())
    assert p.route == "stacks" and p.format == "keras" and p.directory == tmp_path / "odir"
    assert [t.stack for t in p.targets] == list(range(len(doc.stacks)))
    assert all(t.path.parent == tmp_path / "odir" and t.path.suffix == ".keras" and t.force for t in p.targets)
    assert len({t.path.name.lower() for t in p.targets}) == len(doc.stacks)
    assert (p.rest == tmp_path / "odir" / "rest.npz") == bool(doc.other_tensors)
    p = plan(doc, tmp_path / "o.safetensors", Options())
    assert decided(p) == ("document", "torch", None, [("document", "o.safetensors", None, None)], None)
    for name in ("o.keras", "o.h5", "o.onnx"):
        with pytest.raises(UsageError, match="holds 2 .* stacks .*pass --rnn SCOPE"):
            plan(doc, tmp_path / name, Options())


def test_a_directory_output_is_never_named_like_a_file(tmp_path):
    with pytest.raises(UsageError, match="name OUTPUT \\*.keras, \\*.h5, or a directory"):
        plan(document("tf1/multi_stack"), tmp_path / "o.npz", Options())


def test_one_file_writer_refuses_a_directory(tmp_path):
    with pytest.raises(OutputError, match="--format h5-weights writes one file: OUTPUT is a directory"):
        plan(document("tf1/layer_uni"), tmp_path, Options(format="h5-weights"))


# --------------------------------------------------------------------------- refusals before anything

def test_an_output_that_is_an_input_is_refused_first(tmp_path):
    doc = document("tf1/layer_uni")
    index = next(p for p in doc.inputs if str(p).endswith(".index"))
    with pytest.raises(OutputError, match="output is the input"):
        plan(doc, Path(index), Options(format="keras", force=True))
    keras = document("keras/sequential.h5")
    with pytest.raises(OutputError, match="output is the input"):
        plan(keras, FIXTURES / "keras/sequential.h5", Options(force=True))


def test_nothing_to_convert_plans_nothing_unless_forced_for_a_graph(tmp_path):
    assert plan(document("keras3/eligible.keras"), tmp_path / "o.keras", Options(force=True)).route == "nothing"
    empty = Document(source="in", reader="r", nothing=True, reason="why")
    assert decided(plan(empty, tmp_path / "o.keras", Options()))[0] == "nothing"
    assert plan(empty, tmp_path / "o.keras", Options()).reason == "why"


def test_a_document_refusal_comes_before_any_output_check(tmp_path):
    doc = Document(source="in", reader="r", refusal=UsageError("no stack identified"))
    with pytest.raises(UsageError, match="no stack identified"):
        plan(doc, tmp_path / "missing-dir" / "o.keras", Options())


# --------------------------------------------------------------------------- the driver

@pytest.mark.parametrize("verify", [False, True])
def test_a_tf2_refusal_names_the_checkpoint_never_a_staged_file(tmp_path, verify):
    """Issue 28's bug class: whatever plan or a writer says of a TF2 checkpoint is said of the checkpoint
    (its weights are read straight from the bundle: no file stands in for it), with ``--verify`` too (the
    conversion then runs in a private staging directory)."""
    from click.testing import CliRunner

    from gruconv.cli import main as cli

    ckpt = FIXTURES / "tf2/ckpt_seq"
    r = CliRunner().invoke(cli, ["convert", str(ckpt), str(tmp_path / "o.onnx")] + (["--verify"] if verify else []))
    assert r.exit_code == 2 and (r.exception is None or isinstance(r.exception, SystemExit))
    assert f"{ckpt}: the file holds 2 cuDNN RNNs" in r.output
    assert "gruconv-tf2-" not in r.output and ".gruconv-" not in r.output and "weights.h5" not in r.output
    assert list(tmp_path.iterdir()) == []


def test_the_driver_writes_all_or_nothing(tmp_path, monkeypatch):
    """A writer failing on a later target removes what the transaction placed before, and the directory it
    made (``files.outputs.Outputs``)."""
    from gruconv import api
    from gruconv.errors import OutputError as Failed
    from gruconv.writers import rest_npz

    def fail(document, target, warnings):
        raise Failed("disk full", path=target)

    monkeypatch.setattr(rest_npz, "write", fail)
    ckpt = FIXTURES / "tf1/multi_stack"
    assert document("tf1/multi_stack").other_tensors  # rest.npz is the last file written
    with pytest.raises(Failed, match="disk full"):
        api.convert(ckpt, tmp_path / "odir")
    assert list(tmp_path.iterdir()) == []
