"""Regenerate ``src/gruconv/keras3/validation_table.py``: per class and argument of the streaming
writer's vocabulary, the values Keras 3 (the pinned 3.15.1) accepts when it loads a model.

Why generated: :mod:`gruconv.keras3.validate` must refuse, without importing Keras, every value
``keras.saving.load_model`` would refuse (issue 31).  The argument lists and their kinds come from
Keras itself (the ``get_config()`` of each class built with its required arguments, the same objects
``scripts/make_keras3_defaults.py`` reads; the kind follows the default's type and the argument's
name); the name lists (dtypes, activations, initializers, ...) are the candidates Keras's own
``get``/``DTypePolicy`` resolve; where Keras checks a value inside ``__init__`` or ``build`` the rule
below names the file and function it mirrors.

The same module holds the probe (:func:`keras_verdict`) and the battery of values
(:func:`battery`) with which ``tests/keras3/test_validation.py`` compares the table with Keras, argument by
argument; ``--check`` runs that comparison here and prints every disagreement.

Run: ``PYTHONPATH=src .venv/bin/python scripts/make_keras3_validation.py [--check]``.
"""

from __future__ import annotations

import copy
import math
import os
import pprint
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # --verdicts: the parent names the child's backend
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))  # this tree's gruconv

import keras  # noqa: E402
from keras.src.saving import serialization_lib  # noqa: E402

from make_keras3_defaults import CONSTRAINTS, INITIALIZERS, LAYERS, REGULARIZERS  # noqa: E402

TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "gruconv", "keras3",
                      "validation_table.py")

