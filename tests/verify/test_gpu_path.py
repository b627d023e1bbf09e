"""The converted model on the GPU path users deploy on (issue 12): ``verify --device both``.

Run on a GPU machine with a Keras backend that sees the GPU (``scripts/gpu_session.sh`` runs this file
once with ``KERAS_BACKEND=torch`` and once with ``KERAS_BACKEND=jax``); results are recorded in
``docs/gpu-verification.md``.  The CPU side of the same rules (rows, verdicts, the note when no GPU is
usable) is tested in ``tests/verify/test_verify.py`` / ``tests/verify/test_verdicts.py``.
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES, planted_error_copy

pytestmark = pytest.mark.gpu

CASES = [
    FIXTURES / "keras" / "sequential.h5",
    FIXTURES / "keras" / "bidir_concat.h5",
    FIXTURES / "keras" / "return_state.h5",
    FIXTURES / "keras" / "go_backwards.h5",
    FIXTURES / "keras_user" / "seq2seq.h5",
    FIXTURES / "keras_user" / "text_classifier.h5",
    FIXTURES / "keras_lstm" / "sequential.h5",
    FIXTURES / "keras_lstm" / "bidir_state.h5",
    FIXTURES / "keras_lstm" / "mixed.h5",
    FIXTURES / "tf1" / "layer_bidir",
    FIXTURES / "tf1" / "layer_80x256",
    FIXTURES / "tf1_lstm" / "layer_bidir",
]


@pytest.fixture(scope="module")
def backend():
    from gruconv.keras3 import runtime as keras3

    ok, why = keras3.gpu_status()
    assert ok, f"this file needs a GPU the Keras backend can use: {why}"
    return keras3.keras().backend.backend()


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_device_both_reports_cpu_and_both_gpu_maths(path, backend):
    from gruconv.verify import verify

    rep = verify(path, reference="cudnn", device="both", steps=16, batch=4)
    by_device: dict = {}
    for c in rep.checks:
        by_device.setdefault(c.device, []).append(c)
    assert set(by_device) == {"cpu", "gpu strict", "gpu default"}, by_device.keys()
    assert len(by_device["cpu"]) == len(by_device["gpu strict"]) == len(by_device["gpu default"])
    # strict fp32 on the GPU decides, like the CPU; default math is shown, never counted
    assert all(c.counts for c in by_device["cpu"] + by_device["gpu strict"])
    assert not any(c.counts for c in by_device["gpu default"])
    assert all(c.passed for c in by_device["cpu"]), [(c.name, c.max_abs) for c in by_device["cpu"]]
    assert all(c.passed for c in by_device["gpu strict"]), [(c.name, c.max_abs) for c in by_device["gpu strict"]]
    assert rep.passed
    assert all(c.reference_error is not None for c in rep.checks if "end to end" not in c.name)
    gpu = [d for d in rep.devices if d["device"].startswith("gpu")]
    assert len(gpu) == 2 and all(d["ran"] for d in gpu)
    # Keras took its fused path for every recurrent call on the GPU (cuDNN on torch/TensorFlow)
    for d in gpu:
        kernels = d["kernels"]
        single = {op: hows for op, hows in kernels.items() if op in ("gru", "lstm")}
        assert kernels and not any("fallback" in hows for hows in single.values()), d
        # a fused Bidirectional op may decline (JAX has no bidirectional_gru): then each direction
        # must have taken the single-direction fused kernel
        for op, hows in kernels.items():
            if op.startswith("bidirectional_") and "fallback" in hows:
                assert op.split("_", 1)[1] in single, d
        if backend in ("torch", "tensorflow"):  # a single-direction call there is cuDNN's kernel
            assert all("cudnn" in hows for hows in single.values()), d


def test_planted_error_fails_on_the_gpu_rows_too(tmp_path, backend):
    """A converted file with one recurrent weight changed fails on the CPU and on strict GPU math."""
    from gruconv.verify import verify

    src = FIXTURES / "keras" / "sequential.h5"
    bad = planted_error_copy(src, tmp_path)
    rep = verify(src, bad, reference="cudnn", device="both")
    failed = {c.device for c in rep.checks if not c.passed}
    assert {"cpu", "gpu strict"} <= failed and not rep.passed


def test_large_model_verify_both_is_timed(backend, tmp_path):
    """The 45.7 M-parameter model (bench/big.skel.h5 refilled): whole verify --device both, timed.
    The time is printed for docs/gpu-verification.md; the issue's 15 s target is a benchmark number,
    not asserted here."""
    import subprocess
    import sys
    import time

    from gruconv.verify import verify

    big = tmp_path / "big.h5"
    subprocess.run([sys.executable, str(FIXTURES.parent / "bench" / "h5_skeleton.py"), "inflate",
                    str(FIXTURES.parent / "bench" / "big.skel.h5"), str(big)], check=True)
    t0 = time.perf_counter()
    rep = verify(big, reference="cudnn", device="both", batch=4, steps=32)
    took = time.perf_counter() - t0
    print(f"\nLARGE MODEL verify --device both ({backend}): {took:.1f} s, passed={rep.passed}, "
          + ", ".join(f"{c.device} {c.name} {c.max_abs:.2e}" for c in rep.checks))
    assert rep.passed
