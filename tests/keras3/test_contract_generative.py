"""Generative differential test of the output contract (issue 31): ``gruconv convert`` exits 0 IF AND
ONLY IF plain ``keras.saving.load_model`` opens what it wrote.

(a) The real corpus (``fixtures/keras_user``, ``fixtures/keras``, ``fixtures/keras_lstm``: legacy HDF5
files written by tf_keras) mutated one argument at a time — wrong type, out of range, NaN/Infinity,
unknown enumeration, zero/negative sizes, wrong nesting — into a copy of the file (root attr
``model_config``).  For every case: no exception escapes the CLI; exit 0 and the output loads, or exit
3 with one line and no file left.  When the refusal is the validation table's (``keras3/validate.py``),
the same file is converted once more with the check switched off and Keras itself must refuse that
output: the table refused nothing Keras takes.

(b) Random valid models inside the vocabulary, built and saved by tf_keras with CuDNNGRU/CuDNNLSTM
(``tests/contract_models.py``, a child process: tf_keras and Keras 3 do not share one), with reference
outputs from tf_keras's own non-cuDNN GRU/LSTM loading the same file: each converts with exit 0, loads,
and predicts the reference within 1e-5.

Profiles: the default tier runs ``GRUCONV_GENERATIVE_CASES`` cases per part (default 6, derandomized:
the same cases every run), TensorFlow backend; the ``slow`` test (also ``make fuzz``) runs
``GRUCONV_GENERATIVE_LONG_CASES`` (default 60) cases (derandomized; random with ``GRUCONV_GENERATIVE_RANDOM=1``, as ``make fuzz`` runs it) and loads every output again on JAX and torch,
one child process per backend.  A failure shows hypothesis's shrunk example: fixture, layer, argument
and value (or the model spec), and the CLI's output.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import contract_cases as cases
from gruconv.cli import main

QUICK_CASES = int(os.environ.get("GRUCONV_GENERATIVE_CASES", "4"))
LONG_CASES = int(os.environ.get("GRUCONV_GENERATIVE_LONG_CASES", "60"))
#: The long profile is derandomized (the same cases every run) unless ``GRUCONV_GENERATIVE_RANDOM=1``
#: (``make fuzz``): a CI tier must not go red on a case no change of its commit brought; a new class of
#: counterexample is for the fuzz run to find and for a test of its own to keep.
RANDOM_LONG = os.environ.get("GRUCONV_GENERATIVE_RANDOM") == "1"
HERE = Path(__file__).resolve().parents[1]  # tests/: the support modules
NAN, INF = float("nan"), float("inf")
CONFIGS = {p: cases.read_config(p) for p in cases.CORPUS}

#: Plants for any argument: wrong types, out of range, NaN/Infinity, unknown names, sizes <= 0.
PLANTS = [None, True, False, 0, -1, -3, 1, 2.5, -0.5, 0.0, NAN, INF, -INF, "bogus", "", "VALID", [], [0], [-2], [None],
          {"a": 1}, 10 ** 9, "float33", "channels_middle"]


def _slots(config: dict) -> list:
    """(layer number, key[, sub-key]) of every value a mutation may replace (names excluded: renaming
    is not a value Keras checks)."""
    out = []
    for i, layer in enumerate(cases.layers(config)):
        for key, value in layer["config"].items():
            if key in ("name", "layer", "backward_layer", "layers"):
                continue
            out.append((i, key, None))
            if isinstance(value, dict) and isinstance(value.get("config"), dict):
                out.extend((i, key, sub) for sub in value["config"])
    return out


SLOTS = {p: _slots(c) for p, c in CONFIGS.items()}


def _value_for(original):
    """Plants plus mutations of the value there: negated, zeroed, nested one level deeper."""
    derived = [[original], {"value": original}]
    if isinstance(original, (int, float)) and not isinstance(original, bool):
        derived += [-original, original * 1000, 0]
    if isinstance(original, str):
        derived += [original.upper(), original + "x"]
    if isinstance(original, list) and original:
        derived += [original[:-1], original + original[-1:], [-1 if isinstance(x, int) else x for x in original]]
    return st.sampled_from(PLANTS + derived)


@st.composite
def mutations(draw):
    src = draw(st.sampled_from(sorted(CONFIGS)))
    i, key, sub = draw(st.sampled_from(SLOTS[src]))
    config = json.loads(json.dumps(CONFIGS[src]))
    layer = list(cases.layers(config))[i]
    holder = layer["config"] if sub is None else layer["config"][key]["config"]
    target = key if sub is None else sub
    value = draw(_value_for(holder.get(target)))
    holder[target] = value
    return src, layer.get("class_name"), key if sub is None else f"{key}.{sub}", value, config


def _convert(src: Path, out: Path):
    r = CliRunner().invoke(main, ["convert", str(src), str(out)])
    escaped = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
    return r.exit_code, r.output, escaped


def check_mutation(case, keep: list = None) -> None:
    src, cls, arg, value, config = case
    note(f"fixture {src.relative_to(cases.ROOT)}, layer class {cls}, argument {arg}, value {value!r}")
    with tempfile.TemporaryDirectory(prefix="gruconv-contract-") as td:
        td = Path(td)
        mutated = cases.write_config(src, td / "in.h5", config)
        out = td / "out.keras"
        code, output, escaped = _convert(mutated, out)
        note(f"exit {code}: {output.strip()[-400:]}")
        assert escaped is None, f"exception escaped the CLI: {escaped!r}"
        assert code in (0, 3), f"exit {code} (expected 0 or 3): {output}"
        if code == 0 and "nothing to convert" in output:  # no CuDNN layer (fixtures/keras/plain_gru.h5)
            assert not out.exists()
            return
        if code == 0:
            why = cases.load_verdict(out)
            assert why is None, f"exit 0 but keras.saving.load_model refuses the output: {why}"
            if keep is not None:
                keep.append(out.read_bytes())
            return
        lines = [l for l in output.strip().splitlines() if l.startswith("gruconv: error:")]
        assert len(lines) == 1 and "Traceback" not in output, f"not one error line: {output}"
        assert sorted(p.name for p in td.iterdir()) == ["in.h5"], f"left behind: {list(td.iterdir())}"
        if "load_model would refuse it" in output and "would refuse it on " not in output:  # Keras (TF) must agree
            from gruconv.keras3 import validate

            original = validate.check_model
            validate.check_model = lambda doc: None
            try:
                code2, output2, escaped2 = _convert(mutated, td / "unchecked.keras")
            finally:
                validate.check_model = original
            assert escaped2 is None, escaped2
            if code2 == 0 and cases.load_verdict(td / "unchecked.keras") is None:  # TensorFlow loads it:
                refused = cases.refusals_elsewhere([td / "unchecked.keras"])       # and JAX, torch?
                assert any(refused.values()), f"the table refused a value Keras 3 loads on every backend: {output.strip()}"


@settings(max_examples=QUICK_CASES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(mutations())
def test_mutated_corpus_exit0_iff_loads(case):
    check_mutation(case)


def _kept(src, cls, arg, value, config):
    """A kept counterexample: ``check_mutation`` on it (exit 0 iff it loads; a refusal Keras must share),
    inside the one-example Hypothesis test its notes need, then the conversion's own
    ``(exit code, output, escaped exception)`` for the test's assertions."""

    @settings(max_examples=1, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.just((src, cls, arg, value, config)))
    def kept(case):
        check_mutation(case)

    kept()
    with tempfile.TemporaryDirectory(prefix="gruconv-contract-") as td:
        return _convert(cases.write_config(src, Path(td) / "in.h5", config), Path(td) / "o.keras")


