"""Legacy Keras CuDNNGRU / CuDNNLSTM files -> Keras 3: structure, numbers, and controls that must fail.

One module for both cells (issue #28 item 6, it was ``test_keras_h5.py`` for GRU and
``test_keras_lstm.py`` for LSTM): every test over fixture files runs per cell of
:data:`gruconv.model.canonical.CELLS`, on ``fixtures/keras`` (CuDNNGRU files) and
``fixtures/keras_lstm`` (CuDNNLSTM files, and files mixing CuDNNLSTM and CuDNNGRU); a test that
only makes sense for one cell's fixtures is a plain test naming that directory.

The numerical reference is built independently of the converter: the tensors are read straight
from the HDF5 file by the dataset paths in each directory's ``manifest.json``, packed into the
buffer the way tf_keras's ``CuDNNGRU._process_batch`` / ``CuDNNLSTM._process_batch`` pack them
(restated below), split by the golden-tested cuDNN layout, and run through the float64 oracle.
The Keras LSTM layout itself is checked against real cuDNN buffers (``fixtures/cudnn-golden-lstm``).
"""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from conftest import FIXTURES
from gruconv import api
from gruconv.model.canonical import CELLS, GateParams, RNNStack, StackShape
from gruconv.model.cudnn_layout import pack, unpack
from gruconv.model.keras_layout import cudnn_opaque, from_cudnn, to_cudnn, to_keras_lstm
from gruconv.verify.reference.oracle import run_stack

#: Each cell's fixture directory, and the manifest key listing its cuDNN layers (the GRU manifest
#: is the older one: ``cudnngru_layers``, no ``class``, a wrapper's name as ``path`` with the
#: wrapped layer's in ``wrapped_name``; :func:`_layer` brings it to the LSTM manifest's form).
DIRS = {"gru": FIXTURES / "keras", "lstm": FIXTURES / "keras_lstm"}
LAYERS_KEY = {"gru": "cudnngru_layers", "lstm": "cudnn_layers"}
assert set(DIRS) == set(LAYERS_KEY) == set(CELLS)
CUDNN_CLASS = {cell: f"CuDNN{spec.title}" for cell, spec in CELLS.items()}  # CuDNNGRU, CuDNNLSTM
CELL = {cls: cell for cell, cls in CUDNN_CLASS.items()}
GOLDEN = FIXTURES / "cudnn-golden-lstm"
GOLDEN_FILES = sorted(p.name for p in GOLDEN.glob("*.npz") if "proj" not in p.name)  # Keras LSTM: no projection
MANIFEST = {cell: json.loads((d / "manifest.json").read_text())["fixtures"] for cell, d in DIRS.items()}


def _layer(entry, cell):
    """A manifest layer entry in one form: ``class`` set, ``path`` the full path of the cuDNN layer."""
    return {"class": CUDNN_CLASS[cell], **entry,
            "path": "/".join(p for p in (entry["path"], entry.get("wrapped_name")) if p)}


LAYERS = {(cell, name): [_layer(e, cell) for e in entry[LAYERS_KEY[cell]]]
          for cell in CELLS for name, entry in MANIFEST[cell].items()}
ALL_FILES = [pytest.param(cell, name, id=f"{cell}-{name}") for cell in CELLS for name in sorted(MANIFEST[cell])]
CONVERTIBLE = [pytest.param(cell, name, id=f"{cell}-{name}") for cell in CELLS for name in sorted(MANIFEST[cell])
               if not MANIFEST[cell][name]["weights_only"] and LAYERS[cell, name]]
#: The fixtures ``verify`` runs on in the default tier: a state output (GRU return_state, LSTM bidir_state and
#: return_state: the c-state row), two outputs of one Bidirectional (bidir_none), a stateful model, float16,
#: go_backwards, a GRU beside an LSTM (mixed), TimeDistributed.  The others' verify is the slow tier's (issue 47:
#: 17 s of the quick tier's wall); their conversion is checked quickly against the float64 reference above, and
#: ``tests/verify/test_verify.py`` verifies a sample of the same files (nested, sequential) quickly too.
VERIFY_QUICK = {("gru", "return_state.h5"), ("gru", "bidir_none.h5"), ("gru", "stateful.h5"), ("gru", "float16.h5"),
                ("gru", "go_backwards.h5"), ("lstm", "bidir_state.h5"), ("lstm", "return_state.h5"),
                ("lstm", "mixed.h5"), ("lstm", "time_distributed.h5")}
assert VERIFY_QUICK <= {tuple(p.values) for p in CONVERTIBLE}
VERIFIED = [p if tuple(p.values) in VERIFY_QUICK else pytest.param(*p.values, id=p.id, marks=pytest.mark.slow)
            for p in CONVERTIBLE]


# --------------------------------------------------------------------------- independent reference

