"""Quiet on a machine without a GPU (issue 30, part 8): ``gruconv verify`` prints none of the
frameworks' start-up log lines (TensorFlow's oneDNN notice, its cuInit / CUDA driver / "Could not
find cuda drivers" lines), and the report says plainly that there is no GPU and the float64 oracle
is the reference, instead of the CUDA error that absence causes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from gruconv.verify.engines import choose_reference
from gruconv.verify.reference import cudnn_lib

SRC = Path(__file__).resolve().parents[2] / "src"
NOISE = ("oneDNN custom operations", "cuInit", "CUDA driver version is insufficient", "Could not find cuda drivers",
         "absl::InitializeLog", "cudart_stub", "computation placer", "Unable to register", "TF-TRT Warning",
         "This TensorFlow binary is optimized")


@pytest.mark.parametrize("backend", ["tensorflow", pytest.param("jax", marks=pytest.mark.slow)])
def test_verify_without_gpu_is_quiet_and_says_no_gpu(backend, tmp_path):
    """``CUDA_VISIBLE_DEVICES=""`` hides any GPU, so a GPU machine answers as this one does
    (cudaErrorNoDevice there; no /dev/nvidia* here).  jax: Keras's legacy loader used to import
    TensorFlow itself on that backend (no longer called: models are built from the translated config)."""
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    env.update(PYTHONPATH=str(SRC), CUDA_VISIBLE_DEVICES="", KERAS_BACKEND=backend)
    p = subprocess.run([sys.executable, "-m", "gruconv", "verify", str(FIXTURES / "keras" / "sequential.h5"),
                        "--json", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not [n for n in NOISE if n in p.stderr + p.stdout], p.stderr
    assert p.stderr == ""
    rep = json.loads(out.read_text())
    assert rep["reference"] == "oracle"
    assert rep["reference_reason"].startswith("auto: no GPU") and "float64 oracle" in rep["reference_reason"]
    assert "insufficient" not in rep["reference_reason"]
    assert "no GPU" in p.stdout.splitlines()[0]


@pytest.fixture
def fresh_loader(monkeypatch):
    monkeypatch.setattr(cudnn_lib, "_STATE", None)
    monkeypatch.setattr(cudnn_lib, "_STATE_ERROR", None)
    return monkeypatch


def test_no_gpu_device_is_told_from_a_library_problem(fresh_loader, tmp_path):
    """The same missing CUDA runtime: "no GPU" where the machine has no NVIDIA device node, a library
    problem (the path named, no "no GPU") where it has one."""
    missing = str(tmp_path / "libcudart.so.99")
    fresh_loader.setenv(cudnn_lib.ENV_LIBCUDART, missing)
    fresh_loader.setattr(cudnn_lib, "no_gpu_device", lambda: True)
    ok, reason = cudnn_lib.available()
    assert not ok and reason.startswith(cudnn_lib.NO_GPU) and missing in reason
    kind, why = choose_reference("auto")
    assert kind == "oracle" and why.startswith("auto: no GPU: no NVIDIA GPU device") and why.endswith("float64 oracle")

    fresh_loader.setattr(cudnn_lib, "_STATE_ERROR", None)
    fresh_loader.setattr(cudnn_lib, "no_gpu_device", lambda: False)
    ok, reason = cudnn_lib.available()
    assert not ok and not reason.startswith(cudnn_lib.NO_GPU) and missing in reason
    kind, why = choose_reference("auto")
    assert kind == "oracle" and "no GPU:" not in why and "no usable GPU/cuDNN here" in why
