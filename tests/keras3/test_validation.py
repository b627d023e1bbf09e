"""The streamed writer's validation table (``gruconv.keras3.validation_table``) against Keras 3 itself.

For every class and argument in the table, the values of ``scripts/make_keras3_validation.py``'s
battery (the default, wrong types, out of range, NaN/Infinity, unknown names, zero/negative sizes,
wrong nesting, every enumeration member and its upper-case twin) are judged twice: by the table
(:func:`gruconv.keras3.validate.problem`) and by Keras (the object deserialized from its config in
safe mode and built on a symbolic input, as ``load_model`` does).  Any disagreement fails, listed.
A planted table bug is shown caught.  The default tier compares five classes of issue 31's measured
cases; the slow tier every class.

Issue 31's measured cases go through the CLI on both routes: the streamed writer and the Keras-built
fallback (forced) each exit 3 with one line and leave nothing; valid values pass both.
"""

from __future__ import annotations

import copy
import importlib
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import contract_cases as cases
from gruconv.cli import main
from gruconv.keras3.validation_table import TABLE

ROOT = Path(__file__).resolve().parents[2]
#: The classes compared whole in the default tier; the slow tier compares every class.  Dropout (issue 31's
#: ``rate`` case, still run through the CLI below) compares in the slow tier: 87 s of the quick tier's wall on
#: the loaded box (issue 47), its rules the simplest of the five; Bidirectional and MaxPooling1D too (16 s and
#: 12 s: every argument's battery on three backends), their rules still compared quickly where a table bug would
#: show (``test_planted_table_bug_is_caught``'s merge_mode case) and refused through the CLI below.
QUICK = ["InputLayer", "Concatenate"]


@pytest.fixture(scope="module")
def gen():
    """The generator module (imports Keras): its probe, battery and comparison."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("make_keras3_validation")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


@pytest.mark.parametrize("cls", QUICK)
def test_table_agrees_with_keras_quick(gen, cls):
    assert gen.compare(classes=[cls]) == []


@pytest.mark.slow
@pytest.mark.parametrize("section,cls", [(s, c) for s in ("layers", "initializers", "regularizers", "constraints")
                                         for c in TABLE[s] if not (s == "layers" and c in QUICK)])
def test_table_agrees_with_keras(gen, section, cls):
    assert gen.compare(classes=[cls], section=section) == []


@pytest.mark.slow
def test_table_is_what_the_generator_writes(gen):
    """The committed table is the generator's output for the installed Keras (not hand-edited)."""
    assert gen.build() == TABLE


@pytest.mark.parametrize("cls,arg,mutate,caught", [
    ("Dense", "units", lambda r: r.update(min=0), "Dense.units = 0: table accepts, Keras refuses"),
    # 11 s of the quick tier (a float range's battery on three backends): the slow tier's (issue 47); Dense.units
    # is the quick "table accepts, Keras refuses" case
    pytest.param("Dropout", "rate", lambda r: r.update(max=3), "Dropout.rate = 2.5: table accepts, Keras refuses",
                 marks=pytest.mark.slow),
    ("Bidirectional", "merge_mode", lambda r: r["values"].remove("ave"),
     "Bidirectional.merge_mode = 'ave': table refuses, Keras accepts"),
    # TensorFlow takes a negative seed, JAX does not (uint32): only the every-backend comparison sees it
    ("Dropout", "seed", lambda r: r.pop("min"), "Dropout.seed = -3: table accepts, Keras refuses on jax"),
])
def test_planted_table_bug_is_caught(gen, cls, arg, mutate, caught):
    table = copy.deepcopy(TABLE)
    mutate(table["layers"][cls][arg])
    bad = gen.compare(table=table, classes=[cls], args=[arg])
    assert any(line.endswith(caught) or caught in line for line in bad), bad


def _case(tmp_path, i):
    fx, cls, arg, value = cases.USER_CASES[i]
    src = cases.FIX / fx
    return cases.write_config(src, tmp_path / f"case{i}.h5", cases.set_value(cases.read_config(src), cls, arg, value))