def tf_keras_pack(cls, kernel, recurrent_kernel, bias):
    """tf_keras ``_process_batch``, restated from the layers' literal slices.

    CuDNNLSTM: kernel[:, :H], [H:2H], [2H:3H], [3H:], the same of recurrent_kernel, then
    bias[:H], [H:2H], ..., [7H:]; CuDNNGRU: r, z, h = blocks 1, 0, 2 of the kernels, then biases
    flattened as stored in that order (input side, then recurrent side).
    """
    H = recurrent_kernel.shape[0]
    k, rk, b = kernel, recurrent_kernel, bias
    parts = {
        "CuDNNLSTM": lambda: [k[:, :H], k[:, H:2 * H], k[:, 2 * H:3 * H], k[:, 3 * H:],
                              rk[:, :H], rk[:, H:2 * H], rk[:, 2 * H:3 * H], rk[:, 3 * H:]]
        + [b[j * H:(j + 1) * H] for j in range(8)],
        "CuDNNGRU": lambda: [k[:, H:2 * H], k[:, :H], k[:, 2 * H:], rk[:, H:2 * H], rk[:, :H], rk[:, 2 * H:],
                             b[H:2 * H], b[:H], b[2 * H:3 * H], b[4 * H:5 * H], b[3 * H:4 * H], b[5 * H:]],
    }[cls]()
    return np.concatenate([np.ravel(p) for p in parts])


def reference(entry, raw, x):
    """Outputs of the ORIGINAL layer (float64) for batch-major x, per tf_keras semantics:
    ``output, [h, c]`` (LSTM) or ``output, [h]`` (GRU); Bidirectional: merged outputs, then the
    forward layer's states, then the backward layer's."""
    H, I, cls = entry["units"], entry["input_size"], entry["class"]
    shape = StackShape(I, H, cell=CELL[cls])
    lead = x.shape[:-2]
    x = x.reshape((-1,) + x.shape[-2:])  # TimeDistributed: the extra axis folds into the batch

    def run(arrays, reverse):
        buf = tf_keras_pack(cls, *arrays).astype(np.float64)
        xi = x[:, ::-1] if reverse else x
        y, hy, cy = run_stack(RNNStack("ref", shape, unpack(buf, shape)), xi.transpose(1, 0, 2))
        return y.transpose(1, 0, 2), [hy[0]] + ([] if cy is None else [cy[0]])

    seq = entry["return_sequences"]
    if entry["wrapper"] != "Bidirectional":
        y, st = run(raw["forward"], entry["go_backwards"])
        outs = [y if seq else st[0]] + (st if entry["return_state"] else [])
    else:
        (yf, stf), (yb, stb) = run(raw["forward"], False), run(raw["backward"], True)
        fw, bw = (yf, yb[:, ::-1]) if seq else (stf[0], stb[0])
        outs = {"concat": [np.concatenate([fw, bw], -1)], "sum": [fw + bw], "mul": [fw * bw],
                "ave": [(fw + bw) / 2], None: [fw, bw]}[entry["merge_mode"]]
        outs += stf + stb if entry["return_state"] else []
    return [o.reshape(lead + o.shape[1:]) for o in outs]


def raw_weights(path, entry):
    with h5py.File(path, "r") as f:
        return {d: tuple(f[entry["h5_weights"][d][r]][()] for r in ("kernel", "recurrent_kernel", "bias"))
                for d in entry["h5_weights"]}


def find_layer(model, entry):
    parts = entry["path"].split("/")
    if entry["wrapper"]:
        parts = parts[:-1]  # the wrapper is the layer that is called
    layer = model
    for p in parts:
        layer = layer.get_layer(p)
    return layer


def as_list(keras, out):
    return [np.asarray(keras.ops.convert_to_numpy(o), np.float64) for o in (out if isinstance(out, (list, tuple))
                                                                            else [out])]


def sample_input(entry, batch, rng):
    shape = (batch, 3, 9, entry["input_size"]) if entry["wrapper"] == "TimeDistributed" else \
        (batch, 9, entry["input_size"])
    return rng.uniform(-1, 1, shape)


@pytest.fixture(scope="module")
def keras():
    from gruconv.keras3.runtime import keras as k

    return k()