@pytest.mark.parametrize("src,cls", [(cases.FIX / "keras" / "bidir_ave.h5", "CuDNNGRU"),
                                     (cases.FIX / "keras_lstm" / "bidir_sum.h5", "CuDNNLSTM")])
@pytest.mark.parametrize("arg", ["return_sequences", "return_state", "stateful"])
def test_nan_where_bidirectional_compares_its_layers_is_refused(src, cls, arg):
    """Kept counterexample of ``make fuzz`` (stop 37): ``return_sequences: NaN`` in a Bidirectional's
    CuDNNGRU exited 0 and Keras 3 refused the output ("Forward layer and backward layer are expected to
    have the same value", ``!=`` on NaN).  The value table lets NaN through for a plain RNN (Keras
    reads it by truthiness); inside a Bidirectional it is exit 3, one line, nothing written."""
    config = cases.set_value(json.loads(json.dumps(cases.read_config(src))), cls, arg, NAN)
    code, output, escaped = _kept(src, cls, arg, NAN, config)
    assert escaped is None and code == 3, output
    assert f"forward and backward layers' {arg} equal, got nan and nan" in output


@pytest.mark.parametrize("src", [cases.FIX / "keras" / "bidir_ave.h5", cases.FIX / "keras" / "sequential.h5"])
@pytest.mark.parametrize("value", ["", {}])
def test_an_empty_iterable_input_shape_is_a_rank_0_input(src, value):
    """Kept counterexample of ``scripts/contract_sweep.py`` (stop 37): ``batch_input_shape: ""`` passed
    the shape rule (Keras's ``standardize_shape`` takes ``tuple()`` of any iterable) but the rank
    tracking read only lists, so the rank-0 input reached the GRU unchecked: exit 0, then Keras refused
    ``ndim=0``.  Now exit 3 naming the GRU, and ``check_mutation`` confirms Keras refuses it too."""
    config = cases.set_value(json.loads(json.dumps(cases.read_config(src))), "InputLayer", "batch_input_shape", value)
    code, output, escaped = _kept(src, "InputLayer", "batch_input_shape", value, config)
    assert escaped is None and code == 3 and "its input has rank 0" in output, output


