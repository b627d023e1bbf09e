"""TF1 checkpoint -> legacy-layout Keras weights (``gruconv convert CKPT out.h5``, issue 10).

Independent reference: tf_keras.  In tf_keras (in the test's process, as verify's tf_keras row runs it) the model the
``.keras`` output describes is rebuilt by hand -- ``Input((None, input_size))`` then per layer
``GRU``/``LSTM(units, return_sequences=True, reset_after=True, recurrent_activation="sigmoid")``,
wrapped in ``Bidirectional(..., merge_mode="concat")`` for a bidirectional stack, with
gruconv's layer names -- ``model.load_weights(out.h5)`` and ``predict`` on fixed inputs.  That must
equal Keras 3 ``load_model(out.keras).predict`` (1e-5).  Keras 3's ``load_weights`` of the same
``.h5`` and of a ``.weights.h5`` output into the ``.keras`` model's architecture must too.

``test_planted_error_is_caught``: one input-kernel weight of the ``.h5``'s first layer is moved by
0.05 and the tf_keras comparison (1e-5) reports it.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from gruconv import api

# xdist_group (docs/testing.md): the module fixtures run batched TensorFlow children; one worker runs them once.
pytestmark = pytest.mark.xdist_group("test_tf1_h5_weights")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"

# name: (checkpoint dir, cell, input size, units, layers, bidirectional, layer-name base)
CASES = {
    "gru_bidir": ("tf1/layer_bidir", "gru", 5, 7, 2, True, "encoder_cudnn_gru"),
    "gru_uni": ("tf1/layer_uni", "gru", 5, 7, 2, False, "rnn_cudnn_gru"),
    "lstm_bidir": ("tf1_lstm/layer_bidir", "lstm", 3, 5, 2, True, "encoder_cudnn_lstm"),
}
TOL = 1e-5

def _tf_keras_outputs(jobs: list) -> None:
    """tf_keras in this process (as verify's tf_keras row imports it: :mod:`gruconv.verify.reference.keras2`): per
    job the architecture rebuilt by hand, ``load_weights`` of the ``.h5`` output, ``predict`` saved (an error saved
    as text, which the test reading it reports).  In-process: a child interpreter importing TensorFlow and tf_keras
    for this was ~8 CPU s of the quick tier (issue 47); the reference is independent of gruconv's code, not of the
    process."""
    import traceback

    from gruconv.keras3.runtime import import_quietly

    k = import_quietly("tf_keras")
    built = {}  # one model per architecture: the planted file's weights load into the clean file's model
    for job in jobs:
        try:
            arch = tuple(job[key] for key in ("cell", "input", "units", "layers", "bidir", "base"))
            if arch in built:
                model = built[arch]
                model.load_weights(job["h5"])
                np.save(job["out"], model.predict(np.load(job["x"]), verbose=0))
                continue
            inp = k.Input((None, job["input"]), name="inputs")
            x = inp
            for layer in range(job["layers"]):
                name = "%s_l%d" % (job["base"], layer)
                cls = k.layers.LSTM if job["cell"] == "lstm" else k.layers.GRU
                opts = dict(return_sequences=True, recurrent_activation="sigmoid", activation="tanh")
                if job["cell"] == "gru":
                    opts["reset_after"] = True
                if job["bidir"]:
                    x = k.layers.Bidirectional(cls(job["units"], **opts), merge_mode="concat", name=name)(x)
                else:
                    x = cls(job["units"], name=name, **opts)(x)
            model = built[arch] = k.Model(inp, x)
            model.load_weights(job["h5"])
            np.save(job["out"], model.predict(np.load(job["x"]), verbose=0))
        except Exception:  # noqa: BLE001 - the test that reads this output fails with it
            Path(job["out"] + ".error").write_text(traceback.format_exc())


def _keras3_outputs(jobs: list) -> None:
    """Keras 3 in this process (the worker's own, TensorFlow backend): ``load_model`` of the ``.keras`` output and
    ``load_weights`` of the ``.h5`` and ``.weights.h5`` outputs into its architecture, each ``predict`` saved (an
    error saved as text, which the test reading it reports).  In-process: a child interpreter importing Keras for
    this was ~7 CPU s of the quick tier."""
    import traceback

    import keras

    for job in jobs:
        x = np.load(job["x"])
        model = keras.saving.load_model(job["keras"])
        np.save(job["out"] + "_keras.npy", model.predict(x, verbose=0))
        for kind in ("h5", "weights_h5"):
            try:
                fresh = keras.Model.from_config(model.get_config())
                fresh.load_weights(job[kind])
                np.save(job["out"] + "_" + kind + ".npy", fresh.predict(x, verbose=0))
            except Exception:  # noqa: BLE001 - the test that reads this output fails with it
                Path(job["out"] + "_" + kind + ".error").write_text(traceback.format_exc())


def _perturb(src: Path, dst: Path, delta: float = 0.05) -> str:
    dst.write_bytes(src.read_bytes())
    with h5py.File(dst, "r+") as f:
        lname = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["layer_names"]][1]
        g = f[lname]
        wname = next(w.decode() if isinstance(w, bytes) else w for w in g.attrs["weight_names"]
                     if (w.decode() if isinstance(w, bytes) else w).endswith("/kernel:0"))
        data = g[wname][...]
        data[0, 0] += delta
        g[wname][...] = data
    return f"{lname}/{wname}"


#: The cases the quick tier builds: a bidirectional GRU and LSTM; the unidirectional GRU is the slow tier's
#: (issue 47).  The fixture builds only the cases the run's selected tests ask for.
QUICK_CASES = {"gru_bidir", "lstm_bidir"}


def _cases():
    return [n if n in QUICK_CASES else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)]


def _selected_cases(request) -> set:
    """The case names this run's selected tests of this module ask for."""
    names = set()
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is request.module and spec is not None and "name" in spec.params:
            names.add(spec.params["name"])
    return names


@pytest.fixture(scope="module")
def results(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("tf1_h5")
    wanted = _selected_cases(request)
    rng = np.random.default_rng(10)
    tfk_jobs, k3_jobs, files = [], [], {}
    for name, (ckpt, cell, isz, units, layers, bidir, base) in CASES.items():
        if name not in wanted:
            continue
        d = tmp / name
        d.mkdir()
        x = rng.standard_normal((3, 6, isz)).astype("float32")
        np.save(d / "x.npy", x)
        h5, wh5, kf = d / "out.h5", d / "out.weights.h5", d / "out.keras"
        for out in (h5, wh5, kf):
            api.convert(FIXTURES / ckpt, out)
        planted = d / "planted.h5"
        files[name] = dict(h5=h5, planted=planted, where=_perturb(h5, planted))
        arch = dict(cell=cell, input=isz, units=units, layers=layers, bidir=bidir, base=base, x=str(d / "x.npy"))
        tfk_jobs.append(dict(arch, h5=str(h5), out=str(d / "tfk.npy")))
        tfk_jobs.append(dict(arch, h5=str(planted), out=str(d / "tfk_planted.npy")))
        k3_jobs.append(dict(x=str(d / "x.npy"), keras=str(kf), h5=str(h5), weights_h5=str(wh5), out=str(d / "k3")))
    _tf_keras_outputs(tfk_jobs)
    _keras3_outputs(k3_jobs)
    return tmp, files


def _load(path: Path) -> np.ndarray:
    err = Path(str(path)[:-len(".npy")] + ".error") if not path.exists() else None
    if err is not None:
        alt = Path(str(path) + ".error")
        msg = (err.read_text() if err.exists() else alt.read_text() if alt.exists() else "no output")
        pytest.fail(msg)
    return np.load(path)


@pytest.mark.parametrize("name", _cases())
def test_legacy_layout(results, name):
    """The file has the layout tf_keras's save_weights writes for that architecture."""
    _, files = results
    ckpt, cell, isz, units, layers, bidir, base = CASES[name]
    with h5py.File(files[name]["h5"], "r") as f:
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["layer_names"]]
        assert names == ["inputs"] + [f"{base}_l{i}" for i in range(layers)]
        assert "backend" in f.attrs and "keras_version" in f.attrs
        assert len(f["inputs"].attrs["weight_names"]) == 0
        for i in range(layers):
            g = f[f"{base}_l{i}"]
            wn = [w.decode() if isinstance(w, bytes) else w for w in g.attrs["weight_names"]]
            assert len(wn) == (6 if bidir else 3)
            for w in wn:
                assert g[w].dtype == np.float32
            assert g[wn[0]].shape == ((isz if i == 0 else units * (2 if bidir else 1)), (3 if cell == "gru" else 4) * units)


@pytest.mark.parametrize("name", _cases())
def test_tf_keras_load_weights_matches_keras_model(results, name):
    tmp, _ = results
    d = tmp / name
    ref = _load(d / "k3_keras.npy")
    got = _load(d / "tfk.npy")
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("name", _cases())
@pytest.mark.parametrize("kind", ["h5", "weights_h5"])
def test_keras3_load_weights_matches_keras_model(results, name, kind):
    tmp, _ = results
    d = tmp / name
    ref = _load(d / "k3_keras.npy")
    got = _load(d / f"k3_{kind}.npy")
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("name", _cases())
def test_planted_error_is_caught(results, name):
    tmp, files = results
    d = tmp / name
    ref = _load(d / "k3_keras.npy")
    got = _load(d / "tfk_planted.npy")
    diff = float(np.max(np.abs(got - ref)))
    assert diff > TOL, f"perturbing {files[name]['where']} by 0.05 went unnoticed (max diff {diff:.3g})"


def test_cli_h5_name_and_format(tmp_path):
    """``.h5`` names and ``--format h5-weights`` pick the legacy writer (no usage error any more)."""
    for out, fmt in ((tmp_path / "a.h5", None), (tmp_path / "a.hdf5", None), (tmp_path / "b.bin", "h5-weights")):
        res = api.convert(FIXTURES / "tf1/layer_uni", out, format=fmt)
        assert str(out) in res.outputs
        with h5py.File(out, "r") as f:
            assert "layer_names" in f.attrs and "model_config" not in f.attrs