class _Converted(dict):
    """``converted[cell, name]``: the file converted to .keras, once per module (on first use)."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def __missing__(self, key):
        cell, name = key
        (self.out / cell).mkdir(exist_ok=True)
        result = self[key] = api.convert(DIRS[cell] / name, self.out / cell / name.replace(".h5", ".keras"))
        return result


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return _Converted(tmp_path_factory.mktemp("converted"))


# --------------------------------------------------------------------------- inspect

@pytest.mark.parametrize("cell, name", ALL_FILES)
def test_inspect_matches_manifest(cell, name):
    info = api.inspect(DIRS[cell] / name)
    expected = LAYERS[cell, name]
    assert [r["name"] for r in info["rnns"]] == [e["path"] for e in expected]
    for got, exp in zip(info["rnns"], expected):
        sh = got["shape"]
        assert (sh["units"], sh["input_size"], sh["dtype"]) == (exp["units"], exp["input_size"], exp["dtype"])
        assert got["cell"] == CELL[exp["class"]] == sh["cell"]
        assert got["kind"] == (exp["class"] if exp["wrapper"] is None else f"{exp['wrapper']}({exp['class']})")
        assert sh["bidirectional"] == (exp["wrapper"] == "Bidirectional")
        assert got["converts_to"].startswith(
            {None: "", "Bidirectional": "Bidirectional(", "TimeDistributed": "TimeDistributed("}[exp["wrapper"]]
            + CELLS[CELL[exp["class"]]].title + "(")
        if not MANIFEST[cell][name]["weights_only"]:
            for flag in ("return_sequences", "return_state", "go_backwards", "stateful"):
                assert got["options"].get(flag, False) == exp[flag], flag
            if exp["wrapper"] == "Bidirectional":
                assert got["merge_mode"] == exp["merge_mode"]


def test_inspect_lists_gru_and_lstm_of_a_mixed_model():
    from click.testing import CliRunner

    from gruconv.cli import main

    r = CliRunner().invoke(main, ["inspect", str(DIRS["lstm"] / "mixed.h5")])
    assert r.exit_code == 0, r.output
    targets = [l for l in r.output.splitlines()
               if l.startswith(("    -> torch: ", "    -> onnx: ", "    -> openvino: ", "    -> tflite: "))]
    assert len(targets) == 12  # per RNN what the torch, onnx, OpenVINO and .tflite targets get (issues 21, 46)
    profiles = [l for l in r.output.splitlines() if l.startswith("  tflite ")]
    assert [p.split(":")[0] for p in profiles] == ["  tflite mobile", "  tflite micro", "  tflite int8"], profiles
    lines = [l for l in r.output.splitlines() if l not in targets and l not in profiles]
    eligibility = next(i for i, l in enumerate(lines) if l.startswith("cuDNN eligibility"))
    lines, eligibility = lines[:eligibility], lines[eligibility:]  # what the converted layers run on (issue 22)
    assert eligibility[-1].startswith("  summary: tensorflow 4 cudnn;"), eligibility
    assert lines[1] == ("  cu_dnngru: CuDNNGRU, input 5, units 6, 1 layer(s), uni, linear input, float32, "
                        "234 params")
    assert lines[3] == ("  bidirectional/cu_dnnlstm: Bidirectional(CuDNNLSTM), input 6, units 4, 1 layer(s), bi, "
                        "linear input, float32, 384 params")
    assert lines[4] == ("    -> Bidirectional(LSTM(units=4, activation='tanh', recurrent_activation='sigmoid', "
                        "return_sequences=True), merge_mode='concat')")
    assert lines[5] == ("    bias: cuDNN's input and recurrent biases summed in float64, rounded once to float32 "
                        "(LSTM has one bias; at most half an ulp per bias value)")
    assert lines[6].startswith("  cu_dnnlstm_1: CuDNNLSTM, input 8, units 3,")
    assert len(lines) == 9


def test_attributes_stored_as_bytes_also_read(tmp_path):
    """Keras 2.0-era writers stored attributes as fixed-length bytes; both spellings read the same."""
    src = DIRS["gru"] / "sequential.h5"
    copy = tmp_path / "bytes.h5"
    shutil.copy(src, copy)
    with h5py.File(copy, "r+") as f:
        cfg = f.attrs["model_config"]
        f.attrs["model_config"] = np.bytes_(cfg.encode() if isinstance(cfg, str) else cfg)
        g = f["model_weights"]
        g.attrs["layer_names"] = np.array([n.encode() if isinstance(n, str) else n for n in g.attrs["layer_names"]],
                                          dtype="S")
    a, b = api.inspect(src), api.inspect(copy)
    assert [r["shape"]["units"] for r in a["rnns"]] == [r["shape"]["units"] for r in b["rnns"]]


# --------------------------------------------------------------------------- numbers

@pytest.mark.parametrize("cell, name", CONVERTIBLE)
def test_converted_layers_match_float64_reference(cell, name, converted, keras):
    model = keras.saving.load_model(converted[cell, name].outputs[0])  # plain Keras 3: no custom objects
    rng = np.random.default_rng(7)
    for entry in LAYERS[cell, name]:
        raw = raw_weights(DIRS[cell] / name, entry)
        layer = find_layer(model, entry)
        batch = MANIFEST[cell][name]["inputs"][0]["shape"][0] if entry["stateful"] else 4
        x = sample_input(entry, batch, rng).astype(entry["dtype"])
        if entry["stateful"]:
            layer.reset_states()
        got = as_list(keras, layer(x))
        ref = reference(entry, raw, x.astype(np.float64))
        assert len(got) == len(ref)
        tol = 4e-3 if entry["dtype"] == "float16" else 1e-5
        for g, r in zip(got, ref):
            assert g.shape == r.shape
            err = np.abs(g - r).max()
            assert err <= tol, f"{name} {entry['path']}: max abs error {err:.3e}"


@pytest.mark.parametrize("cell, name", VERIFIED)
def test_verify_passes(cell, name, converted):
    from gruconv.verify import verify

    rep = verify(DIRS[cell] / name, converted[cell, name].outputs[0], reference="oracle")
    assert rep.passed, [(c.name, c.max_abs) for c in rep.checks]
    entries = LAYERS[cell, name]
    assert {c.name.split(":")[0] for c in rep.checks} >= {e["path"] for e in entries}
    if any(e["return_state"] and "c" in CELLS[CELL[e["class"]]].states for e in entries):
        assert any(c.name.endswith("state c") for c in rep.checks)


def keras_layers_deep(keras, model):
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from keras_layers_deep(keras, layer)
        for attr in ("forward_layer", "backward_layer", "layer"):
            inner = getattr(layer, attr, None)
            if inner is not None:
                yield inner


#: What a converted layer of each cell must be configured as to run on cuDNN in Keras 3, and the
#: per-entry manifest facts its config carries over.
CUDNN_CONFIG = {
    "gru": {"activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True, "reset_after": True},
    "lstm": {"activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True, "unroll": False,
             "dropout": 0.0, "recurrent_dropout": 0.0},
}
ENTRY_CONFIG = {"gru": (), "lstm": ("unit_forget_bias",)}
#: Keras 3 bias shape by cell, for G gates of H units: GRU (reset_after) keeps both biases.
KERAS_BIAS_SHAPE = {"gru": lambda G, H: (2, G * H), "lstm": lambda G, H: (G * H,)}


@pytest.mark.parametrize("cell, name", CONVERTIBLE)
def test_converted_model_keeps_names_and_signature(cell, name, converted, keras):
    import tf_keras  # the original framework, to compare model signatures (never runs a cuDNN layer)

    from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU  # noqa: F401 - registers the class
    from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM  # noqa: F401 - registers the class

    original = tf_keras.models.load_model(DIRS[cell] / name, compile=False)
    model = keras.saving.load_model(converted[cell, name].outputs[0])
    assert model.name == original.name
    assert [l.name for l in model.layers] == [l.name for l in original.layers]
    assert [tuple(t.shape) for t in model.inputs] == [tuple(t.shape) for t in original.inputs]
    assert [tuple(t.shape) for t in model.outputs] == [tuple(t.shape) for t in original.outputs]
    checked = 0
    for layer in keras_layers_deep(keras, model):
        for layer_cell, spec in CELLS.items():
            if isinstance(layer, getattr(keras.layers, spec.title)):
                cfg = layer.get_config()
                assert {k: cfg[k] for k in CUDNN_CONFIG[layer_cell]} == CUDNN_CONFIG[layer_cell], layer.name
                checked += 1
    assert checked >= len(LAYERS[cell, name])


@pytest.mark.parametrize("cell", CELLS)
def test_converted_config_is_cudnn_compatible(cell, converted, keras):
    for name in (p.values[1] for p in CONVERTIBLE if p.values[0] == cell):
        model = keras.saving.load_model(converted[cell, name].outputs[0])
        for entry in LAYERS[cell, name]:
            layer = find_layer(model, entry)
            inner = getattr(layer, "forward_layer", None) or getattr(layer, "layer", None) or layer
            layer_cell = CELL[entry["class"]]
            assert type(inner) is getattr(keras.layers, CELLS[layer_cell].title), (name, entry["path"])
            cfg = inner.get_config()
            expected = {**CUDNN_CONFIG[layer_cell], **{k: entry[k] for k in ENTRY_CONFIG[layer_cell]}}
            assert {k: cfg[k] for k in expected} == expected, (name, entry["path"])
            G, H, I = CELLS[layer_cell].num_gates, entry["units"], entry["input_size"]
            assert [tuple(w.shape) for w in inner.weights] == [
                (I, G * H), (H, G * H), KERAS_BIAS_SHAPE[layer_cell](G, H)], (name, entry["path"])


def test_non_gru_weights_carried_over_byte_for_byte(converted, keras):
    model = keras.saving.load_model(converted["gru", "functional_two_gru.h5"].outputs[0])
    with h5py.File(DIRS["gru"] / "functional_two_gru.h5", "r") as f:
        for layer in model.layers:
            if isinstance(layer, keras.layers.Dense):
                g = f["model_weights"][layer.name]
                names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
                stored = [g[n][()] for n in names]
                for a, b in zip(layer.get_weights(), stored):
                    assert a.tobytes() == b.tobytes()


# --------------------------------------------------------------------------- the Keras layout

#: Keras block (of kernel / recurrent_kernel) that holds cuDNN gate g: a CuDNNGRU stores z, r, h.
KERAS_BLOCK_OF_GATE = {"gru": (1, 0, 2), "lstm": (0, 1, 2, 3)}


def _random_cudnn_weights(cell, I, H, rng):
    G = CELLS[cell].num_gates
    return rng.standard_normal((I, G * H)), rng.standard_normal((H, G * H)), rng.standard_normal(2 * G * H)


@pytest.mark.parametrize("cell", CELLS)
def test_reader_and_cudnn_packing_agree(cell):
    """from_cudnn (converter) equals unpack(cudnn_opaque) (reference), to_cudnn inverts it, and
    cudnn_opaque is tf_keras's packing restated."""
    rng = np.random.default_rng(3)
    I, H = 5, 4
    k, rk, b = _random_cudnn_weights(cell, I, H, rng)
    p = from_cudnn(k, rk, b, cell=cell)
    q = unpack(cudnn_opaque(k, rk, b, cell), StackShape(I, H, dtype="float64", cell=cell))[0]
    for a, c in zip((p.input_weights, p.recurrent_weights, p.input_bias, p.recurrent_bias),
                    (q.input_weights, q.recurrent_weights, q.input_bias, q.recurrent_bias)):
        np.testing.assert_array_equal(a, c)
    for a, c in zip(to_cudnn(p, cell), (k, rk, b)):
        np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(cudnn_opaque(k, rk, b, cell), tf_keras_pack(CUDNN_CLASS[cell], k, rk, b))