@pytest.mark.parametrize("value,refused", [(0, True), (False, True), (-2, True), (1, False), (-1, False), (True, False)])
def test_a_concatenate_along_an_axis_its_inputs_disagree_on_is_refused(value, refused):
    """Kept counterexample of ``scripts/contract_sweep.py`` (stop 37): ``axis: 0`` (or ``false``) planted in
    the Concatenate of a 6- and a 10-unit GRU converted with exit 0 and Keras refused the output
    ("requires inputs with matching shapes except for the concatenation axis").  The validator now
    tracks the size of each tensor's last axis where the configs make it certain; the last axis itself
    (1, -1, ``true`` on these rank-2 tensors) still converts, and ``check_mutation`` holds either way."""
    src = cases.FIX / "keras" / "functional_two_gru.h5"
    config = cases.set_value(json.loads(json.dumps(cases.read_config(src))), "Concatenate", "axis", value)
    code, output, escaped = _kept(src, "Concatenate", "axis", value, config)
    assert escaped is None and code == (3 if refused else 0), output
    assert ("tensors whose last axes differ (6, 10)" in output) == refused, output


@pytest.mark.parametrize("value,refused", [(True, True), ("bogus", True), (False, False), (None, False)])
def test_a_concatenate_of_tensors_of_different_ranks_is_refused(value, refused):
    """Kept counterexample of ``scripts/contract_sweep.py`` (stop 37): a truthy ``keepdims`` planted in
    the GlobalMaxPooling1D of ``keras_user/global_pooling.h5`` made its output rank 3, concatenated with a
    rank-2 tensor: exit 0, and Keras refused.  A falsy value still converts."""
    src = cases.FIX / "keras_user" / "global_pooling.h5"
    config = cases.set_value(json.loads(json.dumps(cases.read_config(src))), "GlobalMaxPooling1D", "keepdims", value)
    code, output, escaped = _kept(src, "GlobalMaxPooling1D", "keepdims", value, config)
    assert escaped is None and code == (3 if refused else 0), output
    assert ("concatenates tensors of different ranks (3, 2)" in output) == refused, output