@pytest.mark.parametrize("i", range(len(cases.USER_CASES)))
def test_measured_case_refused_by_streamed_writer(tmp_path, i):
    """Issue 31: each measured value is refused before anything is written, one line naming layer,
    argument and value; no Keras is imported for it (no fallback)."""
    fx, cls, arg, value = cases.USER_CASES[i]
    src = _case(tmp_path, i)
    out = tmp_path / "out.keras"
    r = CliRunner().invoke(main, ["convert", str(src), str(out)])
    assert r.exit_code == 3 and r.exception is None or isinstance(r.exception, SystemExit), r.output
    line = r.output.strip()
    assert "\n" not in line and line.startswith("gruconv: error:")
    shown_arg = "batch_shape" if arg == "batch_input_shape" else arg  # Keras 3's name for it
    assert f"({cls}): {shown_arg} must " in line and "streaming writer" not in line, line
    assert str(value if not isinstance(value, list) else value[-1]) in line, line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def _forced_fallback(monkeypatch):
    """The Keras-built route, as ``writers/keras_model._write_graph`` takes it when the streamed
    writer raises UnsupportedError (a layer or training config outside its vocabulary)."""
    from gruconv.errors import UnsupportedError
    from gruconv.keras3 import archive

    def refuse(*a, **k):
        raise UnsupportedError("forced for the test")

    monkeypatch.setattr(archive, "write_keras_h5_doc", refuse)


FALLBACK = [1, 2, pytest.param(6, marks=pytest.mark.slow), pytest.param(9, marks=pytest.mark.slow),
            pytest.param(10, marks=pytest.mark.slow)]  # Dense units, Dropout rate; Embedding input_dim, dtype, activation


@pytest.mark.parametrize("i", FALLBACK)
def test_fallback_route_refuses_the_same(tmp_path, monkeypatch, i):
    """The Keras-built route judges a value the streamed writer refuses the same way: exit 3, one
    line, nothing written (Keras's own refusal, not a traceback or an internal error)."""
    src = _case(tmp_path, i)
    _forced_fallback(monkeypatch)
    out = tmp_path / "out.keras"
    r = CliRunner().invoke(main, ["convert", str(src), str(out)])
    assert r.exit_code == 3 and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    err = [l for l in r.output.strip().splitlines() if l.startswith("gruconv: error:")]
    assert len(err) == 1 and "Traceback" not in r.output, r.output
    assert not out.exists()


#: Values Keras 3 takes on TensorFlow and refuses on JAX or torch (the long generative profile's
#: counterexamples of session 29, and what the every-backend table comparison found after them).
TF_ONLY = [
    ("keras_user/text_classifier.h5", "Dense", "kernel_initializer",
     {"class_name": "GlorotUniform", "config": {"seed": -3}}, "seed"),
    ("keras_lstm/sequential.h5", "CuDNNLSTM", "recurrent_initializer",
     {"class_name": "Orthogonal", "config": {"gain": [-2.0], "seed": None}}, "gain"),
    ("keras_user/text_classifier.h5", "Dense", "kernel_initializer",
     {"class_name": "RandomNormal", "config": {"mean": 0.0, "stddev": -1.0, "seed": None}}, "stddev"),
    ("keras_user/batchnorm_dropout.h5", "BatchNormalization", "synchronized", True, "synchronized"),
    ("keras/sequential.h5", "InputLayer", "ragged", True, "ragged"),
    ("keras/sequential.h5", "InputLayer", "sparse", True, "sparse"),
]


def _refused_tf_only_values(tmp_path):
    """Each :data:`TF_ONLY` value converted through the CLI: exit 3, one line naming the argument, nothing
    written.  Returns ``[(mutated input, output path, fixture, argument)]``."""
    made = []
    for i, (fx, cls, arg, value, named) in enumerate(TF_ONLY):
        src = cases.FIX / fx
        mutated = cases.write_config(src, tmp_path / f"in{i}.h5", cases.set_value(cases.read_config(src), cls, arg, value))
        out = tmp_path / f"out{i}.keras"
        r = CliRunner().invoke(main, ["convert", str(mutated), str(out)])
        assert r.exit_code == 3 and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
        line = r.output.strip()
        assert "\n" not in line and line.startswith("gruconv: error:") and f"{named} must" in line, line
        assert not out.exists()
        made.append((mutated, out, fx, arg))
    return made


