"""The independent reference for a tf.keras 2.x model holding CuDNNGRU/CuDNNLSTM layers: tf_keras itself, in a
subprocess, each CuDNN layer swapped for its CPU twin (``GRU(reset_after=True)``/``LSTM`` with cuDNN's fixed
activations) and the HDF5 twin's weights loaded by tf_keras's own ``load_weights`` (it converts cuDNN weights
itself, ``tf_keras/src/saving/legacy/hdf5_format.py``).

One copy, used by ``tests/readers/test_graphs.py`` and ``tests/writers/test_graph_onnx.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r'''
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import h5py, numpy as np, tf_keras as K

def plain(obj):
    if isinstance(obj, dict):
        if obj.get("class_name") in ("CuDNNGRU", "CuDNNLSTM"):
            obj["class_name"] = obj["class_name"][5:]
            obj.pop("module", None); obj.pop("registered_name", None)
            obj["config"].update(activation="tanh", recurrent_activation="sigmoid", use_bias=True)
            if obj["class_name"] == "GRU":
                obj["config"]["reset_after"] = True
        for v in obj.values():
            plain(v)
    elif isinstance(obj, list):
        for v in obj:
            plain(v)
    return obj

job = json.loads(sys.argv[1])
with h5py.File(job["h5"]) as f:
    cfg = f.attrs["model_config"]
twin = K.models.model_from_json(json.dumps(plain(json.loads(cfg))))
twin.load_weights(job["h5"])
np.save(job["y"], twin.predict(np.load(job["x"]), verbose=0))
'''


def reference(h5, x_npy, y_npy) -> None:
    """Write to ``y_npy`` what tf_keras computes on the CPU for ``x_npy`` with the HDF5 twin ``h5``."""
    job = {"h5": str(h5), "x": str(x_npy), "y": str(y_npy)}
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(job)], capture_output=True, text=True,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
