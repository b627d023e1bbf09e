"""What verify reuses or computes differently for speed (issue 30) gives the results of the plain
computation: bit for bit where it is the same arithmetic, within a stated bound where only BLAS's
summation order changed; and what is cached per process never carries one model's weights into the
next model's verdict (a planted error after a good file of the same architecture still fails).

The timings themselves are measured in ``bench/`` (``docs/benchmarks.md``), never asserted here."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import FIXTURES

KERAS = FIXTURES / "keras"
F16 = FIXTURES / "float16_weights" / "deepzip_16bit.h5"


def _perturb_before(a, rng, ulps=1, dtype=np.float32):
    """:func:`gruconv.verify.floor.perturb` as it was written before issue 30 (six temporaries)."""
    v = np.asarray(a, dtype=dtype)
    steps = rng.integers(-ulps, ulps + 1, size=v.shape).astype(dtype)
    return (v + steps * np.spacing(np.abs(v))).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("ulps", [1, 3])
def test_in_place_perturbation_is_bit_identical(dtype, ulps):
    from gruconv.verify.floor import perturb

    gen = np.random.default_rng(7)
    a = gen.standard_normal((129, 33)) * 10.0 ** gen.integers(-40, 40, (129, 33))
    a[0, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45]
    with np.errstate(all="ignore"):
        want = _perturb_before(a, np.random.default_rng(3), ulps, dtype)
        got = perturb(a, np.random.default_rng(3), ulps, dtype)
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit, NaN payloads included



def test_float32_spacing_from_exponent_bits_is_numpys():
    """The floor's ulp of ``|v|`` from the exponent bits (issue 30) is ``np.spacing(np.abs(v))`` bit for
    bit: every float32 exponent (zero, subnormals, normals, the maximum, inf, NaN), both signs, the
    edge mantissas and 2048 random ones each; a planted off-by-one exponent is caught."""
    from gruconv.verify.floor import _spacing_of_abs

    gen = np.random.default_rng(5)
    e = np.arange(256, dtype=np.uint32)[:, None]
    mant = np.concatenate([[0, 1, 2, 0x400000, 0x7FFFFE, 0x7FFFFF],
                           gen.integers(0, 1 << 23, 2048)]).astype(np.uint32)[None, :]
    bits = ((e << np.uint32(23)) | mant).reshape(-1)
    v = np.concatenate([bits, bits | np.uint32(1 << 31)]).view(np.float32)
    with np.errstate(all="ignore"):
        want = np.spacing(np.abs(v))
    got = np.empty_like(v)
    _spacing_of_abs(v, got)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), v[~same][:5]
    planted = got.copy()
    planted.view(np.uint32)[1000] += np.uint32(1 << 23)  # one element's spacing doubled
    assert not np.array_equal(planted.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("block", [1, 7, 4096, 1 << 20])
def test_blocked_int32_perturbation_is_the_whole_int64_draw(monkeypatch, block):
    """The floor's steps drawn as int32 blocks (issue 30) are the whole-shape int64 draw, element for
    element, and leave the generator where that draw left it (the next array's steps are the same too);
    a non-contiguous input is perturbed in its C order as before."""
    from gruconv.verify import floor

    monkeypatch.setattr(floor, "PERTURB_BLOCK", block)
    gen = np.random.default_rng(11)
    a = gen.standard_normal((61, 40))[:, ::3]  # a strided view
    b = gen.standard_normal((5, 3, 7)).astype(np.float32)
    r_before, r_after = np.random.default_rng([0x5E75, 2]), np.random.default_rng([0x5E75, 2])
    for arr in (a, b, np.zeros((0, 4))):
        want = _perturb_before(arr, r_before)
        got = floor.perturb(arr, r_after)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
    assert np.array_equal(r_before.integers(0, 1 << 30, 8), r_after.integers(0, 1 << 30, 8))

def _direction_before(step_fn, p, x, h, c, lengths, reverse, dt=np.float64):
    """:func:`gruconv.verify.reference.oracle._direction`'s products as they were before issue 30: the
    weights transposed into contiguous copies, ``h @ RT`` and ``x @ WT``."""
    T, B, _ = x.shape
    R = p.recurrent_weights.astype(dt)
    bW, bR = p.input_bias.astype(dt), p.recurrent_bias.astype(dt)
    G, H = R.shape[0], R.shape[1]
    RT = np.ascontiguousarray(R.transpose(2, 0, 1).reshape(R.shape[2], G * H))
    W = p.input_weights.astype(dt)
    WT = np.ascontiguousarray(W.reshape(G * H, W.shape[2]).T)
    xw = (x.reshape(T * B, -1) @ WT).reshape(T, B, G, H).transpose(2, 0, 1, 3) + bW[:, None, None, :]
    y = np.zeros((T, B, H), dtype=dt)
    bi = np.arange(B)
    for step in range(T):
        t = (lengths - 1 - step) if reverse else np.full(B, step)
        valid = step < lengths
        tt = np.clip(t, 0, T - 1)
        hr = h @ RT + bR.reshape(G * H)
        h_new, c_new = step_fn([xw[g, tt, bi] for g in range(G)], [hr[:, g * H:(g + 1) * H] for g in range(G)], h, c)
        h = np.where(valid[:, None], h_new, h)
        if c is not None:
            c = np.where(valid[:, None], c_new, c)
        y[tt[valid], bi[valid]] = h[valid]
    return y, h, c


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_oracle_products_match_the_transposed_copies(cell, dtype):
    """Same equations, same operands; only the BLAS call differs (``(R @ h.T).T`` for ``h @ R.T`` copied
    contiguous).  Bound: each output element is a sum of at most ``in + H`` products through tanh and
    sigmoid (slope <= 1), so the two summation orders differ by at most ``(in + H) * eps * sum |terms|``
    per step, a few hundred eps here; asserted as 1e-4 relative in float32 and 1e-12 in float64 over 12
    steps with variable lengths, backward direction included."""
    from gruconv.model.canonical import GateParams
    from gruconv.verify.reference.oracle import STEPS, _direction

    G = 3 if cell == "gru" else 4
    H, I, T, B = 96, 40, 12, 3
    gen = np.random.default_rng(11)
    p = GateParams(gen.uniform(-0.3, 0.3, (G, H, I)).astype(np.float32),
                   gen.uniform(-0.3, 0.3, (G, H, H)).astype(np.float32),
                   gen.uniform(-0.2, 0.2, (G, H)).astype(np.float32), gen.uniform(-0.2, 0.2, (G, H)).astype(np.float32))
    x = gen.uniform(-1, 1, (T, B, I)).astype(dtype)
    h0 = gen.uniform(-0.5, 0.5, (B, H)).astype(dtype)
    c0 = gen.uniform(-0.5, 0.5, (B, H)).astype(dtype) if cell == "lstm" else None
    lengths = np.array([T, 5, 9])
    bound = 1e-4 if dtype == np.float32 else 1e-12
    for reverse in (False, True):
        got = _direction(STEPS[cell], p, x, h0, c0, lengths, reverse, dt=dtype)
        want = _direction_before(STEPS[cell], p, x, h0, c0, lengths, reverse, dt=dtype)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
                continue
            assert g.dtype == w.dtype
            assert np.max(np.abs(g - w)) <= bound * max(1.0, float(np.max(np.abs(w))))


def test_reference_buffer_reuse_is_bit_identical():
    """:func:`gruconv.verify.graph._original_buffer` hands a check group's later runs the buffer packed
    for its first: the reference outputs are the same arrays as with the buffer packed afresh."""
    from gruconv import readers
    from gruconv.options import Options
    from gruconv.verify import graph
    from gruconv.verify.engines import Engine

    module = readers.module(readers.detect(KERAS / "bidir_concat.h5"))
    doc = module.read(KERAS / "bidir_concat.h5", Options())
    rnn = doc.rnns[0]
    x = np.random.default_rng(0).uniform(-1, 1, (2, 6, rnn.stack.shape.input_size))
    eng = Engine("oracle", False)
    graph._BUFFERS.clear()
    fresh = graph._reference_rnn(rnn, x, eng)
    assert len(graph._BUFFERS) == 2  # forward and backward kept
    held = [b for _, _, b, _ in graph._BUFFERS]
    again = graph._reference_rnn(rnn, x, eng)
    assert [b for _, _, b, _ in graph._BUFFERS] == held and all(a is b for a, b in
                                                               zip(held, [b for _, _, b, _ in graph._BUFFERS]))
    for a, b in zip(fresh[0] + fresh[1], again[0] + again[1]):
        assert np.array_equal(a, b)


def _plant_in_keras_zip(good, bad) -> None:
    """``good`` with its first GRU's recurrent kernel moved by 0.05 at one entry, everything else (the
    ``config.json`` bytes included) unchanged: the same architecture to :func:`keras3.load`'s cache."""
    import zipfile

    import h5py

    work = bad.with_suffix(".weights.h5")
    with zipfile.ZipFile(good) as z:
        work.write_bytes(z.read("model.weights.h5"))
        members = {n: z.read(n) for n in z.namelist() if n != "model.weights.h5"}
    with h5py.File(work, "r+") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        kernel = f[sorted(n for n in names if n.startswith("layers/gru/") and n.endswith("vars/1"))[0]]
        a = kernel[...]
        a[0, 0] += 0.05
        kernel[...] = a
    with zipfile.ZipFile(bad, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
        z.write(work, "model.weights.h5")


def test_cached_keras_model_takes_each_files_weights(tmp_path):
    """The second ``.keras`` file of the same architecture reuses the model built for the first
    (:func:`gruconv.keras3.runtime.load`) and is judged by its own weights: a planted error after a good
    file fails, the good file after it passes again."""
    from gruconv import api
    from gruconv.keras3 import runtime as keras3
    from gruconv.verify import verify

    good = tmp_path / "good.keras"
    api.convert(KERAS / "sequential.h5", good)
    bad = tmp_path / "bad.keras"
    _plant_in_keras_zip(good, bad)
    keras3._MODELS.clear()
    with keras3.cpu():
        first = keras3.load(good)
    assert len(keras3._MODELS) == 1
    rep_good = verify(KERAS / "sequential.h5", good, reference="oracle")
    rep_bad = verify(KERAS / "sequential.h5", bad, reference="oracle")
    rep_again = verify(KERAS / "sequential.h5", good, reference="oracle")
    assert len(keras3._MODELS) == 1  # one architecture: one model, reused by all three
    with keras3.cpu():
        assert keras3.load(bad) is first
    assert rep_good.passed and rep_again.passed and not rep_bad.passed
    assert any(not c.passed and c.name.startswith("cu_dnngru:") for c in rep_bad.checks)
    assert [c.max_abs for c in rep_good.checks] == [c.max_abs for c in rep_again.checks]


def test_stateful_models_are_not_cached(tmp_path):
    from gruconv import api
    from gruconv.keras3 import runtime as keras3

    out = tmp_path / "stateful.keras"
    api.convert(KERAS / "stateful.h5", out)
    keras3._MODELS.clear()
    with keras3.cpu():
        a = keras3.load(out)
        b = keras3.load(out)
    assert a is not b and not keras3._MODELS


def _plant_lstm_gate_swap(good, bad) -> None:
    import h5py

    shutil.copyfile(good, bad)
    with h5py.File(bad, "r+") as f:
        for name in ("kernel:0", "recurrent_kernel:0"):
            ds = f[f"cu_dnnlstm/cu_dnnlstm/{name}"]
            a = ds[...]
            H = a.shape[1] // 4
            ds[...] = np.concatenate([a[:, H:2 * H], a[:, :H], a[:, 2 * H:]], axis=1)


def test_float16_weights_only_verifies_and_cached_layers_take_each_files_weights(tmp_path):
    """The DeepZip-style float16 weights-only file verifies layer by layer (issue 31: the layers are
    built without a float16 QR), and the layers built for it are reused for the next file of the same
    architecture with that file's weights: a planted gate swap fails, only in its layer."""
    from gruconv import api
    from gruconv.verify import graph, verify

    good = tmp_path / "dz.h5"
    api.convert(F16, good)
    bad = tmp_path / "dz_planted.h5"
    _plant_lstm_gate_swap(good, bad)
    graph._SHELLS.clear()
    first = verify(F16, reference="oracle")
    shells = dict(graph._SHELLS)
    planted = verify(F16, bad, reference="oracle")
    again = verify(F16, good, reference="oracle")
    assert first.passed and again.passed, [c for c in first.checks + again.checks if not c.passed]
    assert len(first.checks) == 7 and all(c.tolerance == pytest.approx(4e-3) for c in first.checks)
    assert not planted.passed
    assert {c.name.split(":")[0] for c in planted.checks if not c.passed} == {"cu_dnnlstm"}
    assert all(graph._SHELLS[k] is v for k, v in shells.items()) and len(shells) == 2  # GRU pair, LSTM


# two inputs (seq2seq) is the slow tier's (issue 47: 3.8 s); one input in float32 and in float16 stay quick
@pytest.mark.parametrize("fixture", ["keras/sequential.h5",
                                     pytest.param("keras_user/seq2seq.h5", marks=pytest.mark.slow),
                                     "keras/float16.h5"])
def test_compiled_pass_gives_the_eager_passs_report(tmp_path, fixture):
    """Verify's recorded forward pass run compiled (:func:`gruconv.keras3.runtime.compiled_calls`, from the
    second model of a config on TensorFlow) gives the report the eager pass gives, number
    for number, and each file's own weights are the ones run (a planted error still fails)."""
    from gruconv import api
    from gruconv.keras3 import runtime as keras3
    from gruconv.verify import verify

    src = FIXTURES / fixture
    good = tmp_path / "good.keras"
    api.convert(src, good)
    keras3._PROBES.clear()
    keras3._PROBES_SEEN.clear()
    plain = keras3.compiled_calls
    try:
        keras3.compiled_calls = lambda *a: None  # the eager pass only
        eager = verify(src, good, reference="oracle").to_json()
    finally:
        keras3.compiled_calls = plain
    runs = [verify(src, good, reference="oracle").to_json() for _ in range(2)]
    if keras3.keras().backend.backend() in keras3.COMPILED_BACKENDS:
        assert keras3._PROBES, "the compiled pass did not run"
    for rep in runs:
        for r in (rep, eager):
            r.pop("floor_seconds", None)
        assert rep == eager
    if fixture == "keras/sequential.h5":
        bad = tmp_path / "bad.keras"
        _plant_in_keras_zip(good, bad)
        assert not verify(src, bad, reference="oracle").passed


def test_convert_verify_takes_the_check_loads_model(tmp_path, monkeypatch):
    """``convert --verify`` loads its output once (the check-load's plain ``load_model``, handed to verify:
    :func:`gruconv.keras3.runtime.hand_over`); a file changed after the hand-over is loaded again."""
    from gruconv import api
    from gruconv.keras3 import runtime as keras3

    k = keras3.keras()
    calls = []
    plain = k.saving.load_model
    monkeypatch.setattr(k.saving, "load_model", lambda *a, **kw: calls.append(a) or plain(*a, **kw))
    keras3._MODELS.clear()
    res = api.convert(KERAS / "sequential.h5", tmp_path / "out.keras", verify=True)
    assert res.verification["passed"] and len(calls) == 1
    out = tmp_path / "other.keras"
    api.convert(KERAS / "sequential.h5", out)
    with keras3.cpu():
        model = k.saving.load_model(str(out))
        keras3.hand_over(out, model)
        bad = tmp_path / "bad.keras"
        _plant_in_keras_zip(out, bad)
        import os

        os.replace(bad, out)  # another file now: another inode
        assert keras3.load(out) is not model
        keras3.hand_over(out, model)
        with open(out, "r+b") as f:  # the same inode, other bytes, same size and mtime
            st = os.stat(out)
            data = bytearray(f.read())
            data[-1] ^= 1
            f.seek(0)
            f.write(data)
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert keras3.take_handed(out) is None


def test_check_load_of_a_config_loaded_before_loads_this_files_weights(tmp_path, monkeypatch):
    """A batch's check-load of a file whose ``config.json`` bytes were loaded before reuses that model
    (:func:`gruconv.keras3.runtime.load_like_before`) with THIS file's weights: they equal a fresh plain
    ``load_model``'s; the manifest of another file of the same config is refused (a planted difference on
    the reuse path); a model handed over for the first file is withdrawn once it holds another's weights."""
    from gruconv import api
    from gruconv.errors import UnsupportedError
    from gruconv.keras3 import archive
    from gruconv.keras3 import runtime as keras3

    k = keras3.keras()
    manifests = []
    real = archive.check_load
    monkeypatch.setattr(archive, "check_load",
                        lambda path, manifest, **kw: manifests.append(manifest) or real(path, manifest, **kw))
    keras3._MODELS.clear()
    a = tmp_path / "a.keras"
    api.convert(KERAS / "sequential.h5", a, check_load=True)
    kept = list(keras3._MODELS.values())
    assert len(kept) == 1
    b = tmp_path / "b.keras"
    _plant_in_keras_zip(a, b)  # same config bytes, one recurrent weight moved
    loads = []
    plain = k.saving.load_model
    monkeypatch.setattr(k.saving, "load_model", lambda *x, **kw: loads.append(x) or plain(*x, **kw))
    with pytest.raises(UnsupportedError, match="does not load back unchanged"):
        real(b, manifests[0])  # b's weights are not a's: the reused model must show b's
    assert loads == [] and keras3.take_handed(a) is None
    model = keras3.load_like_before(b)
    assert model is kept[0]
    monkeypatch.setattr(k.saving, "load_model", plain)
    fresh = plain(str(b))
    for got, want in zip(model.get_weights(), fresh.get_weights()):
        assert np.array_equal(got, want)
    assert not all(np.array_equal(x, y) for x, y in zip(model.get_weights(), plain(str(a)).get_weights()))