@pytest.mark.parametrize("cell", CELLS)
def test_input_kernel_is_reinterpreted_not_transposed(cell):
    """The trap DESIGN.md names: a cuDNN-layer input kernel block is reshape(H, I), not .T."""
    I, H = 3, 2
    G = CELLS[cell].num_gates
    k = np.arange(I * G * H, dtype=np.float64).reshape(I, G * H)
    zeros = (np.zeros((H, G * H)), np.zeros(2 * G * H))
    p = from_cudnn(k, *zeros, cell=cell)
    for g, block in enumerate(KERAS_BLOCK_OF_GATE[cell]):
        np.testing.assert_array_equal(p.input_weights[g], k[:, block * H:(block + 1) * H].reshape(H, I))
    first = KERAS_BLOCK_OF_GATE[cell][0]
    assert not np.array_equal(p.input_weights[0], k[:, first * H:(first + 1) * H].T)
    # the cell-parameterised functions give the same answer called again (positional cell as well)
    np.testing.assert_array_equal(cudnn_opaque(k, *zeros, cell), cudnn_opaque(k, *zeros, cell=cell))
    q = from_cudnn(k, *zeros, cell=cell)
    np.testing.assert_array_equal(q.input_weights, p.input_weights)


def test_lstm_bias_is_summed_in_float64_and_rounded_once():
    rng = np.random.default_rng(5)
    H, I = 16, 3
    k = rng.standard_normal((I, 4 * H)).astype(np.float32)
    rk = rng.standard_normal((H, 4 * H)).astype(np.float32)
    b = (rng.standard_normal(8 * H) * 10).astype(np.float32)
    bias = to_keras_lstm(from_cudnn(k, rk, b, cell='lstm'))[2]
    assert bias.dtype == np.float32 and bias.shape == (4 * H,)
    np.testing.assert_array_equal(bias, (b[:4 * H].astype(np.float64) + b[4 * H:].astype(np.float64))
                                  .astype(np.float32))