def test_a_value_only_tensorflow_loads_is_refused(tmp_path):
    """The output must load on every backend: each value TensorFlow's Keras alone takes is refused (exit 3, one
    line naming the argument, nothing written).  Why each refusal is right is the slow test below (17 s of child
    processes on JAX and torch: issue 47's quick-tier budget)."""
    assert len(_refused_tf_only_values(tmp_path)) == len(TF_ONLY)


@pytest.mark.slow
def test_a_value_only_tensorflow_loads_is_refused_and_why(tmp_path):
    """The refusals above are not the table's whim: TensorFlow's Keras loads each file converted with the check
    off, and JAX's or torch's Keras refuses that same file."""
    from gruconv.keras3 import validate

    unchecked = []
    for mutated, out, fx, arg in _refused_tf_only_values(tmp_path):
        original = validate.check_model
        validate.check_model = lambda doc: None
        try:
            r = CliRunner().invoke(main, ["convert", str(mutated), str(out)])
        finally:
            validate.check_model = original
        assert r.exit_code == 0, r.output
        assert cases.load_verdict(out) is None, (fx, arg)  # TensorFlow's Keras loads it
        unchecked.append(str(out))
    refused = cases.refusals_elsewhere(unchecked)
    assert all(refused[p] for p in unchecked), refused


@pytest.mark.parametrize("fx,cls,arg,value", [
    ("keras_user/conv1d_gru.h5", "Conv1D", "padding", "SAME"),
    ("keras_user/batchnorm_dropout.h5", "Dropout", "rate", 0.0),
    ("keras_user/text_classifier.h5", "Dense", "activation", "gelu"),
])
def test_valid_value_passes_both_routes(tmp_path, monkeypatch, fx, cls, arg, value):
    """A changed but valid value: both routes write a file plain ``load_model`` opens."""
    src = cases.FIX / fx
    cfg = cases.set_value(cases.read_config(src), cls, arg, value)
    mutated = cases.write_config(src, tmp_path / "in.h5", cfg)
    verdicts = []
    for route in ("streamed", "fallback"):
        if route == "fallback":
            _forced_fallback(monkeypatch)
        out = tmp_path / f"{route}.keras"
        r = CliRunner().invoke(main, ["convert", str(mutated), str(out)])
        verdicts.append((r.exit_code, out.exists() and cases.load_verdict(out) is None))
    assert verdicts[0] == verdicts[1] == (0, True), verdicts


@pytest.mark.parametrize("cls", [c if c in ("GRU", "Conv1D", "Dense") else pytest.param(c, marks=pytest.mark.slow)
                                 for c in sorted(TABLE["input_ndim"])])
def test_input_rank_rule_agrees_with_keras(gen, cls):
    """The input ranks each class takes (its constructor's ``input_spec``): the table's verdict and
    Keras's build agree for ranks 1 to 4."""
    from gruconv.errors import InputError
    from gruconv.keras3 import validate

    obj = gen.base_config("layers", cls)
    for rank in (1, 2, 3, 4):
        try:
            validate.check_layer(obj, "", rank)
            ours = True
        except InputError:
            ours = False
        assert ours == gen.rank_verdict(cls, rank), f"{cls} on a rank-{rank} input"


@pytest.mark.parametrize("layer_cls, arg, value", [("Embedding", "input_dim", 50000), ("Embedding", "output_dim", 3),
                                                   ("Dense", "units", 7), ("Conv1D", "filters", 9),
                                                   ("Conv1D", "kernel_size", [4])])