# --------------------------------------------------------------------------- rules
# Rules by argument name (any class), then by (class, argument); a class entry wins.
POS_INT = {"kind": "int", "min": 1}
RATE = {"kind": "number", "min": 0, "max": 1}
BY_NAME = {
    "dtype": {"kind": "dtype", "policy_ok": True},
    "activation": {"kind": "activation"},
    "recurrent_activation": {"kind": "activation"},
    # keras/src/layers/rnn/gru.py GRUCell.__init__ (and lstm.py, simple_rnn.py): `if units <= 0`;
    # `dropout = min(1.0, max(0.0, dropout))`: any number is clipped, a non-number raises
    "units": POS_INT,
    "dropout": {"kind": "number", "nonfinite_ok": True, "nan_ok": True},
    "recurrent_dropout": {"kind": "number", "nonfinite_ok": True, "nan_ok": True},
    # keras/src/random/seed_generator.py SeedGenerator.__init__ / keras/src/layers/layer.py: int or None.
    # The seed becomes a tensor of `random_seed_dtype()` (`draw_seed`, `SeedGenerator` state): uint32 on
    # JAX (keras/src/backend/jax/core.py), so a negative seed or one >= 2**32 loads on TensorFlow (int64)
    # and torch (masked to 32 bits) but raises OverflowError on JAX (the long generative profile's
    # counterexample, session 29: GlorotUniform(seed=-3)).  The output must load on every backend.
    "seed": {"kind": "int", "nullable": True, "bool_ok": False, "min": 0, "max": 2 ** 32 - 1},
    # keras/src/layers/layer.py Layer.__init__: "Expected `trainable` to be a boolean"
    "trainable": {"kind": "enum", "values": [True, False]},
}
ARGS = {
    # keras/src/layers/core/dense.py Dense.__init__: `not isinstance(units, int) or units <= 0`
    ("Dense", "units"): POS_INT,
    # keras/src/layers/core/embedding.py Embedding.__init__: input_dim / output_dim positive ints
    # (and `or isinstance(input_dim, bool)`)
    ("Embedding", "input_dim"): {**POS_INT, "bool_ok": False}, ("Embedding", "output_dim"): {**POS_INT, "bool_ok": False},
    # keras/src/layers/regularization/dropout.py Dropout.__init__: None, or a list of ints > 0 / None
    ("Dropout", "noise_shape"): {"kind": "shape", "min": 1, "nullable": True},
    # keras/src/layers/regularization/dropout.py Dropout.__init__: `if not 0 <= rate <= 1`
    ("Dropout", "rate"): RATE, ("SpatialDropout1D", "rate"): RATE, ("AlphaDropout", "rate"): RATE,
    ("GaussianDropout", "rate"): RATE,
    # keras/src/layers/regularization/gaussian_noise.py GaussianNoise.__init__: `0 <= stddev <= 1`
    ("GaussianNoise", "stddev"): RATE,
    # keras/src/layers/rnn/bidirectional.py Bidirectional.__init__: merge_mode in a fixed list
    ("Bidirectional", "merge_mode"): {"kind": "enum", "values": ["sum", "mul", "ave", "concat", None]},
    # keras/src/layers/convolutional/base_conv.py BaseConv.__init__: standardize_tuple(kernel_size,
    # strides, dilation_rate: > 0), standardize_padding(allow_causal for Conv1D), filters/groups > 0
    ("Conv1D", "filters"): POS_INT, ("Conv1D", "groups"): {"kind": "int", "min": 1, "divides": "filters"},
    ("Conv1D", "kernel_size"): {"kind": "ints", "n": 1, "min": 0, "min_open": True},
    ("Conv1D", "strides"): {"kind": "ints", "n": 1, "min": 0, "min_open": True},
    ("Conv1D", "dilation_rate"): {"kind": "ints", "n": 1, "min": 0, "min_open": True},
    ("Conv1D", "padding"): {"kind": "str_enum", "values": ["valid", "same", "causal"]},
    # keras/src/layers/pooling/base_pooling.py BasePooling.__init__: standardize_tuple(pool_size,
    # strides) and standardize_padding
    ("MaxPooling1D", "pool_size"): {"kind": "ints", "n": 1, "min": 0, "min_open": True},
    ("MaxPooling1D", "strides"): {"kind": "ints", "n": 1, "min": 0, "min_open": True, "nullable": True},
    # (keras/src/ops/nn.py max_pool / average_pool at build: the padding is matched case-sensitively)
    ("MaxPooling1D", "padding"): {"kind": "enum", "values": ["valid", "same"]},
    ("AveragePooling1D", "pool_size"): {"kind": "ints", "n": 1, "min": 0, "min_open": True},
    ("AveragePooling1D", "strides"): {"kind": "ints", "n": 1, "min": 0, "min_open": True, "nullable": True},
    ("AveragePooling1D", "padding"): {"kind": "enum", "values": ["valid", "same"]},
    # keras/src/backend/config.py standardize_data_format: channels_last / channels_first
    **{(c, "data_format"): {"kind": "str_enum", "values": ["channels_last", "channels_first"], "nullable": True}
       for c in ("Conv1D", "MaxPooling1D", "AveragePooling1D", "GlobalMaxPooling1D", "GlobalAveragePooling1D",
                 "Flatten", "UpSampling1D", "ZeroPadding1D")},
    # keras/src/layers/reshaping/zero_padding1d.py, cropping1d.py: standardize_tuple(..., 2, allow_zero=True)
    ("ZeroPadding1D", "padding"): {"kind": "ints", "n": 2, "min": 0},
    ("Cropping1D", "cropping"): {"kind": "ints", "n": 2, "min": 0},
    # keras/src/layers/reshaping/repeat_vector.py / up_sampling1d.py: `if n <= 0` / `if size <= 0`
    ("RepeatVector", "n"): {**POS_INT, "bool_ok": False}, ("UpSampling1D", "size"): {**POS_INT, "bool_ok": False},
    # keras/src/layers/reshaping/permute.py Permute.__init__: a permutation of 1..rank
    ("Permute", "dims"): {"kind": "int_list", "min": 1, "permutation": True},
    # keras/src/layers/reshaping/reshape.py: checked against the input's size only (see INPUT_SIZED)
    ("Reshape", "target_shape"): {"kind": "any"},
    # keras/src/layers/merging/dot.py Dot.build: an axis, or a pair, inside the inputs' rank
    ("Dot", "axes"): {"kind": "axis", "pair_ok": True, "wrap": True},
    # keras/src/layers/normalization/layer_normalization.py LayerNormalization.build: int or list of
    # ints inside the rank; the batch axis has no size
    ("LayerNormalization", "axis"): {"kind": "axis", "list_ok": True, "no_batch": True, "bool_ok": True},
    # keras/src/layers/activations/prelu.py PReLU.build: param_shape[i - 1] for each shared axis
    ("PReLU", "shared_axes"): {"kind": "axis", "list_ok": True, "nullable": True, "prelu": True},
    # keras/src/layers/core/input_layer.py -> standardize_shape: ints >= 0 or None
    # (any iterable: "" is the shape of a scalar, a string's characters are refused as dimensions)
    ("InputLayer", "batch_shape"): {"kind": "shape", "iterable_ok": True},
    ("InputLayer", "dtype"): {"kind": "dtype", "policy_ok": True},
    # keras/src/layers/normalization/batch_normalization.py BatchNormalization.build and
    # layer_normalization.py LayerNormalization.build: the axis inside the input's rank
    # (BatchNormalization.__init__: `self.axis = int(axis)`; the batch axis has no size to normalize)
    ("BatchNormalization", "axis"): {"kind": "axis", "coerce": True, "no_batch": True},
    # keras/src/layers/normalization/batch_normalization.py call: numbers in backend ops
    ("BatchNormalization", "momentum"): {"kind": "number", "nonfinite_ok": True, "nan_ok": True},
    ("BatchNormalization", "epsilon"): {"kind": "number", "nonfinite_ok": True, "nan_ok": True},
    ("Concatenate", "axis"): {"kind": "axis"},
    # keras/src/layers/activations/leaky_relu.py / relu.py: `negative_slope < 0`, `max_value < 0`
    # (`x < 0` lets NaN through)
    ("LeakyReLU", "negative_slope"): {"kind": "number", "min": 0, "nonfinite_ok": True, "nan_ok": True},
    ("ReLU", "negative_slope"): {"kind": "number", "min": 0, "nonfinite_ok": True, "nan_ok": True},
    ("ReLU", "threshold"): {"kind": "number", "min": 0, "nonfinite_ok": True, "nan_ok": True},
    ("ReLU", "max_value"): {"kind": "number", "min": 0, "nullable": True, "nonfinite_ok": True, "nan_ok": True},
    # keras/src/layers/rnn/lstm.py LSTMCell.build (unit_forget_bias): `ops.zeros((self.units,))` on the
    # torch backend is `torch.zeros(size=(True,))`, "argument 'size' must be tuple of ints" (GRU builds)
    ("LSTM", "units"): {**POS_INT, "bool_ok": False},
    # keras/src/layers/core/input_layer.py InputLayer.__init__: "`ragged=True` is not supported with the jax
    # backend" (torch: no ragged tensors either), "`sparse=True` is not supported with the torch backend":
    # any truthy value raises there, a falsy one is ignored (found by the generative test's JAX and torch
    # reloads; the output must load on every backend)
    ("InputLayer", "ragged"): {"kind": "falsy", "refused_on": "JAX and torch"},
    ("InputLayer", "sparse"): {"kind": "falsy", "refused_on": "torch"},
    # keras/src/layers/normalization/batch_normalization.py BatchNormalization.__init__: "Argument
    # synchronized=True is only supported with the TensorFlow backend" for any truthy value (found by the
    # every-backend table comparison)
    ("BatchNormalization", "synchronized"): {"kind": "falsy", "refused_on": "JAX and torch"},
    # keras/src/layers/rnn/gru.py GRU.__init__: `use_cudnn not in ("auto", True, False)`
    ("GRU", "use_cudnn"): {"kind": "enum", "values": ["auto", True, False]},
    ("LSTM", "use_cudnn"): {"kind": "enum", "values": ["auto", True, False]},
}
# A one-element list broadcasts to the weight's shape in TensorFlow's ops only: JAX and torch refuse a
# list operand (`list * Array`, `normal(mean=[0.0])`), measured per initializer and backend in session 29
# (RandomUniform/RandomNormal/TruncatedNormal/Orthogonal/Identity fail on both; Constant's `value` goes
# through `ops.cast` first and loads on all three).  The output must load on every backend.
ANY_NUMBER = {"kind": "number", "nonfinite_ok": True, "nan_ok": True}
ANY_NUMBER_OR_SINGLETON = {**ANY_NUMBER, "singleton_ok": True}
INIT_ARGS = {
    # keras/src/initializers/random_initializers.py, constant_initializers.py: the numbers reach
    # backend ops when the initializer fills a weight at build time (a string fails there)
    "Constant": {"value": ANY_NUMBER_OR_SINGLETON}, "RandomUniform": {"minval": ANY_NUMBER, "maxval": ANY_NUMBER},
    # torch's `torch.normal` (keras/src/backend/torch/random.py normal) raises "normal expects std >= 0.0"
    # for a negative or NaN stddev; TensorFlow and JAX take it (the every-backend comparison found it)
    "RandomNormal": {"mean": ANY_NUMBER, "stddev": {"kind": "number", "min": 0, "nonfinite_ok": True,
                                                    "refused_on": "torch"}},
    "TruncatedNormal": {"mean": ANY_NUMBER, "stddev": ANY_NUMBER},
    "Orthogonal": {"gain": ANY_NUMBER}, "Identity": {"gain": ANY_NUMBER},
    # keras/src/initializers/random_initializers.py VarianceScaling.__init__: scale > 0, mode and
    # distribution from fixed lists
    # (`if scale <= 0.0` lets NaN through; `distribution = distribution.lower()`)
    "VarianceScaling": {"scale": {"kind": "number", "min": 0, "min_open": True, "nonfinite_ok": True, "nan_ok": True},
                        "mode": {"kind": "enum", "values": ["fan_in", "fan_out", "fan_avg"]},
                        "distribution": {"kind": "str_enum", "values": ["normal", "truncated_normal",
                                                                        "untruncated_normal", "uniform"]}},
}
REG_ARGS = {
    # keras/src/regularizers/regularizers.py validate_float_arg: a finite number >= 0 (None: the default)
    "L1": {"l1": {"kind": "number", "min": 0, "nullable": True}},
    "L2": {"l2": {"kind": "number", "min": 0, "nullable": True}},
    "L1L2": {"l1": {"kind": "number", "min": 0, "nullable": True}, "l2": {"kind": "number", "min": 0, "nullable": True}},
    "OrthogonalRegularizer": {"factor": {"kind": "number", "min": 0},
                              "mode": {"kind": "enum", "values": ["rows", "columns"]}},
}
#: Output rank from input rank (the axis checks need the input rank): "same", a fixed rank, "+1",
#: "rnn" (return_sequences), "pool" (keepdims), "reshape" (target_shape), "input" (batch_shape).
RANK = {"InputLayer": "input", "Embedding": "+1", "Dense": "same", "Dropout": "same", "SpatialDropout1D": "same",
        "GaussianDropout": "same", "GaussianNoise": "same", "AlphaDropout": "same", "Activation": "same",
        "BatchNormalization": "same", "LayerNormalization": "same", "Masking": "same", "Flatten": 2,
        "Reshape": "reshape", "Permute": "same", "RepeatVector": 3, "Conv1D": "same", "MaxPooling1D": "same",
        "AveragePooling1D": "same", "GlobalMaxPooling1D": "pool", "GlobalAveragePooling1D": "pool",
        "ZeroPadding1D": "same", "Cropping1D": "same", "UpSampling1D": "same", "ReLU": "same", "LeakyReLU": "same",
        "Softmax": "same", "ELU": "same", "PReLU": "same", "GRU": "rnn", "LSTM": "rnn", "SimpleRNN": "rnn",
        "Bidirectional": None, "TimeDistributed": None}
