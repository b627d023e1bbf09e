"""Legacy files read as the Keras that wrote them (issue 40): same numbers, no false refusals, truthful verdicts.

Fixtures: ``fixtures/keras_dialects/`` (``fixtures/make_dialect_fixtures.py``: real tf_keras CuDNN layers and
its legacy HDF5 writer, the configs rewritten into the dialects older versions wrote).  Independent reference:
tf_keras's own outputs of each original (``reference_outputs.npz``: the file's config with each CuDNN layer as
its CPU twin, weights by tf_keras's ``load_weights``).  The rules: ``src/gruconv/keras3/dialects.py``,
``src/gruconv/keras3/legacy.py``; the table with sources: ``docs/legacy-dialects.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure

from gruconv.cli import main

pytestmark = pytest.mark.xdist_group("test_dialects")

DIALECTS = FIXTURES / "keras_dialects"
MANIFEST = json.loads((DIALECTS / "manifest.json").read_text())
CONVERTS = sorted(n for n, m in MANIFEST.items() if m["expect"] == "converts")
REFUSED = sorted(n for n, m in MANIFEST.items() if m["expect"] == "refused")
CLASSES = Path(__file__).resolve().parents[1] / "custom_layers.py"


def run(*args):
    """The CLI in-process; no exception may escape it (an exit code is gruconv's own)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


def _config_args(name: str) -> list:
    arch = MANIFEST[name]["config"]
    return ["--config", DIALECTS / arch] if arch else []


def _load(path):
    import keras
    from custom_layers import AttentionWeightedAverage

    return keras.saving.load_model(path, custom_objects={"AttentionWeightedAverage": AttentionWeightedAverage})


def _predict(model, x):
    """The model's output on ``x``, passed in the structure its inputs have (a functional model's list)."""
    import keras

    functional = isinstance(model, keras.Model) and not isinstance(model, keras.Sequential)
    return np.asarray(model([x] if functional and isinstance(model.input, list) else x))


@pytest.mark.parametrize("name", CONVERTS)
def test_converts_and_computes_what_tf_keras_computes(tmp_path, name):
    """Each dialect converts (exit 0); plain load_model opens the output, which computes what tf_keras
    computes for the original within 1e-5."""
    out = tmp_path / "out.keras"
    res = run("convert", DIALECTS / name, out, *_config_args(name))
    assert res.exit_code == 0, res.output
    ref = np.load(DIALECTS / "reference_outputs.npz")
    stem = name.split(".")[0]
    got = _predict(_load(out), ref[f"{stem}/x"])
    assert got.shape == ref[f"{stem}/y"].shape
    assert np.max(np.abs(got - ref[f"{stem}/y"])) <= 1e-5


#: Dialect files whose verify is the slow tier's (issue 47: ~5 s); their conversion matches tf_keras's reference
#: quickly above, and verify runs quickly on the others (a hard_sigmoid model, a no-reset_after GRU, a nameless
#: custom layer, a Keras 2.2.4 weights file)
VERIFY_SLOW = {"bidir_go_backwards.h5", "tf113_dtype_initializers.h5", "hard_sigmoid_functional.h5"}
assert VERIFY_SLOW <= set(CONVERTS)


@pytest.mark.parametrize("name", [n if n not in VERIFY_SLOW else pytest.param(n, marks=pytest.mark.slow)
                                  for n in CONVERTS])
def test_verify_passes(tmp_path, name):
    out = tmp_path / "out.keras"
    assert run("convert", DIALECTS / name, out, *_config_args(name)).exit_code == 0
    res = run("verify", DIALECTS / name, out, "--custom-objects", CLASSES, *_config_args(name), "--json",
              tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    rows = [c["name"] for c in report["checks"]]
    custom = name.startswith("nameless")
    # the original run by tf_keras, unless its custom layer's Keras 2 class is not at hand (then said so)
    assert any(r.startswith("end to end (tf_keras)") for r in rows) is not custom
    assert any("not checked, custom layer class(es) AttentionWeightedAverage" in n for n in report["notes"]) is custom


@pytest.mark.parametrize("name", REFUSED)
def test_no_keras3_equivalent_is_refused_in_one_line(tmp_path, name):
    out = tmp_path / "out.keras"
    res = run("convert", DIALECTS / name, out)
    assert res.exit_code == 3
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "Keras 2's hard_sigmoid" in err[0] and "Keras 3 built-in" in err[0], res.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_hard_sigmoid_notes_say_which_layers_are_rescaled(tmp_path):
    res = run("convert", DIALECTS / "hard_sigmoid_neighbours.h5", tmp_path / "o.keras")
    assert res.exit_code == 0, res.output
    for layer in ("lstm_1", "gru_1", "time_distributed_1"):
        assert f"warning: layer '{layer}': Keras 2's hard_sigmoid" in res.stderr
    assert "cu_dnnlstm_1': Keras 2's" not in res.stderr


@pytest.mark.parametrize("fmt,suffix", [("keras-weights", ".weights.h5"), ("h5-weights", ".h5")])
def test_weights_outputs_are_rescaled_too(tmp_path, fmt, suffix):
    """The weights formats hold the same rescaled weights: loaded into the converted architecture they
    compute what tf_keras computes for the original."""
    import keras

    from gruconv.keras3 import config as keras3_config
    from gruconv.readers import keras_h5

    src = DIALECTS / "hard_sigmoid_functional.h5"
    out = tmp_path / f"w{suffix}"
    res = run("convert", src, out, "--format", fmt)
    assert res.exit_code == 0, res.output
    model = keras.models.model_from_json(json.dumps(keras3_config.translate(keras_h5.read(src).model_config)))
    model.load_weights(out)
    ref = np.load(DIALECTS / "reference_outputs.npz")
    got = _predict(model, ref["hard_sigmoid_functional/x"])
    assert np.max(np.abs(got - ref["hard_sigmoid_functional/y"])) <= 1e-5


def test_a_planted_translation_error_fails_verify(tmp_path, monkeypatch):
    """Without the rescale (the translation error main had: Keras 2's hard_sigmoid read as Keras 3's), the
    converted model is off the original; the layer checks cannot see it (they feed the converted layers the
    converted model's activations), the tf_keras end-to-end row does: exit 1, naming it."""
    from gruconv.keras3 import dialects

    src = DIALECTS / "hard_sigmoid_neighbours.h5"
    bad = tmp_path / "bad.keras"
    monkeypatch.setattr(dialects, "CHANGED_FUNCTIONS", {})
    assert run("convert", src, bad).exit_code == 0
    monkeypatch.undo()
    res = run("verify", src, bad, "--json", tmp_path / "r.json")
    assert_parity_failure(res)
    report = json.loads((tmp_path / "r.json").read_text())
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    assert failed == ["end to end (tf_keras): model output"], failed
    assert next(c for c in report["checks"] if not c["passed"])["max_abs"] > 1e-3


def test_without_tf_keras_verify_says_what_it_could_not_check(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tf_keras", None)  # import tf_keras: ModuleNotFoundError, as uninstalled
    out = tmp_path / "o.keras"
    src = DIALECTS / "hard_sigmoid_neighbours.h5"
    assert run("convert", src, out).exit_code == 0
    res = run("verify", src, out, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert not any(c["name"].startswith("end to end (tf_keras)") for c in report["checks"])
    assert any("not checked, tf_keras is not installed" in n for n in report["notes"]), report["notes"]
    assert report["environment"]["keras2_reference"].startswith("not run: tf_keras is not installed")


def test_later_input_shape_ignored_with_a_note(tmp_path):
    name = "k224_input_shape_everywhere_weights.h5"
    res = run("convert", DIALECTS / name, tmp_path / "o.keras", *_config_args(name))
    assert res.exit_code == 0, res.output
    assert ("layer cu_dnnlstm_2: its batch_input_shape says 8 features, the layer before it gives 32; ignored, "
            "as Keras 2's Sequential did") in res.stderr


def test_nameless_layer_gets_its_saved_name(tmp_path):
    from gruconv.keras3.legacy import keras2_names

    out = tmp_path / "o.keras"
    assert run("convert", DIALECTS / "nameless_custom_attention.h5", out).exit_code == 0
    assert "attention_weighted_average_1" in [l.name for l in _load(out).layers]
    # the naming rule alone: saved names by position; a fresh Keras 2 name when positions do not agree
    cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "Dense", "config": {"name": "d", "units": 2}}, {"class_name": "MyLayer", "config": {}}]}}
    assert keras2_names(cfg, ["d", "saved"])["config"]["layers"][1]["config"]["name"] == "saved"
    assert keras2_names(cfg, ["other", "saved"])["config"]["layers"][1]["config"]["name"] == "my_layer_1"
    assert "name" not in cfg["config"]["layers"][1]["config"]  # the input is not changed


def test_a_model_of_cudnn_layers_only_skips_the_tf_keras_row_with_a_note(tmp_path):
    """Nothing around the cuDNN layers to translate: the layer checks cover the model whole (with the
    original's own options), so the tf_keras run (a second copy of every weight) is not made; said so."""
    res = run("verify", FIXTURES / "keras" / "bidir_concat.h5", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert not any(c["name"].startswith("end to end (tf_keras)") for c in report["checks"])
    assert any("(tf_keras): not needed: the model holds nothing but its cuDNN layers" in n for n in report["notes"])
    assert report["environment"]["keras2_reference"].startswith("not run: not needed")