def test_a_config_that_no_longer_fits_its_stored_weights_is_refused(tmp_path, layer_cls, arg, value):
    """The generative test's open counterexample (docs/testing.md): a value Keras accepts, but one the
    stored weights of that layer no longer fit (``Embedding input_dim: 50000`` over a stored (1000, 16)
    table) converted with exit 0 into a file ``load_model`` refuses.  The shapes a config fixes are
    checked against the stored weights first: exit 3, one line, nothing written."""
    import json
    import shutil

    import h5py

    src = next(p for p in sorted((cases.FIX / "keras_user").glob("*.h5"))
               if f'"class_name": "{layer_cls}"' in h5py.File(p, "r").attrs.get("model_config", ""))
    path = tmp_path / src.name
    shutil.copy(src, path)
    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        layers = cfg["config"]["layers"] if isinstance(cfg["config"], dict) else cfg["config"]
        layer = next(l for l in layers if l["class_name"] == layer_cls)
        layer["config"][arg] = value
        f.attrs["model_config"] = json.dumps(cfg)
    out = tmp_path / "out.keras"
    r = CliRunner().invoke(main, ["convert", str(path), str(out)])
    assert r.exit_code == 3 and not isinstance(r.exception, (AssertionError, TypeError)), r.output
    # refused here, or (a size the next cuDNN layer reads) by the writer's features check before it
    assert ("has shape" in r.output or "should be" in r.output) and r.output.count("\n") == 1, r.output
    assert not out.exists() and not list(tmp_path.glob(".*tmp*"))


@pytest.mark.parametrize("name", ["keras/bidir_ave.h5", "keras/stateful.h5"])
def test_stateful_needs_a_fixed_batch_size(tmp_path, name):
    """The generative test's counterexample: ``stateful: true`` planted in a model whose inputs have a
    free batch size converted with exit 0, and Keras 3 refuses to build it.  Now exit 3, one line; the
    real stateful fixture (a fixed batch size) still converts."""
    import json
    import shutil

    import h5py

    path = tmp_path / "in.h5"
    shutil.copy(cases.FIX / name, path)
    planted = name.endswith("bidir_ave.h5")
    if planted:
        with h5py.File(path, "r+") as f:
            cfg = json.loads(f.attrs["model_config"])
            text = json.dumps(cfg).replace('"stateful": false', '"stateful": true')
            assert text != json.dumps(cfg)
            f.attrs["model_config"] = text
    out = tmp_path / "out.keras"
    r = CliRunner().invoke(main, ["convert", str(path), str(out)])
    if planted:
        assert r.exit_code == 3 and "stateful" in r.output and r.output.count("\n") == 1, r.output
        assert not out.exists()
    else:
        assert r.exit_code == 0 and out.exists(), r.output


def test_a_bool_size_is_the_int_keras_takes():
    """``Dense(units=True)`` builds a one-unit kernel in Keras (a bool is an int there): the stored-weight
    check compares against 1, so a file whose Dense has more units is refused, one with one unit is not."""
    from gruconv.keras3.config import _own_vars, fits

    (role, _, kernel), (_, _, bias) = _own_vars("Dense", {"units": True})
    assert kernel == (None, 1) and bias == (1,)
    assert fits(kernel, (8, 1)) and not fits(kernel, (8, 3))


def test_return_state_inside_a_sequential_is_refused(tmp_path):
    """The generative test's counterexample: ``return_state: true`` planted on a CuDNNGRU of a Sequential
    converted with exit 0, and Keras 3 cannot build the model (the next layer gets two tensors)."""
    import json
    import shutil

    import h5py

    path = tmp_path / "in.h5"
    shutil.copy(cases.FIX / "keras" / "sequential.h5", path)
    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        layer = next(l for l in cfg["config"]["layers"] if l["class_name"] == "CuDNNGRU")
        layer["config"]["return_state"] = True
        f.attrs["model_config"] = json.dumps(cfg)
    out = tmp_path / "out.keras"
    r = CliRunner().invoke(main, ["convert", str(path), str(out)])
    assert r.exit_code == 3 and "return_state" in r.output and r.output.count("\n") == 1, r.output
    assert not out.exists()