#: Arguments Keras checks against the input's sizes (not only its rank), which the streamed writer does
#: not infer: the table refuses what is wrong whatever the input; the comparison checks only that it
#: refuses nothing Keras takes (a kernel longer than a fixed-length input is left to Keras).
INPUT_SIZED = {("Reshape", "target_shape"), ("Dot", "axes"), ("Conv1D", "kernel_size"), ("Cropping1D", "cropping"),
               ("MaxPooling1D", "pool_size"), ("AveragePooling1D", "pool_size"), ("Conv1D", "groups"),
               # a stateful RNN needs a fixed batch size (keras/src/layers/rnn/rnn.py RNN.build)
               ("GRU", "stateful"), ("LSTM", "stateful"), ("SimpleRNN", "stateful")}
#: Arguments that hold nested objects the walker visits itself, or that Keras never reads on load.
SKIP = {"name", "layer", "backward_layer", "cell"}


def rule_for(cls: str, arg: str, default) -> dict:
    if (cls, arg) in ARGS:
        return ARGS[(cls, arg)]
    if arg in BY_NAME:
        return BY_NAME[arg]
    for kind in ("initializer", "regularizer", "constraint"):
        if arg.endswith("_" + kind):
            return {"kind": kind}
    return {"kind": "any"}


# --------------------------------------------------------------------------- probing Keras