@pytest.mark.parametrize("fixture,cls,arg,value,refused", [
    ("batchnorm_dropout.h5", "BatchNormalization", "axis", 1, "axis 1 has no fixed size in its input (None, None, 16)"),
    ("batchnorm_dropout.h5", "BatchNormalization", "axis", [-2], "axis -2 has no fixed size"),
    ("batchnorm_dropout.h5", "BatchNormalization", "axis", 2, None),
    ("conv1d_gru.h5", "MaxPooling1D", "pool_size", 10 ** 9, "leaves no output from an input of length 26"),
    ("conv1d_gru.h5", "MaxPooling1D", "pool_size", 13, None),
    ("conv1d_gru.h5", "Conv1D", "dilation_rate", 10 ** 9, "leaves no output from an input of length 30"),
    ("conv1d_gru.h5", "Conv1D", "dilation_rate", 7, None),
    ("conv1d_gru.h5", "Conv1D", "strides", 10 ** 9, "(MaxPooling1D): its window leaves no output from an input of length 1"),
])
def test_sizes_keras_checks_against_the_input_are_inferred(fixture, cls, arg, value, refused):
    """Kept counterexamples of ``scripts/contract_sweep.py`` (stop 37), the classes that needed the input's
    sizes, not only its rank: a normalization axis of dynamic size, a pooling or dilated window longer
    than a fixed-length input (a huge Conv1D stride leaves length 1, too short for the pooling after it).
    Each exited 0 and Keras refused the output; the boundary values that load still convert."""
    src = cases.FIX / "keras_user" / fixture
    config = cases.set_value(json.loads(json.dumps(cases.read_config(src))), cls, arg, value)
    code, output, escaped = _kept(src, cls, arg, value, config)
    assert escaped is None and code == (3 if refused else 0), output
    assert refused is None or refused in output, output


@pytest.mark.parametrize("value,refused", [(-0.5, True), (True, True), (False, False)])
def test_return_state_inside_time_distributed_is_refused(value, refused):
    """Kept counterexample of the every-fixture contract sweep (stop 37): a truthy ``return_state`` planted
    in the CuDNNLSTM that ``keras_lstm/time_distributed.h5`` wraps in TimeDistributed exited 0, and Keras's
    ``TimeDistributed.call`` could not reshape the list of outputs.  A falsy value still converts."""
    src = cases.FIX / "keras_lstm" / "time_distributed.h5"
    config = cases.set_value(json.loads(json.dumps(cases.read_config(src))), "CuDNNLSTM", "return_state", value)
    code, output, escaped = _kept(src, "CuDNNLSTM", "return_state", value, config)
    assert escaped is None and code == (3 if refused else 0), output
    assert ("inside a TimeDistributed wrapper" in output) == refused, output


@pytest.mark.parametrize("value,refused", [(None, True), (0, True), (True, False), ("x", False)])
def test_a_bidirectional_hands_its_layers_rank_on(value, refused):
    """Kept counterexample of the every-fixture contract sweep (stop 37): in ``keras_user/bidirectional_classifier.h5``
    (two stacked Bidirectional GRUs) a falsy ``return_sequences`` planted in the first made its output rank 2,
    and the second GRU refused it on load; the rank tracking stopped at every wrapper.  A wrapper's output rank
    is now its layer's (TimeDistributed: one step's, plus the time axis)."""
    src = cases.FIX / "keras_user" / "bidirectional_classifier.h5"
    config = json.loads(json.dumps(cases.read_config(src)))
    first = next(l for l in cases.layers(config) if l.get("class_name") == "CuDNNGRU" and l["config"].get("return_sequences") is True)
    first["config"]["return_sequences"] = value
    code, output, escaped = _kept(src, "CuDNNGRU", "return_sequences", value, config)
    assert escaped is None and code == (3 if refused else 0), output
    assert ("its input has rank 2, Keras 3's GRU takes rank 3" in output) == refused, output


@pytest.mark.parametrize("value,refused", [("", "rank 0"), ({}, "rank 0"), ([None, 3], None),
                                           ([None, None, None, 3], None), ([None, 7, 3], None)])
def test_a_nested_model_fed_a_scalar_is_refused(value, refused):
    """Kept counterexample of ``make fuzz`` (stop 37): ``batch_input_shape: ""`` planted in the outer input of
    ``keras/long_names.h5``, which feeds a nested Sequential taking rank 3, exited 0 and Keras could not
    connect the graph.  Other ranks Keras 3 loads (a first version refused them too, and
    ``check_mutation``'s soundness check caught it): they convert, and ``check_mutation`` holds for each."""
    src = cases.FIX / "keras" / "long_names.h5"
    config = json.loads(json.dumps(cases.read_config(src)))
    config["config"]["layers"][0]["config"]["batch_input_shape"] = value
    code, output, escaped = _kept(src, "InputLayer", "batch_input_shape", value, config)
    assert escaped is None and code == (3 if refused else 0), output
    assert refused is None or f"its input has {refused}, the nested model takes rank 3" in output, output