def test_a_reference_to_a_state_the_layer_no_longer_returns_is_refused(tmp_path):
    """The generative test's counterexample: ``return_state: null`` planted on a CuDNNLSTM whose states feed
    the next layers converted with exit 0, and Keras 3 cannot rebuild the graph ("list index out of range")."""
    import json
    import shutil

    import h5py

    path = tmp_path / "in.h5"
    shutil.copy(cases.FIX / "keras_lstm" / "return_state.h5", path)
    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        layer = next(l for l in cfg["config"]["layers"] if l["class_name"] == "CuDNNLSTM"
                     and l["config"].get("return_state"))
        layer["config"]["return_state"] = None
        f.attrs["model_config"] = json.dumps(cfg)
    out = tmp_path / "out.keras"
    r = CliRunner().invoke(main, ["convert", str(path), str(out)])
    assert r.exit_code == 3 and "returns 1" in r.output and r.output.count("\n") == 1, r.output
    assert not out.exists()


# --------------------------------------------------------------------------- last-axis sizes (merges)

def _feature_cases():
    import keras

    L = keras.layers
    seq, flat = (4, 5), (5,)
    return [
        (L.Dense(7), [flat]), (L.Embedding(10, 7), [(3,)]), (L.Conv1D(7, 1), [seq]), (L.GRU(7), [seq]),
        (L.LSTM(7, return_sequences=True), [seq]), (L.SimpleRNN(7), [seq]),
        *[(layer, [seq]) for layer in (L.Dropout(0.1), L.SpatialDropout1D(0.1), L.GaussianDropout(0.1),
                                       L.GaussianNoise(0.1), L.AlphaDropout(0.1), L.Activation("relu"),
                                       L.BatchNormalization(), L.LayerNormalization(), L.Masking(),
                                       L.MaxPooling1D(2), L.AveragePooling1D(2), L.GlobalMaxPooling1D(),
                                       L.GlobalAveragePooling1D(), L.ZeroPadding1D(), L.Cropping1D(),
                                       L.UpSampling1D(), L.ReLU(), L.LeakyReLU(), L.Softmax(), L.ELU(), L.PReLU())],
        (L.RepeatVector(3), [flat]), (L.TimeDistributed(L.Dense(7)), [seq]),
        (L.Bidirectional(L.GRU(7)), [seq]), (L.Bidirectional(L.GRU(7), merge_mode="sum"), [seq]),
        (L.Concatenate(), [flat, (7,)]), (L.Concatenate(axis=1), [seq, (6, 5)]), (L.Add(), [flat, (1,)]),
        (L.Multiply(), [flat, flat]),
    ]


def test_last_axis_sizes_agree_with_keras():
    """``validate.features_out`` (what the merge check compares) against Keras's own
    ``compute_output_shape`` for every class it names, on the layer's own ``get_config()``; a class it
    does not know gives None, never a guess."""
    import keras

    from gruconv.keras3 import validate

    wrong = []
    for layer, shapes in _feature_cases():
        ins = [keras.KerasTensor((None, *s), dtype="int32" if isinstance(layer, keras.layers.Embedding) else "float32")
               for s in shapes]
        out = layer(ins if len(ins) > 1 else ins[0])
        doc = {"class_name": type(layer).__name__, "config": keras.saving.serialize_keras_object(layer)["config"]}
        ours = validate.features_out(doc, [s[-1] for s in shapes])
        unsure_ok = isinstance(layer, keras.layers.Concatenate) and layer.axis != -1  # the rank decides
        if ours != out.shape[-1] and not (ours is None and unsure_ok):
            wrong.append((type(layer).__name__, ours, out.shape[-1]))
    assert wrong == []
    assert validate.features_out({"class_name": "Flatten", "config": {}}, [5]) is None
    assert validate.features_out({"class_name": "GRU", "config": {"units": 7, "return_state": True}}, [5]) is None