# --------------------------------------------------------------------------- controls that must fail

def _hard_sigmoid(keras, layer, raw, H, I):
    cfg = layer.get_config()
    cfg["recurrent_activation"] = "hard_sigmoid"
    bad = type(layer).from_config(cfg)
    bad.build((None, None, I))
    bad.set_weights(layer.get_weights())
    return bad


def _reshape_only_bias(keras, layer, raw, H, I):
    """The kernels loaded as stored, the (6H,) bias merely reshaped to (2, 3H)."""
    k, rk, b = raw["forward"]
    layer.set_weights([k, rk, b.reshape(2, -1)])
    return layer


def _bias_not_summed(keras, layer, raw, H, I):
    """Only the input-side half of the (8H,) bias kept (a (8H,) -> (4H,) "fix")."""
    k, rk, _ = layer.get_weights()
    layer.set_weights([k, rk, raw["forward"][2][:4 * H].astype("float32")])
    return layer


def _kernel_transposed_not_reshaped(keras, layer, raw, H, I):
    """Per gate W = block.T instead of block.reshape(H, I): the Keras block becomes the stored one."""
    _, rk, b = layer.get_weights()
    layer.set_weights([raw["forward"][0].astype("float32"), rk, b])
    return layer


CONTROLS = {"hard_sigmoid": _hard_sigmoid, "reshape_only_bias": _reshape_only_bias,
            "bias_not_summed": _bias_not_summed, "kernel_transposed_not_reshaped": _kernel_transposed_not_reshaped}
CONTROLS_OF_CELL = {"gru": ("hard_sigmoid", "reshape_only_bias"),
                    "lstm": ("hard_sigmoid", "bias_not_summed", "kernel_transposed_not_reshaped")}


@pytest.mark.parametrize("cell, control", [pytest.param(cell, c, id=f"{cell}-{c}")
                                           for cell in CELLS for c in CONTROLS_OF_CELL[cell]])
def test_controls_fail_the_numerical_check(cell, control, converted, keras):
    """Plausible wrong conversions (ones Keras 2-era recipes produce) must fail the check that the
    real one passes."""
    name = "sequential.h5"
    entry = LAYERS[cell, name][0]  # LSTM: I=6, H=8, so reshape and transpose differ
    raw = raw_weights(DIRS[cell] / name, entry)
    model = keras.saving.load_model(converted[cell, name].outputs[0])
    layer = find_layer(model, entry)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 9, entry["input_size"])).astype("float32")
    ref = reference(entry, raw, x.astype(np.float64))[0]
    good = np.abs(as_list(keras, layer(x))[0] - ref).max()
    assert good <= 1e-5
    layer = CONTROLS[control](keras, layer, raw, entry["units"], entry["input_size"])
    err = np.abs(as_list(keras, layer(x))[0] - ref).max()
    assert err > 1e-2, f"{control}: error {err:.3e} should be far outside 1e-5"