# --------------------------------------------------------------------------- (b) random valid models

SPEC = st.fixed_dictionaries({
    "cell": st.sampled_from(["gru", "lstm"]),
    "layers": st.integers(1, 2),
    "units": st.integers(1, 6),
    "features": st.integers(1, 5),
    "merge_mode": st.sampled_from([None, "concat", "sum", "mul", "ave"]),  # None: not bidirectional
    "return_sequences": st.booleans(),
    "embedding": st.sampled_from([None, "plain", "mask_zero"]),
    "dense": st.booleans(),
    "seed": st.integers(0, 2 ** 16),
})


def build_models(specs: list, out_dir: Path) -> list:
    """tf_keras (child process) writes each spec's CuDNN model and its reference input/output."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    (out_dir / "specs.json").write_text(json.dumps(specs))
    r = subprocess.run([sys.executable, str(HERE / "contract_models.py"), str(out_dir)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out_dir / "built.json").read_text())


def check_models(specs: list, keep: list = None) -> None:
    import keras

    with tempfile.TemporaryDirectory(prefix="gruconv-models-") as td:
        td = Path(td)
        built = build_models(specs, td)
        for spec, entry in zip(specs, built):
            src, out = td / entry["h5"], td / (Path(entry["h5"]).stem + ".keras")
            code, output, escaped = _convert(src, out)
            assert escaped is None and code == 0, f"spec {spec}: exit {code}: {output} {escaped!r}"
            assert cases.load_verdict(out) is None, f"spec {spec}: output does not load"
            ref = np.load(td / entry["ref"])
            model = keras.saving.load_model(str(out))
            got = model.predict(ref["x"], verbose=0)
            got = got[0] if isinstance(got, list) else got
            err = float(np.max(np.abs(np.asarray(got, np.float64) - ref["y"])))
            assert err <= 1e-5, f"spec {spec}: max abs error {err:.3g} against tf_keras's GRU/LSTM"
            if keep is not None:
                keep.append(out.read_bytes())


@settings(max_examples=1, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(SPEC, min_size=QUICK_CASES, max_size=QUICK_CASES))
def test_random_valid_models_convert_and_match(specs):
    note(f"specs: {specs}")
    check_models(specs)


# --------------------------------------------------------------------------- long profile

_LOAD_ALL = r'''
import os, sys, warnings
warnings.simplefilter("ignore")
import keras
bad = []
for p in sys.argv[1:]:
    try:
        keras.saving.load_model(p)
    except Exception as e:
        bad.append(f"{p}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
'''


@pytest.mark.slow
def test_contract_long_profile(tmp_path):
    """The long profile: random (not derandomized) mutations and models; every output that exited 0
    also loads on JAX and torch (a child process per backend: the backend is fixed per process)."""
    kept: list = []

    @settings(max_examples=LONG_CASES, deadline=None, database=None, derandomize=not RANDOM_LONG,
              suppress_health_check=list(HealthCheck))
    @given(mutations())
    def mutated(case):
        check_mutation(case, kept)

    @settings(max_examples=max(1, LONG_CASES // 30), deadline=None, database=None, derandomize=not RANDOM_LONG,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(SPEC, min_size=10, max_size=10))
    def models(specs):
        note(f"specs: {specs}")
        check_models(specs, kept)

    mutated()
    models()
    paths = []
    for i, data in enumerate(kept):
        p = tmp_path / f"ok{i}.keras"
        p.write_bytes(data)
        paths.append(str(p))
    for backend in ("jax", "torch"):
        env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
        r = subprocess.run([sys.executable, "-c", _LOAD_ALL, *paths], env=env, capture_output=True, text=True,
                           timeout=1200)
        assert r.returncode == 0, f"{backend}: outputs that exited 0 do not load:\n{r.stdout}{r.stderr[-2000:]}"