#: Per class: constructor arguments for a probe instance and the inputs it is called on (shapes
#: without the batch axis; an int dtype for Embedding).
PROBE_ARGS = dict(LAYERS, Reshape=dict(target_shape=(128,)), Permute=dict(dims=(2, 1)))
PROBE_INPUTS = {"Embedding": [((32,), "int32")], "RepeatVector": [((4,), "float32")],
                **{c: [((32, 4), "float32")] * 2 for c in ("Concatenate", "Add", "Subtract", "Multiply", "Average",
                                                          "Maximum", "Minimum", "Dot")}}
PROBE_RANK = {"Embedding": 2, "RepeatVector": 2, "TimeDistributed": 3}
WRAPPERS = {"Bidirectional": lambda: keras.layers.Bidirectional(keras.layers.GRU(2)),
            "TimeDistributed": lambda: keras.layers.TimeDistributed(keras.layers.Dense(2))}


def base_object(section: str, cls: str):
    if section == "layers":
        if cls in WRAPPERS:
            return WRAPPERS[cls]()
        return getattr(keras.layers, cls)(**PROBE_ARGS[cls])
    return getattr(getattr(keras, section), cls)()


_BASE: dict = {}


def base_config(section: str, cls: str) -> dict:
    if (section, cls) not in _BASE:
        _BASE[section, cls] = serialization_lib.serialize_keras_object(base_object(section, cls))
    return copy.deepcopy(_BASE[section, cls])


