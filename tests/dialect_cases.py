"""Legacy dialects, generatively (issue 40 item 2): "tf_keras accepts it => gruconv converts it (exit 0) and
its output computes what the original computes".

A *case* is a seed.  From it :func:`plan_case` draws a model spec (Sequential or Functional, CuDNNGRU or
CuDNNLSTM, plain layers around it: Embedding, Conv1D, BatchNormalization, Dropout, Bidirectional,
TimeDistributed, a plain GRU/LSTM, Concatenate/Add of two branches, a nested model, a custom layer),
how it is saved (``model.save(x.h5)``, or ``save_weights(x.h5)`` + ``to_json()``) and a list of
*dialect mutations* (:data:`MUTATIONS`): each one a thing a real Keras 2 / tf.keras version wrote
(the version is cited beside it), applied per layer and per nesting level to the file's
``model_config`` (or the architecture JSON) and root attributes.

Two halves, two processes (tf_keras and Keras 3 do not share one):

* the **tf_keras half** (``python tests/dialect_cases.py build DIR``, ``TF_USE_LEGACY_KERAS=1``): builds
  each spec with tf_keras's real CuDNN layers, sets seeded weights, saves with tf_keras's legacy HDF5
  writer, writes the mutated variants, checks the **precondition** (tf_keras 2.21 opens the variant:
  ``load_model(compile=False, custom_objects=...)``, or ``model_from_json`` + ``load_weights``; a
  variant it refuses is *discarded*), and computes the **oracle**: the variant's own config with every
  CuDNN layer swapped for its CPU twin (``GRU(reset_after=True, recurrent_activation="sigmoid")`` /
  ``LSTM(recurrent_activation="sigmoid")``, same names and carried arguments) built by tf_keras's
  ``model_from_json``, weights loaded by tf_keras's own ``load_weights(file)`` (its legacy loader
  converts the CuDNN weights itself: ``hdf5_format.preprocess_weights_for_loading``), run on seeded
  inputs.  The oracle is written here, independent of ``src/gruconv``.
* the **Keras 3 half** (:func:`check_variant`, in the test process): ``gruconv convert`` (click's
  ``CliRunner``) exits 0, plain ``keras.saving.load_model`` opens the output (``custom_objects`` only for
  the custom layer: ``tests/dialect_layers.py``), its ``predict`` matches the oracle within 1e-5
  (absolute, or relative to the output's magnitude), and ``gruconv verify`` exits 0.

A variant tf_keras opens and gruconv does not handle so is a **counterexample**; :func:`classify`
names its class: ``base`` when the unmutated file fails too, else the mutations that fail alone (or
``combo:a+b`` when only their combination does).  Reproduce one with
``scripts/dialect_sweep.py --seed SEED --kinds KIND,...``.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LEGACY_WRITERS = ROOT / "fixtures" / "legacy_writers"
BATCH = 3
ATOL = RTOL = 1e-5

MODEL_CLASSES = {"Sequential", "Functional", "Model"}
RNN_CLASSES = {"CuDNNGRU", "CuDNNLSTM", "GRU", "LSTM", "SimpleRNN"}
CUDNN_CLASSES = {"CuDNNGRU", "CuDNNLSTM"}


# --------------------------------------------------------------------------- walking a legacy config

def layer_list(node: dict) -> list:
    """The layer dicts of a model node (a Sequential's config may be the bare list, Keras <= 2.2.2)."""
    cfg = node.get("config")
    if isinstance(cfg, list):
        return cfg
    return cfg.get("layers", []) if isinstance(cfg, dict) else []


def models_in(node: dict):
    """The root model node and every nested model node, outermost first."""
    yield node
    for layer in layer_list(node):
        if layer.get("class_name") in MODEL_CLASSES:
            yield from models_in(layer)


def layers_in(node: dict):
    """Every non-model layer dict at every nesting level, wrappers' inner layers included."""
    for model in models_in(node):
        for layer in layer_list(model):
            if layer.get("class_name") in MODEL_CLASSES:
                continue
            stack = [layer]
            while stack:
                lay = stack.pop()
                yield lay
                cfg = lay.get("config") or {}
                for key in ("layer", "backward_layer"):
                    if isinstance(cfg.get(key), dict):
                        stack.append(cfg[key])


def _walk_dicts(obj):
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _walk_dicts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk_dicts(v)


# --------------------------------------------------------------------------- dialect mutations

@dataclass(frozen=True)
class Mutation:
    name: str
    source: str           # which Keras / tf.keras version wrote it, and where
    full_only: bool = False  # needs a whole-model file (root attrs model_config / training_config)

    def require(self, spec: dict, rng: random.Random) -> None:
        """Make ``spec`` hold what this mutation rewrites (a plain GRU, a Sequential, ...)."""
        fn = _REQUIRE.get(self.name)
        if fn:
            fn(spec, rng)
        if self.full_only:
            spec["save"] = "model"

    def apply(self, doc: dict, rng: random.Random) -> list:
        """Rewrite ``doc`` (``config``: the model node; ``attrs``: root attributes); returns what changed
        (empty: nothing to rewrite in this model)."""
        return _APPLY[self.name](doc, rng)


def _some(rng: random.Random, items: list) -> list:
    """A random non-empty subset (each item with p = 0.7): "per layer", not all-or-nothing."""
    if not items:
        return []
    picked = [x for x in items if rng.random() < 0.7]
    return picked or [rng.choice(items)]


def _m_init_dtype(doc, rng):
    # tf.keras of TF 1.13-1.14 (keras_version "2.2.4-tf"): tensorflow/python/ops/init_ops.py's initializers
    # (GlorotUniform, Orthogonal, Zeros, ...) return {"seed": ..., "dtype": "float32"} from get_config.
    changed = []
    for layer in _some(rng, list(layers_in(doc["config"]))):
        for key, value in layer.get("config", {}).items():
            if key.endswith("_initializer") and isinstance(value, dict) and isinstance(value.get("config"), dict):
                value["config"]["dtype"] = "float32"
                changed.append(f"{layer['config'].get('name')}.{key}")
    return changed


def _sequentials(doc):
    return [m for m in models_in(doc["config"]) if m.get("class_name") == "Sequential"]


def _input_shape_of(model: dict):
    for layer in layer_list(model):
        shape = layer.get("config", {}).get("batch_input_shape")
        if shape:
            return list(shape)
    return None


def _m_later_batch_input_shape(doc, rng):
    # Every Keras 2 (keras/engine/sequential.py Sequential.add, 2.0-2.3.1) and tf.keras Sequential builds its
    # input from the FIRST layer's batch_input_shape only; tutorials passing input_shape=(T, F) to every
    # layer left a batch_input_shape on each, copied from the first and wrong for every layer after it.
    changed = []
    for model in _sequentials(doc):
        shape = _input_shape_of(model)
        later = [l for l in layer_list(model)[1:] if l.get("class_name") not in MODEL_CLASSES]
        if not shape or not later:
            continue
        for layer in _some(rng, later):
            wrong = shape[:-1] + [(shape[-1] or 4) + rng.randint(1, 5)]
            layer["config"]["batch_input_shape"] = wrong
            layer["config"].setdefault("dtype", "float32")
            changed.append(f"{layer['config'].get('name', layer['class_name'])}: {wrong}")
    return changed


def _m_nameless_custom(doc, rng):
    # A user layer whose get_config() returned only its own arguments (no super().get_config(): e.g.
    # `return {"init_scale": self.init_scale}`), as countless Keras 2.x custom layers did; Keras 2
    # (base_layer.Layer.from_config -> cls(**config)) named it afresh at load and loaded a whole model's
    # weights by layer position (engine/saving.py load_weights_from_hdf5_group).
    changed = []
    for layer in layers_in(doc["config"]):
        if layer.get("class_name") == "ScaleShift":
            layer["config"] = {"init_scale": layer["config"]["init_scale"]}
            changed.append("ScaleShift")
    return changed


def _m_hard_sigmoid_rnn(doc, rng):
    # Keras 2.0.0-2.2.4 keras/layers/recurrent.py: GRU/LSTM(recurrent_activation='hard_sigmoid') by default
    # (tf.keras 1.x's v1 GRU/LSTM the same); Keras 2.3.0 changed the default to 'sigmoid'.
    changed = []
    plain = [l for l in layers_in(doc["config"]) if l.get("class_name") in ("GRU", "LSTM")]
    for layer in _some(rng, plain):
        layer["config"]["recurrent_activation"] = "hard_sigmoid"
        changed.append(layer["config"]["name"])
    return changed


def _m_hard_sigmoid_dense(doc, rng):
    # keras.activations.hard_sigmoid (Keras 1.x-2.3.1, tf.keras): Dense(..., activation='hard_sigmoid').
    changed = []
    for layer in _some(rng, [l for l in layers_in(doc["config"]) if l.get("class_name") == "Dense"]):
        layer["config"]["activation"] = "hard_sigmoid"
        changed.append(layer["config"]["name"])
    return changed


def _m_no_reset_after(doc, rng):
    # Keras <= 2.1.2 keras/layers/recurrent.py: GRU.get_config had no reset_after (added in 2.1.3, default
    # False until 2.3.0), so a GRU of that time computes reset_after=False with a (3H,) bias.
    changed = []
    for layer in layers_in(doc["config"]):
        if layer.get("class_name") == "GRU" and layer["config"].get("reset_after") is False:
            del layer["config"]["reset_after"]
            changed.append(layer["config"]["name"])
    return changed


def _drop_input_layer(model: dict) -> bool:
    """The InputLayer removed and its batch_input_shape / dtype moved to the first real layer."""
    layers = layer_list(model)
    if not layers or layers[0].get("class_name") != "InputLayer" or len(layers) < 2:
        return False
    first_in = layers.pop(0)["config"]
    first = layers[0]
    if first.get("class_name") in MODEL_CLASSES:
        layers.insert(0, {"class_name": "InputLayer", "config": first_in})
        return False
    # the layer's own dtype stays (Keras 2.2.4 wrote an Embedding's as "float32": Sequential.add made the
    # input placeholder of the layer's dtype and Embedding cast it); only the shape moves
    first["config"]["batch_input_shape"] = first_in["batch_input_shape"]
    first["config"].setdefault("dtype", "float32")
    return True


def _m_no_input_layer(doc, rng):
    # Keras 2.2.0-2.3.1 keras/engine/sequential.py (and tf.keras 1.x): Sequential.get_config iterates
    # `self.layers`, which hides the auto-made InputLayer; the first layer carries batch_input_shape.
    changed = []
    for model in _some(rng, _sequentials(doc)):
        if _drop_input_layer(model):
            changed.append(model["config"]["name"] if isinstance(model["config"], dict) else "sequential")
    return changed


def _m_bare_layer_list(doc, rng):
    # Keras <= 2.2.2 keras/engine/sequential.py: Sequential.get_config returned the bare list of layer
    # configs (no name, no InputLayer); 2.2.3 made it {"name": ..., "layers": [...]}.
    changed = []
    for model in _some(rng, _sequentials(doc)):
        if isinstance(model["config"], list):
            continue
        _drop_input_layer(model)
        if layer_list(model)[0].get("class_name") == "InputLayer":  # first layer a nested model: leave it
            continue
        changed.append(model["config"]["name"])
        model["config"] = model["config"]["layers"]
    return changed


KERAS_VERSIONS = ["2.1.6", "2.2.4", "2.2.4-tf", "2.3.1"]


def _m_old_version_attrs(doc, rng):
    # The root attributes keras_version / backend as Keras 2.1.6, 2.2.4, 2.3.1 (keras/engine/saving.py:
    # `f.attrs['keras_version'] = str(keras_version).encode('utf8')`, bytes) and tf.keras 1.13-1.14
    # ("2.2.4-tf") wrote them.
    version = rng.choice(KERAS_VERSIONS)
    doc["attrs"]["keras_version"] = version.encode()
    doc["attrs"]["backend"] = b"tensorflow"
    return [version]


def _m_bytes_config(doc, rng):
    # Keras 2.x keras/engine/saving.py _serialize_model: `f.attrs[k] = json.dumps(v, ...).encode('utf8')`:
    # model_config and training_config are bytes attributes, not str.
    doc["bytes"] = True
    return ["model_config as bytes"]


def _m_no_time_major(doc, rng):
    # Keras (multi-backend) 2.0-2.3.1 keras/layers/recurrent.py RNN.get_config has no time_major; tf.keras
    # (1.14+) and tf_keras write `time_major: false`, which every unmutated case carries.
    changed = []
    for layer in layers_in(doc["config"]):
        if layer.get("class_name") in RNN_CLASSES and "time_major" in layer["config"]:
            del layer["config"]["time_major"]
            changed.append(layer["config"]["name"])
    return changed


def _m_policy_dict(doc, rng):
    # tf.keras 2.4-2.x mixed_precision/policy.py: serialize() writes a policy as a dict unless it is "equivalent
    # to a dtype", and a PolicyV1 (tf.keras.mixed_precision.experimental.Policy, TF 2.4-2.8) never is:
    # {"class_name": "PolicyV1", "config": {"name": "float32"}}; TF 2.1-2.3's Policy with a loss scale the same
    # with class_name "Policy".  tf_keras reads both (deserialize maps PolicyV1 to Policy).
    changed = []
    cls = rng.choice(["PolicyV1", "Policy"])
    for layer in _some(rng, [l for l in layers_in(doc["config"]) if l["config"].get("dtype") == "float32"
                             and l.get("class_name") != "InputLayer"]):
        layer["config"]["dtype"] = {"class_name": cls, "config": {"name": "float32"}}
        changed.append(f"{layer['config'].get('name')}: {cls}")
    return changed


def _m_lr_training_config(doc, rng):
    # Keras <= 2.2.5 keras/optimizers.py: Adam.get_config() = {'lr', 'beta_1', 'beta_2', 'decay', 'epsilon',
    # 'amsgrad'} under class_name "Adam" (2.3.0 renamed lr to learning_rate); training_config of Keras 2.2.4.
    tc = doc["attrs"].get("training_config")
    if not tc:
        return []
    tc = json.loads(tc)
    opt = tc["optimizer_config"]
    c = opt["config"]
    opt["class_name"] = opt["class_name"].replace("Custom>", "")
    opt["config"] = {"lr": c.get("learning_rate", 0.001), "beta_1": c.get("beta_1", 0.9), "beta_2": c.get("beta_2", 0.999),
                     "decay": 0.0, "epsilon": c.get("epsilon", 1e-7), "amsgrad": c.get("amsgrad", False)}
    tc.pop("weighted_metrics", None)
    tc["sample_weight_mode"] = None
    doc["attrs"]["training_config"] = json.dumps(tc)
    return [opt["class_name"]]


def _m_no_module_keys(doc, rng):
    # tf.keras <= 2.12 (and Keras 2.x) serialized nested objects as {"class_name", "config"} only; tf.keras 2.13
    # / tf_keras added "module" and "registered_name" (legacy serialization_lib).
    n = 0
    for d in _walk_dicts(doc["config"]):
        for key in ("module", "registered_name"):
            if key in d and "class_name" in d:
                del d[key]
                n += 1
    return [f"{n} keys"] if n else []


MUTATIONS = {m.name: m for m in [
    Mutation("init_dtype", "tf.keras 1.13-1.14 (2.2.4-tf): dtype in initializer configs"),
    Mutation("later_batch_input_shape", "Keras 2 Sequential: a wrong batch_input_shape on later layers"),
    Mutation("nameless_custom", "a user layer whose get_config() has no name"),
    Mutation("hard_sigmoid_rnn", "Keras <= 2.2.4: recurrent_activation hard_sigmoid on plain GRU/LSTM"),
    Mutation("hard_sigmoid_dense", "Keras 2: Dense(activation='hard_sigmoid')"),
    Mutation("no_reset_after", "Keras <= 2.1.2: GRU without reset_after (False, (3H,) bias)"),
    Mutation("no_input_layer", "Keras 2.2.0-2.3.1: Sequential without InputLayer"),
    Mutation("bare_layer_list", "Keras <= 2.2.2: Sequential config as a bare list"),
    Mutation("old_version_attrs", "keras_version/backend of 2.1.6, 2.2.4, 2.2.4-tf, 2.3.1 (bytes)"),
    Mutation("bytes_config", "Keras 2.x: model_config/training_config as bytes", full_only=True),
    Mutation("no_time_major", "Keras <= 2.3.1: RNN configs without time_major"),
    Mutation("policy_dict", "tf.keras 2.1-2.8: dtype as a Policy/PolicyV1 dict"),
    Mutation("lr_training_config", "Keras <= 2.2.5: optimizer lr in training_config", full_only=True),
    Mutation("no_module_keys", "tf.keras <= 2.12: no module/registered_name keys"),
]}
_APPLY = {name[3:]: fn for name, fn in globals().items() if name.startswith("_m_")}


def _need_plain(spec, rng):
    spec["plain_rnn"] = spec["plain_rnn"] or rng.choice(["gru", "lstm"])


def _need_plain_gru_v1(spec, rng):
    spec["plain_rnn"] = "gru"
    spec["plain_reset_after"] = False


def _need_sequential(spec, rng):
    if spec["api"] != "sequential" and spec["nested"] != "sequential":
        spec["api"] = "sequential"
        spec["merge"] = None


def _need_dense(spec, rng):
    if not spec["dense"] and not spec["time_distributed"]:
        spec["dense"] = True


_REQUIRE = {
    "nameless_custom": lambda s, r: s.update(custom=True),
    "hard_sigmoid_rnn": _need_plain,
    "hard_sigmoid_dense": _need_dense,
    "no_reset_after": _need_plain_gru_v1,
    "later_batch_input_shape": _need_sequential,
    "no_input_layer": _need_sequential,
    "bare_layer_list": _need_sequential,
    "lr_training_config": lambda s, r: s.update(compile=True),
}

#: Dialect profiles for random combinations: the mutations one version's files could carry together.
PROFILES = {
    "keras-2.1.6": ["old_version_attrs", "bytes_config", "bare_layer_list", "hard_sigmoid_rnn", "no_reset_after",
                    "no_time_major", "lr_training_config", "no_module_keys", "later_batch_input_shape",
                    "nameless_custom", "hard_sigmoid_dense"],
    "keras-2.2.4": ["old_version_attrs", "bytes_config", "no_input_layer", "hard_sigmoid_rnn", "no_time_major",
                    "lr_training_config", "no_module_keys", "later_batch_input_shape", "nameless_custom",
                    "hard_sigmoid_dense"],
    "tf-1.13": ["old_version_attrs", "init_dtype", "no_input_layer", "hard_sigmoid_rnn", "lr_training_config",
                "no_module_keys", "later_batch_input_shape", "nameless_custom", "hard_sigmoid_dense"],
    "tf-2.4": ["policy_dict", "no_module_keys", "later_batch_input_shape", "nameless_custom", "hard_sigmoid_dense"],
}


# --------------------------------------------------------------------------- planning a case

def random_spec(rng: random.Random) -> dict:
    api = rng.choice(["sequential", "functional"])
    tokens = rng.random() < 0.5
    pre = [p for p in ("conv1d", "batchnorm", "dropout") if rng.random() < 0.3]
    spec = {
        "api": api,
        "cudnn_ns": rng.choice(["tf.compat.v1.keras.layers", "tf_keras.src.layers"]),
        "cell": rng.choice(["gru", "lstm"]),
        "input": "tokens" if tokens else "floats",
        "vocab": 11,
        "steps": rng.randint(4, 7),
        "fixed_steps": rng.random() < 0.5,
        "features": rng.randint(2, 5),
        "mask_zero": tokens and "conv1d" in pre and pre[0] == "conv1d" and rng.random() < 0.5,
        "pre": pre,
        "units": rng.randint(2, 6),
        "bidirectional": rng.choice([None, None, "concat", "sum", "ave", "mul"]),
        "plain_rnn": rng.choice([None, None, "gru", "lstm"]),
        "plain_reset_after": rng.random() < 0.6,
        "plain_bidirectional": rng.random() < 0.3,
        "return_sequences": rng.random() < 0.4,
        "time_distributed": False,
        "dense": rng.random() < 0.6,
        "custom": rng.random() < 0.25,
        "merge": rng.choice([None, "concat", "add"]) if api == "functional" else None,
        "nested": rng.choice([None, None, "sequential", "functional"]),
        "compile": rng.random() < 0.4,
        "save": rng.choice(["model", "model", "weights"]),
    }
    if spec["return_sequences"] and rng.random() < 0.5:
        spec["time_distributed"] = True
    return spec


def plan_case(seed: int, kinds=None, profile=None, save=None) -> dict:
    """The case of ``seed``: its spec, how it is saved, its mutations (``kinds``; None: a random profile's
    random subset, 1-4 of them).  The same seed and kinds give the same case."""
    rng = random.Random(seed)
    spec = random_spec(rng)
    given = {"kinds": None if kinds is None else list(kinds), "profile": profile, "save": save}
    if kinds is None:
        profile = profile or rng.choice(sorted(PROFILES))
        pool = PROFILES[profile]
        kinds = sorted(rng.sample(pool, rng.randint(1, min(4, len(pool)))))
    kinds = list(kinds)
    if save:
        spec["save"] = save
    for k in kinds:
        MUTATIONS[k].require(spec, rng)
    if spec["save"] == "weights":
        kinds = [k for k in kinds if not MUTATIONS[k].full_only]
    return {"id": f"s{seed}-{'+'.join(kinds) or 'base'}", "seed": seed, "spec": spec, "kinds": kinds,
            "profile": profile, "given": given}


def corpus_cases() -> list:
    """The files real older writers wrote (``fixtures/legacy_writers/index.json``), each a case as it is."""
    index = LEGACY_WRITERS / "index.json"
    if not index.exists():
        return []
    out = []
    for name, entry in sorted(json.loads(index.read_text()).items()):
        out.append({"id": f"file-{Path(name).stem}", "seed": entry.get("seed", 0), "corpus": name, "spec": entry["spec"],
                    "kinds": [], "carries": entry.get("carries", []), "profile": entry.get("writer")})
    return out


def variants_of(case: dict, mode: str) -> dict:
    """``{variant name: kinds}``: mode ``all``: the case's kinds together; mode ``classify`` (what
    :func:`classify` needs for a failed case): the unmutated ``base`` and, with two or more kinds, each alone.
    A case marked ``with_base`` has its base built with it in mode ``all`` (one tf_keras run: the quick tier's
    known-open cases, whose class must be checked, not assumed)."""
    if mode == "all":
        return {"all": list(case["kinds"]), **({"base": []} if case["kinds"] and case.get("with_base") else {})}
    out = {"base": []} if case["kinds"] else {}
    if len(case["kinds"]) > 1:
        out.update({k: [k] for k in case["kinds"]})
    return out


def describe(case: dict) -> str:
    s = case["spec"]
    parts = [s["api"], s["cell"], s["input"], f"units={s['units']}", f"save={s['save']}"]
    for key in ("bidirectional", "plain_rnn", "merge", "nested"):
        if s.get(key):
            parts.append(f"{key}={s[key]}")
    for key in ("custom", "compile", "time_distributed", "dense", "return_sequences", "mask_zero", "fixed_steps"):
        if s.get(key):
            parts.append(key)
    if s.get("pre"):
        parts.append("pre=" + ",".join(s["pre"]))
    if s.get("plain_rnn") == "gru" and not s.get("plain_reset_after"):
        parts.append("plain_reset_after=False")
    return " ".join(parts)


# --------------------------------------------------------------------------- the tf_keras half (child)

def build_cases(cases: list, out_dir: Path, mode: str = "all", timeout: int = 1800) -> dict:
    """Run the tf_keras half in a child process; returns ``{case id: {variant: entry}}`` (see :func:`_child`).
    A case built before in ``out_dir`` keeps its saved original (mode ``classify`` after ``all``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cases.json").write_text(json.dumps({"cases": cases, "mode": mode}))
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "build", str(out_dir)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"the tf_keras half failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
    return json.loads((out_dir / "built.json").read_text())


def _child(out_dir: Path) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np
    import tensorflow as tf
    import tf_keras as K

    tf.get_logger().setLevel("ERROR")
    L = K.layers
    from tf_keras.src.layers.rnn import cudnn_gru, cudnn_lstm

    class ScaleShift(L.Layer):
        """The test's custom layer (twin: ``tests/dialect_layers.py``): ``x * scale + shift`` on the last axis."""

        def __init__(self, init_scale=1.0, **kwargs):
            super().__init__(**kwargs)
            self.init_scale = init_scale

        def build(self, input_shape):
            n = int(input_shape[-1])
            self.scale = self.add_weight(shape=(n,), name="scale", initializer=K.initializers.Constant(self.init_scale))
            self.shift = self.add_weight(shape=(n,), name="shift", initializer="zeros")
            super().build(input_shape)

        def call(self, x):
            return x * self.scale + self.shift

        def compute_output_shape(self, input_shape):
            return input_shape

        def get_config(self):
            return dict(super().get_config(), init_scale=self.init_scale)

    custom = {"ScaleShift": ScaleShift}
    # tf_keras 2.21's model_from_json cannot find the CuDNN classes by itself: tf_keras does not export them
    # under tf_keras.layers (TF 1.x's tf.keras.layers.CuDNNGRU did), and custom_objects does not reach a layer
    # inside a Bidirectional (serialization_lib._retrieve_class_or_fn looks custom objects up by
    # `registered_name`, which the file has as null).  Only its legacy HDF5 load_model knows them.  A weights-
    # only file's architecture is read here as a TF 1.x / 2.x tf.keras read it: with the classes exported.
    for cls in (cudnn_gru.CuDNNGRU, cudnn_lstm.CuDNNLSTM):
        setattr(L, cls.__name__, cls)
    cudnn_ns = {"tf.compat.v1.keras.layers": {"gru": tf.compat.v1.keras.layers.CuDNNGRU,
                                              "lstm": tf.compat.v1.keras.layers.CuDNNLSTM},
                "tf_keras.src.layers": {"gru": cudnn_gru.CuDNNGRU, "lstm": cudnn_lstm.CuDNNLSTM}}

    def rnn_block(spec, names, last_sequences):
        """The recurrent layers: a CuDNN layer (maybe Bidirectional), then maybe a plain GRU/LSTM."""
        make = cudnn_ns[spec["cudnn_ns"]][spec["cell"]]
        out = []
        more = bool(spec["plain_rnn"])
        rnn = make(spec["units"], return_sequences=last_sequences or more, name=names("cudnn"))
        out.append(L.Bidirectional(rnn, merge_mode=spec["bidirectional"], name=names("bi")) if spec["bidirectional"] else rnn)
        if more:
            kw = dict(return_sequences=last_sequences, name=names("plain"))
            if spec["plain_rnn"] == "gru":
                p = L.GRU(spec["units"], reset_after=spec["plain_reset_after"], **kw)
            else:
                p = L.LSTM(spec["units"], **kw)
            out.append(L.Bidirectional(p, name=names("pbi")) if spec["plain_bidirectional"] else p)
        return out

    def build(spec, seed):
        K.backend.clear_session()
        counter = {}

        def names(stem):
            counter[stem] = counter.get(stem, 0) + 1
            return f"{stem}{counter[stem]}"

        steps = spec["steps"] if spec["fixed_steps"] else None
        tokens = spec["input"] == "tokens"
        in_shape = (steps,) if tokens else (steps, spec["features"])
        seqs = spec["return_sequences"]
        front = []
        if tokens:
            front.append(L.Embedding(spec["vocab"], spec["features"], mask_zero=spec["mask_zero"], name=names("emb")))
        for p in spec["pre"]:
            if p == "conv1d":
                front.append(L.Conv1D(spec["features"] + 1, 2, padding="same", activation="relu", name=names("conv")))
            elif p == "batchnorm":
                front.append(L.BatchNormalization(name=names("bn")))
            else:
                front.append(L.Dropout(0.3, name=names("drop")))
        block = rnn_block(spec, names, seqs)
        if spec["nested"]:
            # the recurrent block as a nested model, as users factored encoders out
            width = spec["features"] + (1 if "conv1d" in spec["pre"] else 0)
            inner_shape = (steps, width)
            if spec["nested"] == "sequential":
                inner = K.Sequential([L.InputLayer(inner_shape)] + block, name=names("encoder"))
            else:
                x = K.Input(inner_shape, name=names("enc_in"))
                h = x
                for lay in block:
                    h = lay(h)
                inner = K.Model(x, h, name=names("encoder"))
            block = [inner]
        back = []
        if spec["custom"]:
            back.append(ScaleShift(init_scale=1.5, name=names("scale_shift")))
        if spec["time_distributed"] and seqs:
            back.append(L.TimeDistributed(L.Dense(3, activation="tanh", name=names("td_dense")), name=names("td")))
        elif spec["dense"]:
            back.append(L.Dense(3, activation="tanh", name=names("head")))
        if spec["api"] == "sequential":
            model = K.Sequential([L.InputLayer(in_shape, dtype="int32" if tokens else "float32")] + front + block + back,
                                 name="model")
        else:
            x = K.Input(in_shape, dtype="int32" if tokens else "float32", name="x")
            h = x
            for lay in front:
                h = lay(h)
            trunk = h
            for lay in block:
                h = lay(h)
            if spec["merge"]:
                h2 = trunk
                for lay in rnn_block(dict(spec, plain_rnn=None), names, seqs):
                    h2 = lay(h2)
                if spec["merge"] == "concat":
                    h = L.Concatenate(name=names("concat"))([h, h2])
                elif h.shape[-1] == h2.shape[-1]:
                    h = L.Add(name=names("add"))([h, h2])
                else:
                    h = L.Concatenate(name=names("concat"))([h, h2])
            for lay in back:
                h = lay(h)
            model = K.Model(x, h, name="model")
        if spec["compile"]:
            model.compile(optimizer=K.optimizers.Adam(learning_rate=0.002), loss="mse")
        randomize(model, seed)
        return model

    def randomize(model, seed):
        rng = np.random.default_rng(seed)
        for var in model.weights:
            name = var.name.split("/")[-1].split(":")[0]
            shape = tuple(var.shape)
            if name == "recurrent_kernel":
                H = shape[0]
                blocks = []
                for _ in range(shape[1] // H):
                    q, r = np.linalg.qr(rng.normal(size=(H, H)))
                    blocks.append(0.9 * q * np.sign(np.diag(r)))
                val = np.concatenate(blocks, 1)
            elif name in ("kernel", "embeddings"):
                val = rng.uniform(-0.6, 0.6, size=shape)
            elif name in ("gamma", "scale", "moving_variance"):
                val = rng.uniform(0.5, 1.5, size=shape)
            else:  # bias, beta, moving_mean, shift
                val = rng.uniform(-0.5, 0.5, size=shape)
            var.assign(val.astype(var.dtype.as_numpy_dtype))

    def inputs(spec, seed):
        rng = np.random.default_rng(seed + 7)
        steps = spec["steps"]
        if spec["input"] == "tokens":
            x = rng.integers(1, spec["vocab"], size=(BATCH, steps)).astype("int32")
            if spec.get("mask_zero"):
                x[0, -2:] = 0
            return x
        return rng.normal(size=(BATCH, steps, spec["features"])).astype("float32")

    def twin(config):
        """The config with every CuDNN layer rewritten to its CPU twin: what cuDNN computes."""
        config = copy.deepcopy(config)
        for d in _walk_dicts(config):
            if d.get("class_name") in CUDNN_CLASSES and isinstance(d.get("config"), dict):
                d["class_name"] = d["class_name"][5:]  # CuDNNGRU -> GRU
                d["config"].update(activation="tanh", recurrent_activation="sigmoid", use_bias=True)
                if d["class_name"] == "GRU":
                    d["config"]["reset_after"] = True
        return config

    def first_line(e):
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {(text[0] if text else '')[:300]}"

    spec_in = json.loads((out_dir / "cases.json").read_text())
    built = {}
    for case in spec_in["cases"]:
        cdir = out_dir / case["id"]
        cdir.mkdir(exist_ok=True)
        weights_only = case["spec"]["save"] == "weights"
        entry = built[case["id"]] = {}
        base_h5, base_json = cdir / "orig.h5", cdir / "orig.json"
        try:
            if base_h5.exists():
                pass  # built by an earlier run (mode "all"): the same seed makes the same file
            elif case.get("corpus"):
                src = LEGACY_WRITERS / case["corpus"]
                base_h5 = cdir / "orig.h5"
                shutil.copy(src, base_h5)
                if weights_only:
                    base_json = cdir / "orig.json"
                    shutil.copy(src.with_suffix(".json"), base_json)
            else:
                model = build(case["spec"], case["seed"])
                base_h5 = cdir / "orig.h5"
                if weights_only:
                    model.save_weights(str(base_h5))
                    base_json = cdir / "orig.json"
                    base_json.write_text(model.to_json())
                else:
                    model.save(str(base_h5))
        except Exception as e:  # noqa: BLE001 - a spec tf_keras cannot build: the generator's fault, reported
            entry["_build_error"] = first_line(e)
            continue
        import h5py

        with h5py.File(base_h5, "r") as f:
            attrs = {k: f.attrs[k] for k in ("keras_version", "backend", "model_config", "training_config") if k in f.attrs}
        attrs = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in attrs.items()}
        base_config = json.loads(base_json.read_text() if weights_only else attrs["model_config"])
        x = inputs(case["spec"], case["seed"])
        for vname, kinds in variants_of(case, spec_in["mode"]).items():
            doc = {"config": copy.deepcopy(base_config), "attrs": dict(attrs), "bytes": False}
            changes = {}
            for k in kinds:
                changes[k] = MUTATIONS[k].apply(doc, random.Random(f"{case['seed']}-{k}"))
            v = {"kinds": kinds, "changes": changes, "weights_only": weights_only}
            entry[vname] = v
            if any(not c for c in changes.values()):
                v["inapplicable"] = sorted(k for k, c in changes.items() if not c)
                continue
            h5 = cdir / f"{vname}.h5"
            shutil.copy(base_h5, h5)
            text = json.dumps(doc["config"])
            with h5py.File(h5, "r+") as f:
                for key in ("keras_version", "backend"):
                    val = doc["attrs"].get(key)
                    if isinstance(val, bytes):
                        f.attrs[key] = np.bytes_(val)
                if not weights_only:
                    f.attrs["model_config"] = np.bytes_(text.encode()) if doc["bytes"] else text
                    if doc["attrs"].get("training_config"):
                        tc = doc["attrs"]["training_config"]
                        f.attrs["training_config"] = np.bytes_(tc.encode()) if doc["bytes"] else tc
            v["h5"] = h5.name
            if weights_only:
                (cdir / f"{vname}.json").write_text(text)
                v["config_json"] = f"{vname}.json"
            # the precondition: tf_keras opens it
            try:
                K.backend.clear_session()
                if weights_only:
                    with K.utils.custom_object_scope(custom):
                        m = K.models.model_from_json(text, custom_objects=custom)
                    m.load_weights(str(h5))
                else:
                    K.models.load_model(str(h5), compile=False, custom_objects=custom)
            except Exception as e:  # noqa: BLE001 - tf_keras refuses: discarded
                v["discarded"] = first_line(e)
                continue
            # the oracle: the CPU twin of the variant's own config, tf_keras's own weight loading
            try:
                K.backend.clear_session()
                with K.utils.custom_object_scope(custom):
                    m = K.models.model_from_json(json.dumps(twin(doc["config"])), custom_objects=custom)
                m.load_weights(str(h5))
                y = m(x, training=False)  # eager: predict's tf.function tracing costs seconds a model
                y = y[0] if isinstance(y, list) else y
                y = y.numpy()
            except Exception as e:  # noqa: BLE001
                v["oracle_error"] = first_line(e)
                continue
            np.savez(cdir / f"{vname}.npz", x=x, y=np.asarray(y, np.float64))
            v["npz"] = f"{vname}.npz"
    (out_dir / "built.json").write_text(json.dumps(built, indent=1))


# --------------------------------------------------------------------------- the Keras 3 half

#: Refusals (exit 3) accepted as right, by the start of gruconv's error line: {prefix: reason}.  Empty: every
#: refusal of a file tf_keras opens is a counterexample until someone argues it here.
ACCEPTED_REFUSALS: dict = {}

CUSTOM_OBJECTS_FILE = HERE / "dialect_layers.py"


def _custom_objects():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dialect_layers", CUSTOM_OBJECTS_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"ScaleShift": mod.ScaleShift}


def _run_cli(args):
    from click.testing import CliRunner

    from gruconv.cli import main

    r = CliRunner().invoke(main, [str(a) for a in args])
    escaped = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
    return r.exit_code, r.output, escaped


def _error_line(output: str) -> str:
    lines = [l for l in output.strip().splitlines() if l.startswith("gruconv: error:")]
    return (lines[0] if lines else output.strip()[-300:])[:400]


def check_variant(case_dir: Path, v: dict, *, verify: bool = True) -> dict:
    """The check of one variant tf_keras opened; ``{"ok": bool, "symptom": ..., "detail": ..., ...}``."""
    import numpy as np

    src = case_dir / v["h5"]
    extra = []
    if v.get("config_json"):
        extra += ["--config", case_dir / v["config_json"]]
    if v.get("config_json"):
        text = (case_dir / v["config_json"]).read_text()
    else:
        import h5py

        with h5py.File(src, "r") as f:
            raw = f.attrs["model_config"]
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
    has_custom = "ScaleShift" in text
    custom = ["--custom-objects", CUSTOM_OBJECTS_FILE] if has_custom else []
    out = case_dir / (Path(v["h5"]).stem + ".keras")
    if out.exists():
        out.unlink()
    res = {"ok": False}
    code, output, escaped = _run_cli(["convert", src, out, *extra])
    res["convert_exit"] = code
    if escaped is not None:
        return dict(res, symptom="escaped", detail=repr(escaped)[:400])
    if code == 3:
        line = _error_line(output)
        for prefix, why in ACCEPTED_REFUSALS.items():
            if line.startswith(prefix):
                return dict(res, ok=True, symptom=None, accepted_refusal=why, detail=line)
        return dict(res, symptom="refused", detail=line)
    if code != 0:
        return dict(res, symptom=f"exit{code}", detail=_error_line(output))
    if "nothing to convert" in output:
        return dict(res, symptom="nothing_to_convert", detail=output.strip()[-300:])
    import warnings

    import keras

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = keras.saving.load_model(str(out), custom_objects=_custom_objects() if has_custom else None)
    except Exception as e:  # noqa: BLE001
        text = str(e).strip().splitlines()
        return dict(res, symptom="load", detail=(text[-1] if text else type(e).__name__)[:400])
    ref = np.load(case_dir / v["npz"])
    got = model.predict(ref["x"], verbose=0)
    got = np.asarray(got[0] if isinstance(got, list) else got, np.float64)
    y = ref["y"]
    if got.shape != y.shape:
        return dict(res, symptom="mismatch", detail=f"output shape {got.shape}, tf_keras {y.shape}")
    err = float(np.max(np.abs(got - y)))
    mag = float(np.max(np.abs(y)))
    res.update(max_abs_err=err, ref_magnitude=mag)
    bad_numbers = not (err <= ATOL or err <= RTOL * mag)
    vcode = None
    if verify or bad_numbers:
        vcode, voutput, vescaped = _run_cli(["verify", src, out, *extra, *custom])
        res["verify_exit"] = vcode
        if vescaped is not None:
            return dict(res, symptom="verify_escaped", detail=repr(vescaped)[:400])
        res["verify_line"] = _error_line(voutput) if vcode else None
    if bad_numbers:
        i = np.unravel_index(int(np.argmax(np.abs(got - y))), y.shape)
        return dict(res, symptom="mismatch",
                    detail=f"max |gruconv - tf_keras| = {err:.3g} (|y| up to {mag:.3g}; at {tuple(int(j) for j in i)}: "
                           f"tf_keras {y[i]:.6f}, gruconv {got[i]:.6f}); verify exit {vcode}")
    if verify and vcode != 0:
        return dict(res, symptom="verify", detail=f"verify exit {vcode}: {res['verify_line']}")
    return dict(res, ok=True, symptom=None)


def _same_failure(a: dict, b: dict) -> bool:
    """The same symptom and message (the variant's own file name aside)."""
    import re

    norm = lambda r: re.sub(r"\S+\.(h5|keras|json)", "FILE", str(r.get("detail")))  # noqa: E731
    return a.get("symptom") == b.get("symptom") and norm(a) == norm(b)


#: Counterexample classes of UNMUTATED models (what tf_keras 2.21 itself writes), named by the model feature
#: that brings them out: {name: (the spec has it, the result shows it, what was seen)}.  A base failure that
#: matches none is plain ``base``.
BASE_FEATURES = {
    "nested_functional_then_layer": (
        lambda spec: (spec.get("api") == "sequential" and spec.get("nested") == "functional"
                      and bool(spec.get("custom") or spec.get("dense") or spec.get("time_distributed"))),
        lambda r: r.get("symptom") == "load" and "to a shape" in str(r.get("detail")),
        "a Functional nested in a Sequential has its single output written as a one-element list "
        "(output_layers [[name, 0, 0]]; Keras 3 itself writes [name, 0, 0]), so Keras 3 hands the Sequential's "
        "next layer (Dense, TimeDistributed, a custom layer) a list: its build gets a tuple of shapes "
        "('Cannot convert ((None, T, F),) to a shape'); inside a Functional the same nested model loads"),
}


def base_features(spec: dict) -> list:
    """The BASE_FEATURES a spec has (whether or not they fail)."""
    return [name for name, (has, _, _) in BASE_FEATURES.items() if has(spec)]


def base_class(spec: dict, result: dict) -> str:
    for name, (has, seen, _) in BASE_FEATURES.items():
        if has(spec) and seen(result):
            return f"base:{name}/{result['symptom']}"
    return f"base/{result['symptom']}"


def classify(case: dict, case_dir: Path, entries: dict, failed: dict, verify: bool = True) -> str:
    """The class of a failed case: ``base`` if its unmutated file fails too, else the kinds that fail alone
    (joined by ``+``), else ``combo:`` and all its kinds."""
    base = entries.get("base")
    if not case["kinds"]:
        return base_class(case["spec"], failed)
    if base and base.get("npz"):
        rb = check_variant(case_dir, base, verify=verify)
        if not rb["ok"]:
            same = _same_failure(rb, failed)
            if same or len(case["kinds"]) > 1:
                return base_class(case["spec"], rb) + ("" if same else f"+combo:{'+'.join(case['kinds'])}/{failed['symptom']}")
            # the base fails, and the mutation brings out a failure of its own besides
            return base_class(case["spec"], rb) + f"+{case['kinds'][0]}/{failed['symptom']}"
    if len(case["kinds"]) == 1:
        return f"{case['kinds'][0]}/{failed['symptom']}"
    alone = []
    for k in case["kinds"]:
        v = entries.get(k)
        if v and v.get("npz"):
            r = check_variant(case_dir, v, verify=verify)
            if not r["ok"]:
                alone.append(f"{k}/{r['symptom']}")
    return "+".join(alone) if alone else f"combo:{'+'.join(case['kinds'])}/{failed['symptom']}"


def run_cases(cases: list, work: Path, *, verify: bool = True, classify_failures: bool = True, mode: str = "all",
              log=None, built: dict = None) -> list:
    """Both halves for ``cases``: one record per case (``status``: passed / counterexample / discarded /
    inapplicable / build_error / oracle_error; a counterexample also has ``result`` and, with
    ``classify_failures``, ``class`` -- from a second tf_keras run that builds the failed cases' base and
    single-kind variants)."""
    built = build_cases(cases, work, mode=mode) if built is None else built
    records = []
    for case in cases:
        entries = built.get(case["id"], {})
        rec = {"id": case["id"], "seed": case["seed"], "kinds": case["kinds"], "profile": case.get("profile"),
               "spec": describe(case), "given": case.get("given")}
        v = entries.get("all", {})
        if "_build_error" in entries:
            rec.update(status="build_error", detail=entries["_build_error"])
        elif v.get("inapplicable"):
            rec.update(status="inapplicable", detail=v["inapplicable"])
        elif v.get("discarded"):
            rec.update(status="discarded", detail=v["discarded"])
        elif v.get("oracle_error"):
            rec.update(status="oracle_error", detail=v["oracle_error"])
        else:
            rec["changes"] = v["changes"]
            r = check_variant(work / case["id"], v, verify=verify and case.get("verify", True))
            rec["result"] = r
            rec["status"] = "passed" if r["ok"] else "counterexample"
            if not r["ok"] and case.get("corpus") and not case["kinds"]:
                # a real writer's file as it is: the class is what it carries (index.json), unchecked
                rec["class"] = f"file:{'+'.join(case.get('carries') or ['base'])}/{r['symptom']}"
            elif not r["ok"] and not case["kinds"]:
                rec["class"] = base_class(case["spec"], r)
            elif not r["ok"] and len(case["kinds"]) == 1 and not classify_failures:
                rec["class"] = f"{case['kinds'][0]}/{r['symptom']}"
        records.append(rec)
    todo = [c for c, r in zip(cases, records) if r["status"] == "counterexample" and "class" not in r]
    if todo and classify_failures:
        need = [c for c in todo if not set(variants_of(c, "classify")) <= set(built.get(c["id"], {}))
                and not (len(c["kinds"]) == 1 and c.get("with_base"))]
        more = build_cases(need, work, mode="classify") if need else {}
        for case in todo:
            rec = next(r for r in records if r["id"] == case["id"])
            entries = dict(built.get(case["id"], {}), **more.get(case["id"], {}))
            rec["class"] = classify(case, work / case["id"], entries, rec["result"], verify=verify)
    for rec in records:
        if rec["status"] == "counterexample" and "class" not in rec:
            rec["class"] = f"combo:{'+'.join(rec['kinds'])}/{rec['result']['symptom']}"
        if log:
            log(rec)
    return records


def kinds_of_class(cls: str) -> set:
    """The mutation kinds a class names (``hard_sigmoid_rnn/mismatch+init_dtype/refused`` -> both)."""
    return {chunk.split(":", 1)[-1].split("/")[0] for chunk in cls.split("+")}


def reproducer(rec: dict) -> str:
    """The command that runs this one case again (``--keep DIR`` leaves its files there)."""
    if rec["id"].startswith("file-"):
        return "PYTHONPATH=src python scripts/dialect_sweep.py --corpus --keep DIR   # " + rec["id"]
    given = rec.get("given") or {}
    args = f"--cases 1 --seed {rec['seed']}"
    if given.get("kinds") is not None:
        args += f" --kinds {','.join(given['kinds']) or 'none'}"
    if given.get("profile"):
        args += f" --profile {given['profile']}"
    if given.get("save"):
        args += f" --save {given['save']}"
    return f"PYTHONPATH=src python scripts/dialect_sweep.py {args} --keep DIR   # {rec['spec']}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        _child(Path(sys.argv[2]))
    else:
        sys.exit("usage: TF_USE_LEGACY_KERAS=1 python tests/dialect_cases.py build DIR")