# --------------------------------------------------------------------------- weights-only files

def _rebuild_gru_from_json(keras):
    """The architecture rebuilt by hand in Keras 3 from the JSON, as a user would: GRU where it has CuDNNGRU."""
    arch = json.loads((DIRS["gru"] / "weights_only.json").read_text())
    layers = arch["config"]["layers"]
    model = keras.Sequential(name=arch["config"]["name"])
    model.add(keras.Input(tuple(layers[0]["config"]["batch_input_shape"][1:])))
    for l in layers[1:]:
        c = l["config"]
        if l["class_name"] == "CuDNNGRU":
            model.add(keras.layers.GRU(c["units"], return_sequences=c["return_sequences"], reset_after=True,
                                       recurrent_activation="sigmoid", name=c["name"]))
        else:
            assert l["class_name"] == "Dense"
            model.add(keras.layers.Dense(c["units"], activation=c["activation"], name=c["name"]))
    return model


def _rebuild_mixed_by_hand(keras):
    """The mixed architecture rebuilt by hand in Keras 3 (GRU / LSTM for the cuDNN layers)."""
    return keras.Sequential([
        keras.Input((None, 5)),
        keras.layers.GRU(6, return_sequences=True, reset_after=True, name="cu_dnngru"),
        keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True), name="bidirectional"),
        keras.layers.LSTM(3, name="cu_dnnlstm_1"),
        keras.layers.Dense(2, name="dense"),
    ])


WEIGHTS_ONLY = {  # per cell: the rebuilt model, the cells the converter reports, the Keras layers --config gives
    "gru": (_rebuild_gru_from_json, ["gru", "gru"], ["GRU", "GRU", "Dense"]),
    "lstm": (_rebuild_mixed_by_hand, ["gru", "lstm", "lstm"], ["GRU", "Bidirectional", "LSTM", "Dense"]),
}


@pytest.mark.parametrize("cell", CELLS)
def test_weights_only_to_h5_loads_into_rebuilt_keras3_model(cell, tmp_path, keras):
    out = tmp_path / "w.h5"
    result = api.convert(DIRS[cell] / "weights_only.h5", out)
    assert result.outputs == [str(out)]
    rebuild, cells, _ = WEIGHTS_ONLY[cell]
    assert [r["cell"] for r in result.rnns] == cells
    model = rebuild(keras)
    model.load_weights(str(out))
    entries = LAYERS[cell, "weights_only.h5"]
    rng = np.random.default_rng(2)
    act = rng.uniform(-1, 1, (3, 7, entries[0]["input_size"]))
    for entry in entries:  # each layer fed the reference output of the one before
        raw = raw_weights(DIRS[cell] / "weights_only.h5", entry)
        got = as_list(keras, find_layer(model, entry)(act.astype("float32")))[0]
        ref = reference(entry, raw, act.astype("float32").astype(np.float64))[0]
        assert np.abs(got - ref).max() <= 1e-5, entry["path"]
        act = ref


@pytest.mark.parametrize("cell", CELLS)
def test_weights_only_with_config_gives_keras_model(cell, tmp_path, keras):
    out = tmp_path / "w.keras"
    api.convert(DIRS[cell] / "weights_only.h5", out, config=DIRS[cell] / "weights_only.json")
    model = keras.saving.load_model(out)
    assert [type(l).__name__ for l in model.layers] == WEIGHTS_ONLY[cell][2]


@pytest.mark.parametrize("cell", CELLS)
def test_weights_only_without_config_refuses_keras_output(cell, tmp_path):
    from gruconv.errors import UsageError

    with pytest.raises(UsageError, match="--config"):
        api.convert(DIRS[cell] / "weights_only.h5", tmp_path / "w.keras")
    assert not (tmp_path / "w.keras").exists()


def test_nothing_to_convert_writes_nothing_unless_forced(tmp_path, keras):
    out = tmp_path / "plain.keras"
    r = api.convert(DIRS["gru"] / "plain_gru.h5", out)
    assert r.nothing_to_convert and not out.exists()
    r = api.convert(DIRS["gru"] / "plain_gru.h5", out, force=True)
    assert out.exists()
    keras.saving.load_model(out)


# --------------------------------------------------------------------------- options, training config

def test_optimizer_state_dropped_with_warning(converted):
    warnings = converted["gru", "options.h5"].warnings
    assert any("optimizer state" in w and "dropped" in w for w in warnings)


def test_training_config_carried_over(converted, keras):
    """tf.keras wrote optimizer 'Custom>Adam' and loss 'mse'; the converted model is compiled with both."""
    assert not any("training config" in w for w in converted["gru", "options.h5"].warnings)
    model = keras.saving.load_model(converted["gru", "options.h5"].outputs[0])
    assert type(model.optimizer).__name__ == "Adam"
    assert abs(float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)) - 1e-3) < 1e-9
    assert model.loss == "mse"


