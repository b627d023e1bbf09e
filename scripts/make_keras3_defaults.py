"""Regenerate ``src/gruconv/keras3/defaults.py`` from the installed Keras 3 (the one the project pins
for its reference outputs: 3.15.1).

Why a generated table: the streaming writer (``gruconv.keras3.config``) must write a ``config.json``
without importing Keras, yet every layer config Keras 3 writes lists *every* constructor argument
(``Layer.get_config()`` of the built layer).  The defaults are facts of one Keras release; reading
them off ``get_config()`` of a default-constructed object, rather than typing them, keeps them exact.
Run: ``PYTHONPATH=src .venv/bin/python scripts/make_keras3_defaults.py``.
"""

import json
import os
import pprint
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402
from keras.src.saving import serialization_lib  # noqa: E402

L = keras.layers
# class -> constructor arguments needed to build one (required arguments only)
LAYERS = {
    "InputLayer": dict(shape=(None,)), "Embedding": dict(input_dim=2, output_dim=2),
    "Dense": dict(units=1), "Dropout": dict(rate=0.5), "SpatialDropout1D": dict(rate=0.5),
    "GaussianDropout": dict(rate=0.5), "GaussianNoise": dict(stddev=0.1), "AlphaDropout": dict(rate=0.5),
    "Activation": dict(activation="relu"), "BatchNormalization": {}, "LayerNormalization": {},
    "Masking": {}, "Flatten": {}, "Reshape": dict(target_shape=(1,)), "Permute": dict(dims=(1,)),
    "RepeatVector": dict(n=1), "Concatenate": {}, "Add": {}, "Subtract": {}, "Multiply": {}, "Average": {},
    "Maximum": {}, "Minimum": {}, "Dot": dict(axes=1), "Conv1D": dict(filters=1, kernel_size=1),
    "MaxPooling1D": {}, "AveragePooling1D": dict(pool_size=2), "GlobalMaxPooling1D": {}, "GlobalAveragePooling1D": {},
    "ZeroPadding1D": {}, "Cropping1D": {}, "UpSampling1D": {}, "ReLU": {}, "LeakyReLU": {}, "Softmax": {},
    "ELU": {}, "PReLU": {},
    "GRU": dict(units=1), "LSTM": dict(units=1), "SimpleRNN": dict(units=1),
}
INITIALIZERS = ["Zeros", "Ones", "Constant", "RandomUniform", "RandomNormal", "TruncatedNormal", "Identity",
                "Orthogonal", "VarianceScaling", "GlorotUniform", "GlorotNormal", "HeUniform", "HeNormal",
                "LecunUniform", "LecunNormal"]
REGULARIZERS = {"L1": {}, "L2": {}, "L1L2": {}, "OrthogonalRegularizer": {}}
CONSTRAINTS = {"MaxNorm": {}, "MinMaxNorm": {}, "NonNeg": {}, "UnitNorm": {}}


def entry(obj, drop=("name",)):
    s = serialization_lib.serialize_keras_object(obj)
    cfg = {k: v for k, v in s["config"].items() if k not in drop}
    return {"module": s["module"], "config": cfg}


def main():
    out = {"keras_version": keras.__version__, "layers": {}, "initializers": {}, "regularizers": {},
           "constraints": {}}
    for cls, args in LAYERS.items():
        e = entry(getattr(L, cls)(**args))
        for k in args:  # required: no default
            if cls != "InputLayer":
                e["config"].pop(k, None)
        e["required"] = sorted(args)
        out["layers"][cls] = e
    for cls in INITIALIZERS:
        out["initializers"][cls] = entry(getattr(keras.initializers, cls)(), drop=())
    for cls in REGULARIZERS:
        out["regularizers"][cls] = entry(getattr(keras.regularizers, cls)(), drop=())
    for cls in CONSTRAINTS:
        out["constraints"][cls] = entry(getattr(keras.constraints, cls)(), drop=())
    OPTIMIZERS = ["Adam", "AdamW", "Adamax", "Nadam", "RMSprop", "SGD", "Adagrad", "Adadelta", "Ftrl", "Lion"]
    out["optimizers"] = {cls: entry(getattr(keras.optimizers, cls)(), drop=()) for cls in OPTIMIZERS}
    # Names keras.losses.get / keras.metrics.get resolve (a string a legacy training config may hold).
    CANDIDATES = sorted({n for m in (keras.losses, keras.metrics) for n in dir(m) if n.islower() and not n.startswith("_")}
                        | {"mse", "mae", "mape", "msle", "kld", "acc", "accuracy", "crossentropy", "ce", "bce"})

    def resolves(getter, name):
        try:
            return getter(name) is not None
        except Exception:  # noqa: BLE001
            return False

    out["loss_names"] = [n for n in CANDIDATES if resolves(keras.losses.get, n)]
    out["metric_names"] = [n for n in CANDIDATES if resolves(keras.metrics.get, n)]
    json.loads(json.dumps(out))  # plain JSON values only
    target = os.path.join(os.path.dirname(__file__), "..", "src", "gruconv", "keras3", "defaults.py")
    with open(target, "w") as f:
        f.write('"""Keras 3 constructor defaults, as ``get_config()`` reports them (generated: do not edit).\n\n'
                f'Written by ``scripts/make_keras3_defaults.py`` from Keras {keras.__version__}; read by\n'
                '``gruconv.keras3.config`` to write full Keras 3 configs without importing Keras.\n"""\n\n'
                "null, true, false = None, True, False\n\n")
        f.write("DEFAULTS = " + pprint.pformat(out, width=110, sort_dicts=False) + "\n")
    print("wrote", target, file=sys.stderr)


if __name__ == "__main__":
    main()