def test_output_shapes_agree_with_keras():
    """``validate.shape_out`` (what the size checks read: a normalized axis must be fixed, a window must
    leave a positive length) against Keras's symbolic output shapes, fixed and dynamic time axes, every
    padding mode: each axis it gives is Keras's (``None`` only where Keras has ``None``); an axis it
    cannot tell is ``UNKNOWN``, never a guess."""
    import keras

    from gruconv.keras3 import validate

    L = keras.layers
    more = [(L.Conv1D(3, 4, strides=st, padding=p, dilation_rate=d), [(t, 5)]) for p in ("valid", "same", "causal")
            for st, d in ((3, 1), (1, 2), (1, 1)) for t in (30, None, 11)]
    more += [(cls(pool_size=k, strides=st, padding=p), [(t, 5)]) for cls in (L.MaxPooling1D, L.AveragePooling1D)
             for k, st in ((2, None), (3, 2), (5, 1)) for p in ("valid", "same") for t in (30, None, 7)]
    more += [(L.GRU(4, return_sequences=rs), [(t, 5)]) for rs in (True, False) for t in (30, None)]
    more += [(L.GlobalMaxPooling1D(keepdims=True), [(9, 5)]), (L.Bidirectional(L.LSTM(3, return_sequences=True)), [(9, 5)])]
    wrong = []
    for layer, shapes in _feature_cases() + more:
        ins = [keras.KerasTensor((None, *s), dtype="int32" if isinstance(layer, keras.layers.Embedding) else "float32")
               for s in shapes]
        out = layer(ins if len(ins) > 1 else ins[0])
        doc = {"class_name": type(layer).__name__, "config": keras.saving.serialize_keras_object(layer)["config"]}
        ours = validate.shape_out(doc, [(None, *shapes[0])] if len(shapes) == 1 else [None])
        if ours is None:
            continue
        if len(ours) != len(out.shape) or any(o != k and o != validate.UNKNOWN for o, k in zip(ours, out.shape)):
            wrong.append((type(layer).__name__, doc["config"].get("padding"), shapes, ours, tuple(out.shape)))
    assert wrong == []
    bidir_states = keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True, return_state=True))
    assert validate.shape_out({"class_name": "Bidirectional",
                               "config": keras.saving.serialize_keras_object(bidir_states)["config"]},
                              [(None, 9, 5)]) is None  # outputs of several shapes: none claimed
    known = sum(validate.shape_out({"class_name": type(l).__name__, "config": keras.saving.serialize_keras_object(l)["config"]},
                                   [(None, *s[0])]) is not None for l, s in more)
    assert known == len(more)  # every window layer above is inferred, not skipped


def test_a_bidirectional_of_two_outputs_inside_a_sequential(tmp_path):
    """The long generative profile's counterexample (2026-12-07): ``merge_mode: null`` planted on the first
    Bidirectional of a Sequential converted with exit 0, and Keras 3 refused the output (the next layer gets the
    two directions as two tensors).  Refused in one line now, nothing written."""
    src = cases.FIX / "keras_user" / "bidirectional_classifier.h5"
    mutated = cases.write_config(src, tmp_path / "in.h5",
                                 cases.set_value(cases.read_config(src), "Bidirectional", "merge_mode", None))
    out = tmp_path / "out.keras"
    r = CliRunner().invoke(main, ["convert", str(mutated), str(out)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 3 and r.output.count("\n") == 1, r.output
    assert "merge_mode is None (two output tensors) inside a Sequential model" in r.output, r.output
    assert not out.exists()


def test_a_bidirectional_of_two_outputs_may_end_a_sequential():
    """As the Sequential's last layer the two tensors are the model's outputs, and Keras 3 loads it: the rule
    judges Keras's own config of both models as Keras's loader does (the middle one refused, the last one not)."""
    import keras

    from gruconv.errors import InputError
    from gruconv.keras3 import validate

    m = keras.Sequential([keras.Input((5, 3)), keras.layers.Bidirectional(keras.layers.GRU(4), merge_mode=None)])
    last = {"class_name": "Sequential", "config": m.get_config()}
    validate._check_container(last, "")
    middle = copy.deepcopy(last)  # Keras cannot build this one, so its Dense is appended to the config
    middle["config"]["layers"].append(keras.saving.serialize_keras_object(keras.layers.Dense(2)))
    with pytest.raises(InputError, match="merge_mode is None"):
        validate._check_container(middle, "")