REGULARIZED = {"gru": "regularized_gru", "lstm": "regularized_lstm"}
#: The options each cell's options.h5 leaves unset (null in the original config, None once converted).
UNSET_IN_OPTIONS = {"gru": set(), "lstm": {"recurrent_regularizer", "bias_regularizer", "activity_regularizer",
                                          "kernel_constraint", "recurrent_constraint"}}


@pytest.mark.parametrize("cell", CELLS)
def test_regularizers_constraints_initializers_carried(cell, converted, keras):
    model = keras.saving.load_model(converted[cell, "options.h5"].outputs[0])
    cfg = model.get_layer(REGULARIZED[cell]).get_config()
    with h5py.File(DIRS[cell] / "options.h5", "r") as f:
        original = next(l for l in json.loads(f.attrs["model_config"])["config"]["layers"]
                        if l["class_name"] == CUDNN_CLASS[cell])["config"]
    for key in ("kernel_initializer", "recurrent_initializer", "bias_initializer", "kernel_regularizer",
                "recurrent_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                "recurrent_constraint", "bias_constraint"):
        if key in UNSET_IN_OPTIONS[cell]:
            assert original[key] is None and cfg[key] is None, key
            continue
        assert cfg[key]["class_name"] == original[key]["class_name"], key
        # Keras 3 may add arguments with their defaults (HeNormal: input_axes/output_axes = None)
        assert {k: v for k, v in cfg[key]["config"].items() if k in original[key]["config"]} == \
            original[key]["config"], key
    assert any("bias_constraint" in w for w in converted[cell, "options.h5"].warnings)


def test_lstm_options_carried(converted, keras):
    model = keras.saving.load_model(converted["lstm", "options.h5"].outputs[0])
    cfg = model.get_layer("regularized_lstm").get_config()
    assert cfg["unit_forget_bias"] is False
    assert cfg["kernel_initializer"]["class_name"] == "HeNormal"
    assert cfg["recurrent_initializer"]["config"]["gain"] == 0.5
    assert cfg["bias_initializer"]["config"]["value"] == 0.1
    assert cfg["kernel_regularizer"]["class_name"] == "L2"
    assert cfg["bias_constraint"]["class_name"] == "MaxNorm"
    assert any("bias_constraint" in w and "(4*units,)" in w and "(8*units,)" in w
               for w in converted["lstm", "options.h5"].warnings)


def test_keras_2_2_style_config_converts(tmp_path):
    """A Keras <= 2.2.2-style file (derived from the GRU sequential.h5: no "module" keys, the
    Sequential config a bare layer list, no InputLayer, attributes as bytes) converts and matches
    the reference."""
    from gruconv.verify import verify

    path = tmp_path / "k22.h5"
    shutil.copy(DIRS["gru"] / "sequential.h5", path)

    def strip(o):
        if isinstance(o, dict):
            o.pop("module", None)
            o.pop("registered_name", None)
            for v in o.values():
                strip(v)
        elif isinstance(o, list):
            for v in o:
                strip(v)

    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        strip(cfg)
        layers = cfg["config"]["layers"]
        layers[1]["config"]["batch_input_shape"] = layers[0]["config"]["batch_input_shape"]
        for layer in layers:
            layer["config"].pop("time_major", None)
        cfg["config"] = layers[1:]
        f.attrs["model_config"] = np.bytes_(json.dumps(cfg).encode())
        f.attrs["keras_version"] = np.bytes_(b"2.2.2")
    out = tmp_path / "k22.keras"
    api.convert(path, out)
    rep = verify(path, out, reference="oracle")
    # the layer, the Sequential end to end, and the original as tf_keras reads the Keras 2.2 file (issue 40)
    assert rep.passed and len(rep.checks) == 4 and rep.checks[-1].name == "end to end (tf_keras): model output"


# --------------------------------------------------------------------------- layout, against real cuDNN

def _golden(name):
    with np.load(GOLDEN / name) as d:
        g = {k: d[k] for k in d.files}
    g["config"] = json.loads(str(g["config"]))
    return g


def _golden_shape(g):
    c = g["config"]
    return StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", "float32", "lstm")


def _golden_params(g, shape):
    out = []
    for p in range(shape.num_pseudo_layers):
        has_w = f"W{p}_0" in g
        out.append(GateParams(
            np.stack([g[f"W{p}_{k}"] for k in range(4)]) if has_w else None,
            np.stack([g[f"W{p}_{k}"] for k in range(4, 8)]),
            np.stack([g[f"b{p}_{k}"] for k in range(4)]),
            np.stack([g[f"b{p}_{k}"] for k in range(4, 8)])))
    return out


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_layout_round_trip_against_real_cudnn(name):
    """Every golden LSTM buffer: unpack/pack bit for bit; and each pseudo-layer stored as a CuDNNLSTM
    (to_cudnn) packs, the way the layer packs, to exactly that pseudo-layer's regions of cuDNN's
    own weight space, and reads back (from_cudnn) bit for bit."""
    g = _golden(name)
    shape = _golden_shape(g)
    params = _golden_params(g, shape)
    np.testing.assert_array_equal(pack(params, shape), g["opaque"])
    for p, q in zip(unpack(g["opaque"], shape), params):
        for key, arr in q.arrays().items():
            np.testing.assert_array_equal(getattr(p, key), arr)
    layout = g["layout"]
    for p, q in enumerate(params):
        if q.input_weights is None:
            continue  # skip input: a CuDNNLSTM is always linear input
        rows = layout[layout[:, 0] == p]
        rows = rows[np.lexsort((rows[:, 1], rows[:, 2]))]  # matrices (k 0..7), then biases
        regions = np.concatenate([g["opaque"][off:off + n] for off, n in rows[:, 3:5]])
        k, rk, b = to_cudnn(q, 'lstm')
        I, H = q.input_weights.shape[2], q.recurrent_weights.shape[1]
        assert (k.shape, rk.shape, b.shape) == ((I, 4 * H), (H, 4 * H), (8 * H,))
        np.testing.assert_array_equal(cudnn_opaque(k, rk, b, 'lstm'), regions)
        np.testing.assert_array_equal(tf_keras_pack("CuDNNLSTM", k, rk, b), regions)
        back = from_cudnn(k, rk, b, cell='lstm')
        for key, arr in q.arrays().items():
            np.testing.assert_array_equal(getattr(back, key), arr)


@pytest.mark.parametrize("name", [n for n in GOLDEN_FILES if "varlen" not in n])
def test_keras_lstm_weights_reproduce_cudnn(name, keras):
    """to_keras_lstm's arrays in Keras 3 LSTMs (float64; skip input = identity kernels) reproduce cuDNN's
    own float64 outputs: y, hy and cy of every golden file (stacked, bidirectional, skip input)."""
    g = _golden(name)
    shape = _golden_shape(g)
    params = _golden_params(g, shape)
    x = g["x"].astype(np.float64).transpose(1, 0, 2)  # batch-major
    hy, cy = [], []
    for layer in range(shape.num_layers):
        outs = []
        for d in range(shape.num_directions):
            p = shape.pseudo_layer(layer, d)
            lstm = keras.layers.LSTM(shape.units, return_sequences=True, return_state=True, go_backwards=d == 1,
                                     dtype="float64")
            lstm.build((None, None, x.shape[-1]))
            lstm.set_weights([w.astype(np.float64) for w in
                              to_keras_lstm(params[p].astype(np.float64), shape.layer_input_size(layer))])
            y, h, c = as_list(keras, lstm(x, initial_state=[g["h0"][p].astype(np.float64),
                                                            g["c0"][p].astype(np.float64)]))
            outs.append(y[:, ::-1] if d == 1 else y)
            hy.append(h)
            cy.append(c)
        x = np.concatenate(outs, -1)
    assert np.abs(x.transpose(1, 0, 2) - g["y_f64"]).max() <= 1e-12
    assert np.abs(np.stack(hy) - g["hy_f64"]).max() <= 1e-12
    assert np.abs(np.stack(cy) - g["cy_f64"]).max() <= 1e-12


# --------------------------------------------------------------------------- the writers registry (issue 16)

def test_batch_keras_weights_output_is_named_weights_h5(tmp_path):
    """``--format keras-weights`` is Keras 3's weights file, named ``.weights.h5`` for every input
    (it was ``sequential.keras`` holding HDF5 bytes for a Keras HDF5 input), and loads back."""
    from gruconv import batch

    summary = batch.convert_many([DIRS["gru"] / "sequential.h5"], tmp_path / "o", jobs=1, echo=False,
                                 format="keras-weights")
    assert summary.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if not p.name.startswith(".")) == \
        ["sequential.weights.h5"]
    assert (tmp_path / "o" / "sequential.weights.h5").read_bytes()[:4] == b"\x89HDF"