def keras_verdict(section: str, cls: str, arg: str, value) -> bool:
    """Whether Keras 3 takes ``value`` for ``arg`` of ``cls`` where ``load_model`` meets it: the
    object deserialized from its config in safe mode; a layer then called on symbolic inputs (its
    ``build``), an initializer called on a shape."""
    from gruconv.keras3.portable import portable_config

    obj = base_config(section, cls)
    obj["config"][arg] = copy.deepcopy(value)
    # as gruconv writes it: the table is checked on the config after portable_config (keras3/config.py
    # model_config), where a float16 layer's Orthogonal initializer is Identity (no QR on JAX and torch)
    obj = portable_config(obj, qr_free_low_precision=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            made = serialization_lib.deserialize_keras_object(obj, safe_mode=True)
            if section == "layers" and cls != "InputLayer":
                ins = [keras.Input(shape=s, dtype=d) for s, d in PROBE_INPUTS.get(cls, [((32, 4), "float32")])]
                made(ins if len(ins) > 1 else ins[0])
            elif section == "initializers":
                made((3, 3))
    except Exception:  # noqa: BLE001 - any refusal is the verdict
        return False
    return True


NAN, INF = float("nan"), float("inf")
#: Values planted in every argument: wrong types, out of range, NaN/Infinity, unknown names,
#: zero/negative sizes, wrong nesting.
UNIVERSAL = [None, True, False, 0, 1, 3, -1, -3, 0.5, 2.5, -0.5, NAN, INF, -INF, "bogus", "", [], [0], [-2], [3],
             [None], [1, 2], {"a": 1}, 7, -7]


def battery(rule: dict, default, section: str = "layers") -> list:
    """The values compared for one argument: the default, the universal plants, and per kind the
    names Keras knows and near misses."""
    from gruconv.keras3.validation_table import TABLE

    values = [default] + list(UNIVERSAL)
    kind = rule["kind"]
    if kind in ("enum", "str_enum"):
        values += list(rule["values"]) + [str(v).upper() for v in rule["values"] if isinstance(v, str)]
    if kind == "dtype":
        values += TABLE["dtypes"] + ["float33", {"module": "keras", "class_name": "DTypePolicy",
                                                 "config": {"name": "float16"}, "registered_name": None}]
    if kind == "activation":
        values += TABLE["activations"] + ["Relu", "bogus_act"]
    if kind in ("initializer", "regularizer", "constraint"):
        names = TABLE["identifier_names"][kind]
        values += names + [{"class_name": "Bogus", "config": {}}]
        for cls, args in TABLE[kind + "s"].items():
            full = base_config(kind + "s", cls)["config"]
            values.append({"module": f"keras.{kind}s", "class_name": cls, "config": {}, "registered_name": None})
            values.append({"module": f"keras.{kind}s", "class_name": cls, "config": full, "registered_name": None})
            if section == "layers":  # the arguments' own values: compared in their section
                continue
            for a, r in args.items():
                for v in (-1, NAN, "bogus") + tuple(r.get("values", ())):
                    values.append({"module": f"keras.{kind}s", "class_name": cls, "config": {a: v},
                                   "registered_name": None})
    if kind in ("shape",):
        values += [[None, 5], [None, 0, 4], [None, -5], [None, None, NAN], [None, 2.0], [None, "4"], [2, 3, 4]]
    return values


def compare(table=None, classes=None, section="layers", args=None) -> list:
    """Every (class, argument, value) on which the table and Keras disagree, as text lines."""
    from gruconv.keras3 import validate
    from gruconv.keras3.validation_table import TABLE

    table = table or TABLE
    bad, pending = [], []
    only = args
    for cls, args in table[section].items():
        if classes is not None and cls not in classes:
            continue
        cfg = base_config(section, cls)["config"]
        for arg, rule in args.items():
            if only is not None and arg not in only:
                continue
            committed = TABLE[section].get(cls, {}).get(arg)  # its names too: a table under test may lack some
            values = battery(rule, cfg.get(arg), section) + \
                (battery(committed, cfg.get(arg), section) if committed and committed != rule else [])
            for value in values:
                ours = validate.problem(rule, value, PROBE_RANK.get(cls, 3), {**cfg, arg: value}) is None
                theirs = keras_verdict(section, cls, arg, value)
                if theirs:  # accepted here: and on the other backends?
                    pending.append(((section, cls, arg, value), ours))
                elif ours and (cls, arg) not in INPUT_SIZED:
                    bad.append(f"{section} {cls}.{arg} = {value!r}: table accepts, Keras refuses")
    refused = refusing_backends([case for case, _ in pending])
    for ((section, cls, arg, value), ours), where in zip(pending, refused):
        if ours and where and (cls, arg) not in INPUT_SIZED:
            bad.append(f"{section} {cls}.{arg} = {value!r}: table accepts, Keras refuses on {', '.join(where)}")
        elif not ours and not where:
            bad.append(f"{section} {cls}.{arg} = {value!r}: table refuses, Keras accepts")
    return bad


#: The backends besides this process's own (TensorFlow) that an output must load on.
OTHER_BACKENDS = ("jax", "torch")


def refusing_backends(cases: list) -> list:
    """For each ``(section, class, argument, value)`` that Keras accepts on this process's backend: the
    :data:`OTHER_BACKENDS` that refuse it (:func:`keras_verdict` in one long-lived child process per
    backend, started on first use).  Why: gruconv's output must load on every backend, so "Keras
    accepts" means every backend accepts: ``GlorotUniform(seed=-3)`` and ``Orthogonal(gain=[2.0])`` load
    on TensorFlow and not on JAX (the long generative profile's counterexamples, session 29), and a
    TensorFlow-only comparison called the table right for accepting them."""
    import json

    out = [[] for _ in cases]
    if not cases:
        return out
    for backend in OTHER_BACKENDS:
        child = _child(backend)
        child.stdin.write(json.dumps(cases) + "\n")
        child.stdin.flush()
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"the {backend} probe process died (exit {child.wait()})")
        for where, accepted in zip(out, json.loads(line)):
            if not accepted:
                where.append(backend)
    return out


def everywhere(section: str, cls: str, arg: str, values: list) -> list:
    """Per value: whether Keras accepts it for ``arg`` of ``cls`` on every backend (here, then
    :func:`refusing_backends` for what this backend accepts)."""
    here = [keras_verdict(section, cls, arg, v) for v in values]
    accepted = [(section, cls, arg, v) for v, ok in zip(values, here) if ok]
    refused = iter(refusing_backends(accepted))
    return [ok and not next(refused) for ok in here]


_CHILDREN: dict = {}


def _child(backend: str):
    import atexit
    import subprocess

    if backend not in _CHILDREN:
        env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--verdicts"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        atexit.register(lambda: (child.stdin.close(), child.wait(timeout=60)))
        _CHILDREN[backend] = child
    return _CHILDREN[backend]


# --------------------------------------------------------------------------- names Keras resolves

def names(getter, candidates) -> list:
    out = []
    for n in sorted(set(candidates)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if getter(n) is not None:
                    out.append(n)
        except Exception:  # noqa: BLE001 - unknown names raise ValueError/TypeError
            pass
    return out


def build() -> dict:
    from keras.src.backend.common import dtypes as kdtypes
    from keras.src.dtype_policies import dtype_policy

    policies = names(dtype_policy.DTypePolicy, sorted(kdtypes.ALLOWED_DTYPES) + ["mixed_float16", "mixed_bfloat16"])
    all_names = {kind: names(mod.get, [n for n in dir(mod) if not n.startswith("_")])
                 for kind, mod in (("initializer", keras.initializers), ("regularizer", keras.regularizers),
                                   ("constraint", keras.constraints))}
    layers = {}
    for cls in list(LAYERS) + list(WRAPPERS):
        cfg = base_config("layers", cls)["config"]
        args = set(cfg) | set(LAYERS.get(cls, {}))
        if cls == "InputLayer":
            args.discard("shape")
        rules = {a: copy.deepcopy(rule_for(cls, a, cfg.get(a))) for a in sorted(args) if a not in SKIP}
        if "dtype" in rules:  # the dtype policies this class builds with (int8 kernels do not, bool ones may)
            rules["dtype"]["names"] = [d for d, ok in zip(policies, everywhere("layers", cls, "dtype", policies)) if ok]
            (rules["dtype"]["nullable"],) = everywhere("layers", cls, "dtype", [None])
        ranks = _weight_ranks(cls)
        for a, r in rules.items():
            if r["kind"] == "initializer" and a[:-len("_initializer")] in ranks:
                r["var_rank"] = ranks[a[:-len("_initializer")]]
            if r["kind"] in ("initializer", "regularizer", "constraint"):  # the names this weight takes
                if keras_verdict("layers", cls, a, "bogus") and keras_verdict("layers", cls, a, 7):
                    rules[a] = {"kind": "any"}  # never read on load (SimpleRNN's activity_regularizer)
                    continue
                cands = all_names[r["kind"]]
                r["names"] = [n for n, ok in zip(cands, everywhere("layers", cls, a, cands)) if ok]
                (r["none_ok"],) = everywhere("layers", cls, a, [None])  # LSTM's bias_initializer: not None
        layers[cls] = rules
    sections = {}
    for section, classes, extra in (("initializers", INITIALIZERS, INIT_ARGS), ("regularizers", REGULARIZERS, REG_ARGS),
                                    ("constraints", CONSTRAINTS, {})):
        sections[section] = {}
        for cls in classes:
            cfg = base_config(section, cls)["config"]
            rules = dict(extra.get(cls, {}))
            if cls in ("GlorotUniform", "GlorotNormal", "HeUniform", "HeNormal", "LecunUniform", "LecunNormal"):
                rules = {**rules, **{k: v for k, v in INIT_ARGS["VarianceScaling"].items() if k in cfg}}
            # the constructor's arguments, also those get_config leaves out (Keras 3.15's Identity omits
            # its gain; gruconv writes it for float16 recurrent layers, keras3/portable.py)
            sections[section][cls] = {a: rules.get(a) or rule_for(cls, a, cfg[a]) for a in sorted(set(cfg) | set(rules))}
    import keras.src.activations as kact

    acts = names(keras.activations.get, [n for n in dir(keras.activations) if not n.startswith("_")]
                 + list(getattr(kact, "ALL_OBJECTS_DICT", {})))
    ident, classes = {}, {}
    for kind, mod in (("initializer", keras.initializers), ("regularizer", keras.regularizers),
                      ("constraint", keras.constraints)):
        cands = [n for n in dir(mod) if not n.startswith("_")]
        known = {"initializer": INITIALIZERS, "regularizer": REGULARIZERS, "constraint": CONSTRAINTS}[kind]
        found = [n for n in names(mod.get, cands) if not isinstance(getattr(mod, n, None), type(keras))]
        classes[kind] = {n: type(mod.get(n)).__name__ for n in found if type(mod.get(n)).__name__ in known}
        ident[kind] = sorted(classes[kind])
    # from_config reads these keys without a default (keras/src/initializers/constant_initializers.py
    # Constant.from_config: config["value"])
    required = {}
    for section, classes_ in (("initializers", INITIALIZERS), ("regularizers", REGULARIZERS),
                              ("constraints", CONSTRAINTS)):
        for cls in classes_:
            full = base_config(section, cls)
            need = [k for k in full["config"] if not _deserializes(full, drop=k)]
            if need:
                required[cls] = need
    none_ok = {k: bool(_takes_none(k)) for k in ident}
    # keras/src/initializers: Identity.__call__ needs a 2-D shape, Orthogonal.__call__ at least 2-D
    init_ranks = {}
    for cls in INITIALIZERS:
        ok = [r for r in (1, 2, 3, 4) if _fills(cls, (3,) * r)]
        if ok != [1, 2, 3, 4]:
            init_ranks[cls] = ok
    return {"keras_version": keras.__version__, "layers": layers, **sections, "dtypes": policies,
            "activations": acts, "activation_none_ok": True, "identifier_names": ident,
            "identifier_classes": classes, "identifier_none_ok": none_ok, "identifier_required": required, "initializer_ranks": init_ranks,
            "rank": RANK, "input_ndim": input_ndims()}


def _deserializes(obj: dict, drop: str) -> bool:
    obj = copy.deepcopy(obj)
    del obj["config"][drop]
    try:
        serialization_lib.deserialize_keras_object(obj, safe_mode=True)
        return True
    except Exception:  # noqa: BLE001
        return False


def input_ndims() -> dict:
    """Per class, the input ranks (1 to 5) Keras builds it on with its default arguments, where not all
    (``input_spec`` in the constructor — ``keras/src/layers/input_spec.py`` assert_input_compatibility —
    and the backend op at build: Conv1D's ``min_ndim=3`` still refuses rank 4 at the convolution)."""
    out = {}
    for cls in list(LAYERS) + list(WRAPPERS):
        if cls in ("InputLayer", "Permute", "Embedding", "Reshape") or len(PROBE_INPUTS.get(cls, [0])) > 1:
            continue  # Permute: len(dims) + 1, the dims rule; Reshape: sizes; Embedding: integer input; merges
        ranks = [r for r in range(1, 6) if rank_verdict(cls, r)]
        if ranks != [1, 2, 3, 4, 5]:
            out[cls] = {"ranks": ranks}
    return out


def rank_verdict(cls: str, rank: int) -> bool:
    """Whether Keras builds ``cls`` (probe arguments) on a symbolic float input of ``rank``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            base_object("layers", cls)(keras.Input(shape=(4,) * (rank - 1)))
    except Exception:  # noqa: BLE001
        return False
    return True


def _fills(cls: str, shape) -> bool:
    try:
        getattr(keras.initializers, cls)()(shape)
        return True
    except Exception:  # noqa: BLE001
        return False


def _weight_ranks(cls: str) -> dict:
    """Rank of each weight of the built probe layer, by the weight's own name (``kernel``, ``bias``)."""
    if cls == "InputLayer":
        return {}
    layer = base_object("layers", cls)
    ins = [keras.Input(shape=s, dtype=d) for s, d in PROBE_INPUTS.get(cls, [((32, 4), "float32")])]
    layer(ins if len(ins) > 1 else ins[0])
    return {w.path.split("/")[-1]: len(w.shape) for w in layer.weights}


def _takes_none(kind: str) -> bool:
    # Dense(kernel_initializer=None) etc.: does the layer still build (keras.<kind>s.get(None))?
    try:
        keras.layers.Dense(2, **{f"kernel_{kind}": None})(keras.Input((3,)))
        return True
    except Exception:  # noqa: BLE001
        return False


def write(table: dict) -> None:
    with open(TARGET, "w") as f:
        f.write('"""Values Keras 3 accepts on load, per class and argument (generated: do not edit).\n\n'
                f'Written by ``scripts/make_keras3_validation.py`` from Keras {table["keras_version"]} (rules and\n'
                'their Keras sources are listed there); read by :mod:`gruconv.keras3.validate`; compared with\n'
                'Keras value by value in ``tests/keras3/test_validation.py``.\n"""\n\n'
                "null, true, false = None, True, False\nNaN = float('nan')\n\n")
        f.write("TABLE = " + pprint.pformat(table, width=110, sort_dicts=False) + "\n")
    print("wrote", TARGET, file=sys.stderr)


if __name__ == "__main__":
    if "--verdicts" in sys.argv:  # a child of refusing_backends: a JSON list of cases per line in,
        import json               # a JSON list of verdicts per line out, until stdin closes

        for request in sys.stdin:
            print(json.dumps([keras_verdict(*case) for case in json.loads(request)]), flush=True)
        sys.exit(0)
    if "--check" in sys.argv:
        only = [a for a in sys.argv[1:] if not a.startswith("-")] or None
        lines = []
        for section in ("layers", "initializers", "regularizers", "constraints"):
            from gruconv.keras3.validation_table import TABLE

            for cls in TABLE[section]:
                if only is None or cls in only:
                    found = compare(classes=[cls], section=section)
                    print(f"{section} {cls}: {len(found)} disagreement(s)", *found, sep="\n  ", flush=True)
                    lines += found
        print(f"{len(lines)} disagreement(s)" if lines else "table agrees with Keras on every probe")
        sys.exit(1 if lines else 0)
    write(build())