@pytest.mark.parametrize("flags, named", [
    (["--return-state"], "--return-state"),
    (["--mask-input", "--initial-state"], "--initial-state, --mask-input"),
    (["--rnn", "x", "--num-units", "3"], "--num-units, --rnn"),
])
def test_options_no_reader_or_writer_reads_are_refused(tmp_path, flags, named):
    """An option neither the Keras HDF5 reader nor the writer reads is a usage error naming it, in
    one line, exit 2, nothing written (it was silently ignored, exit 0)."""
    from click.testing import CliRunner

    from gruconv.cli import main

    out = tmp_path / "o.keras"
    res = CliRunner().invoke(main, ["convert", str(DIRS["gru"] / "sequential.h5"), str(out)] + flags)
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("gruconv: error: ") and named in lines[0], res.output
    assert "a Keras HDF5 file converted to .keras" in lines[0]
    assert not out.exists()


def test_options_the_writer_reads_still_pass(tmp_path):
    """``--config`` is the Keras HDF5 reader's: a weights-only file with it converts (control for
    the refusal above)."""
    res = api.convert(DIRS["gru"] / "weights_only.h5", tmp_path / "o.keras", config=DIRS["gru"] / "weights_only.json")
    assert res.outputs == [str(tmp_path / "o.keras")]
