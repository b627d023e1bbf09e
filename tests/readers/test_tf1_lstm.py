"""TF 1.x cudnn_rnn CudnnLSTM checkpoints (``fixtures/tf1_lstm``, real cuDNN 9.19 weights).

Every fixture is read, checked against the golden cuDNN weights it was made
from, converted to ``.keras``, loaded with plain ``keras.saving.load_model``
and run on the CPU against cuDNN's own strict-fp32 ``y``/``hy``/``cy``.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from gruconv import report
from gruconv.errors import UnsupportedError, UsageError
from gruconv.readers import tf1 as t1
from gruconv.readers.tf1 import cells, names
from gruconv.writers import rest_npz
from gruconv.options import Options

TF1 = FIXTURES / "tf1_lstm"
GOLDEN = FIXTURES / "cudnn-golden-lstm"
MANIFEST = json.loads((TF1 / "manifest.json").read_text())["cases"]
CASES = sorted(MANIFEST)
TOL = 1e-5
TOL_F16 = 3e-3
#: Hints a user must give where the checkpoint stores no shape (or no cell).
HINTS = {
    "tf14_opaque_only": {"variable": "decoder/lstm_params", "cell": "lstm", "num_units": 7, "input_size": 5},
    "opaque_only_skip_uni": {"input_mode": "skip"},
    "opaque_only_skip_bidir": {"input_mode": "skip", "num_units": 8},
}


def _golden(name) -> dict:
    with np.load(GOLDEN / name) as z:
        return {k: z[k] for k in z.files}


def _read(case, **kw):
    kw.setdefault("hints", HINTS.get(case))
    return t1.read(TF1 / case, Options.of(**kw))


def _convert(case, out, **kw):
    kw.setdefault("hints", HINTS.get(case))
    from gruconv import api

    return api.convert(TF1 / case, Path(out), Options.of(**kw))


def _keras():
    from gruconv.keras3.runtime import keras

    return keras()


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize("case", CASES)
def test_stacks_found(case):
    m = MANIFEST[case]
    doc = _read(case)
    assert [e.scope for e in doc.stacks] == [s["scope"] for s in m["stacks"]]  # natural (creation) order
    for e, ms in zip(doc.stacks, m["stacks"]):
        assert e.shape.to_dict() == ms["shape"]
        assert e.cell == "lstm" and e.shape.cell == "lstm"
        assert e.opaque_key == (ms["opaque"]["name"] if ms["opaque"] else None)
        assert sorted(e.canonical_keys) == sorted(ms["canonical_tensors"])
        assert e.slots == sorted(ms["optimizer_slots"])
        assert e.cross_check.status == ms["cross_check"]
        if ms["canonical"]:
            assert e.style == ms["style"]
    assert sorted(doc.other_keys) == sorted(m["unrelated_variables"])
    assert not doc.warnings


@pytest.mark.parametrize("case", CASES)
def test_weights_equal_golden(case):
    """Canonical tensors give cuDNN's weights bit for bit; a summed bias sits on the input side."""
    doc = _read(case)
    for e, ms in zip(doc.stacks, MANIFEST[case]["stacks"]):
        g = _golden(ms["golden"])
        dtype = np.dtype(e.shape.dtype)
        D = e.shape.num_directions
        summed = ms["canonical"] and ms["canonical_style"] != "1.3"
        for i, layer in enumerate(ms["golden_layers"]):
            for d in range(D):
                p, q = e.stack.params[i * D + d], layer * D + d
                for k in range(4):
                    if f"W{q}_{k}" in g:
                        np.testing.assert_array_equal(p.input_weights[k], g[f"W{q}_{k}"].astype(dtype))
                    np.testing.assert_array_equal(p.recurrent_weights[k], g[f"W{q}_{k + 4}"].astype(dtype))
                    bw, br = g[f"b{q}_{k}"].astype(dtype), g[f"b{q}_{k + 4}"].astype(dtype)
                    if summed:
                        np.testing.assert_array_equal(p.input_bias[k], bw + br)
                        assert not p.recurrent_bias[k].any()
                    else:
                        np.testing.assert_array_equal(p.input_bias[k], bw)
                        np.testing.assert_array_equal(p.recurrent_bias[k], br)
                if "W0_0" not in g:
                    assert p.input_weights is None or i > 0


# --------------------------------------------------------------------------- conversion and parity


def _run(path, x_tm, h0, c0, mask=None):
    """Load with plain Keras, feed (x, h/c per pseudo-layer [, mask]); return time-major y, hy, cy."""
    model = _keras().saving.load_model(str(path))
    inputs = [np.transpose(x_tm, (1, 0, 2))]
    for p in range(h0.shape[0]):
        inputs += [h0[p], c0[p]]
    if mask is not None:
        inputs.append(mask)
    out = model(inputs)
    y = np.transpose(np.asarray(out[0]), (1, 0, 2))
    states = [np.asarray(o) for o in out[1:]]
    return y, np.stack(states[0::2]), np.stack(states[1::2])


def _err(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


@pytest.mark.parametrize("case", [c for c in CASES if c not in ("float16", "layer_varlen", "canonical_only_stacked",
                                                                "disagree")])
def test_convert_matches_cudnn(case, tmp_path):
    (ms,) = MANIFEST[case]["stacks"]
    out = tmp_path / "m.keras"
    res = _convert(case, out, initial_state=True, return_state=True)
    (entry,) = res.rnns
    assert entry["kind"] == "cuDNN LSTM" and entry["cell"] == "lstm"
    sh = ms["shape"]
    layer = f"Bidirectional(LSTM({sh['units']}), merge_mode='concat')" if sh["bidirectional"] \
        else f"LSTM({sh['units']})"
    assert entry["converts_to"].startswith(f"{sh['num_layers']} x {layer}")
    model = _keras().saving.load_model(str(out))
    lstms = [w for w in model.weights if "bias" in w.path]
    assert len(lstms) == sh["num_layers"] * (2 if sh["bidirectional"] else 1)
    assert [t.name.split(":")[0] for t in model.inputs][1:3] == ["initial_state_l0_fw_h", "initial_state_l0_fw_c"]
    g = _golden(ms["golden"])
    y, hy, cy = _run(out, g["x"], g["h0"], g["c0"])
    errs = (_err(y, g["y"]), _err(hy, g["hy"]), _err(cy, g["cy"]))
    print(f"{case}: y {errs[0]:.2e} hy {errs[1]:.2e} cy {errs[2]:.2e} (vs cuDNN strict fp32)")
    assert max(errs) <= TOL


def test_canonical_only_stacked_modules_chain(tmp_path):
    """Two one-layer modules ('cudnn_lstm', 'cudnn_lstm_1', cell_0 only, no buffer): two models that,
    chained, are cuDNN's 2-layer stack."""
    out = tmp_path / "out"
    res = _convert("canonical_only_stacked", out, initial_state=True, return_state=True)
    assert sorted(p.name for p in out.iterdir()) == ["cudnn_lstm.keras", "cudnn_lstm_1.keras", "rest.npz"]
    assert [r["name"] for r in res.rnns] == ["cudnn_lstm", "cudnn_lstm_1"]
    assert all(r["cross_check"] == "not checked (no opaque buffer found)" for r in res.rnns)
    assert any("--forget-bias 1" in d for d in res.rnns[0]["details"])
    g = _golden("lstm_2l_uni.npz")
    y0, h0, c0 = _run(out / "cudnn_lstm.keras", g["x"], g["h0"][:1], g["c0"][:1])
    y1, h1, c1 = _run(out / "cudnn_lstm_1.keras", y0, g["h0"][1:], g["c0"][1:])
    assert max(_err(y1, g["y"]), _err(np.concatenate([h0, h1]), g["hy"]),
               _err(np.concatenate([c0, c1]), g["cy"])) <= TOL


def test_varlen_mask_input_with_initial_state(tmp_path):
    (ms,) = MANIFEST["layer_varlen"]["stacks"]
    g = _golden(ms["golden"])
    out = tmp_path / "v.keras"
    _convert("layer_varlen", out, initial_state=True, return_state=True, mask_input=True)
    mask = np.arange(g["x"].shape[0])[None, :] < g["seq_lengths"][:, None]
    y, hy, cy = _run(out, g["x"], g["h0"], g["c0"], mask=mask)
    valid = mask.T[:, :, None]
    assert _err(np.where(valid, y, 0), np.where(valid, g["y"], 0)) <= TOL
    assert _err(hy, g["hy"]) <= TOL and _err(cy, g["cy"]) <= TOL


def test_float16(tmp_path):
    (ms,) = MANIFEST["float16"]["stacks"]
    g = _golden(ms["golden"])
    out = tmp_path / "f16.keras"
    _convert("float16", out, initial_state=True, return_state=True)
    model = _keras().saving.load_model(str(out))
    assert all(w.dtype == "float16" for w in model.weights)
    y, hy, cy = _run(out, g["x"].astype(np.float16), g["h0"].astype(np.float16), g["c0"].astype(np.float16))
    assert max(_err(y, g["y"]), _err(hy, g["hy"]), _err(cy, g["cy"])) <= TOL_F16


def test_return_state_only_and_plain(tmp_path):
    """Without --initial-state the model takes x alone; --return-state adds h, c per pseudo-layer."""
    out = tmp_path / "b.keras"
    _convert("layer_bidir", out, return_state=True)
    model = _keras().saving.load_model(str(out))
    assert len(model.inputs) == 1 and len(model.outputs) == 1 + 2 * 4
    g = _golden("lstm_2l_bidir.npz")
    from gruconv.verify.reference.oracle import run_stack

    (e,) = _read("layer_bidir").stacks
    res = model(np.transpose(g["x"], (1, 0, 2)))
    oy, ohy, ocy = run_stack(e.stack, g["x"])  # zero initial states
    assert _err(np.transpose(np.asarray(res[0]), (1, 0, 2)), oy) <= TOL
    assert _err(np.stack([np.asarray(o) for o in res[1::2]]), ohy) <= TOL
    assert _err(np.stack([np.asarray(o) for o in res[2::2]]), ocy) <= TOL


def test_verify_reports_h_and_c():
    from gruconv.verify import verify

    rep = verify(TF1 / "layer_bidir", reference="oracle", initial_state=True, return_state=True)
    names = [c.name for c in rep.checks]
    assert "encoder/cudnn_lstm: final state l0 fw h" in names and "encoder/cudnn_lstm: final state l1 bw c" in names
    assert len(names) == 1 + 2 * 4 and rep.passed, [(c.name, c.max_abs) for c in rep.checks]


# --------------------------------------------------------------------------- cross-check, planted errors


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, quiet while it starts; the environment is restored after the module (no test
    leaves process-wide state behind for the tests after it)."""
    with pytest.MonkeyPatch.context() as mp:
        if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
            mp.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
        yield pytest.importorskip("tensorflow")


def _save(tf, prefix: Path, tensors: dict) -> Path:
    keys = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=keys, shape_and_slices=[""] * len(keys),
                      tensors=[tf.constant(tensors[n]) for n in keys])
    return prefix


def _tensors(case: str) -> dict:
    from gruconv.readers import tfbundle

    b = tfbundle.open_bundle(TF1 / case)
    return {k: np.array(b.read(k)) for k in b.keys()}


CELL0 = "rnn/cudnn_lstm/rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/"


def test_disagree(tmp_path):
    (e,) = _read("disagree").stacks
    assert e.cross_check.status == "disagree" and e.cross_check.where.startswith("rnn/cudnn_lstm/rnn/")
    res = _convert("disagree", tmp_path / "c.keras", initial_state=True, return_state=True)
    assert any("disagrees" in w for w in res.warnings)
    g = _golden("lstm_2l_uni.npz")
    y, hy, cy = _run(tmp_path / "c.keras", g["x"], g["h0"], g["c0"])
    assert _err(y, g["y"]) <= TOL                    # the canonical tensors are right
    _convert("disagree", tmp_path / "o.keras", prefer="opaque", initial_state=True, return_state=True)
    y, hy, cy = _run(tmp_path / "o.keras", g["x"], g["h0"], g["c0"])
    assert _err(y, g["y"]) > 0.01


def test_planted_gate_order_swap_is_caught(tf, tmp_path):
    """A kernel written in cuDNN's i, f, c, o order instead of TF's i, c, f, o: the cross-check
    points at the kernel; the converted model is off."""
    t = _tensors("layer_uni")
    k = t[CELL0 + "kernel"].copy()
    H = k.shape[1] // 4
    k[:, H:2 * H], k[:, 2 * H:3 * H] = t[CELL0 + "kernel"][:, 2 * H:3 * H], t[CELL0 + "kernel"][:, H:2 * H]
    t[CELL0 + "kernel"] = k
    (e,) = t1.read(_save(tf, tmp_path / "swap.ckpt", t)).stacks
    assert e.cross_check.status == "disagree" and e.cross_check.where.startswith(CELL0 + "kernel[")
    b = t[CELL0 + "bias"].copy()
    b[H:2 * H], b[2 * H:3 * H] = t[CELL0 + "bias"][2 * H:3 * H], t[CELL0 + "bias"][H:2 * H]
    t[CELL0 + "bias"] = b
    (e,) = t1.read(_save(tf, tmp_path / "swap2.ckpt", t)).stacks
    assert e.cross_check.status == "disagree"


def test_planted_unsummed_bias_is_caught(tf, tmp_path):
    """A bias holding only the input-side half (not b_W + b_R): the cross-check points at it."""
    t = _tensors("layer_uni")
    g = _golden("lstm_2l_uni.npz")
    t[CELL0 + "bias"] = np.concatenate([g[f"b1_{k}"] for k in cells.TF_LSTM_GATE_ORDER]).astype(np.float32)
    (e,) = t1.read(_save(tf, tmp_path / "b.ckpt", t)).stacks
    assert e.cross_check.status == "disagree" and e.cross_check.where.startswith(CELL0 + "bias[")
    assert e.cross_check.max_abs_diff > 0.01


def test_tf13_halves_that_do_not_sum_warn(tf, tmp_path):
    t = _tensors("tf13")
    key = "encoder/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias_cudnn_1"
    t[key] = t[key] + np.float32(0.5)
    doc = t1.read(_save(tf, tmp_path / "h.ckpt", t))
    assert any("'bias_cudnn_0' + 'bias_cudnn_1' differs from bias by up to 0.5" in w for w in doc.warnings)


def test_table_round_trip():
    """cells.from_params is the inverse of cells.to_params, for both cells and TF 1.3 halves."""
    from gruconv.model.canonical import GateParams

    rng = np.random.default_rng(1)
    for spec, G in ((cells.GRU, 3), (cells.LSTM, 4)):
        n_in, H = 5, 3
        p = GateParams(rng.standard_normal((G, H, n_in)), rng.standard_normal((G, H, H)),
                       rng.standard_normal((G, H)), rng.standard_normal((G, H)))
        t = cells.from_params(spec, p, n_in, H, tf13=True)
        assert {k: v.shape for k, v in t.items()} == spec.expected_shapes(n_in, H)
        q, diff = cells.to_params(spec, t, n_in, H)
        assert diff is None
        for a in ("input_weights", "recurrent_weights", "input_bias", "recurrent_bias"):
            np.testing.assert_array_equal(getattr(q, a), getattr(p, a))


# --------------------------------------------------------------------------- hints, refusals


def test_opaque_only_cell_unknown_lists_both_cells(tf, tmp_path):
    """A user-named buffer stores no cell: without --cell every cell's shapes are listed."""
    t = _tensors("layer_uni_1l_h1")
    prefix = _save(tf, tmp_path / "u.ckpt", {"params": t["cudnn_lstm/opaque_kernel"]})  # 24 values
    info = t1.inspect(t1.read(prefix, Options(hints={"variable": "params"})))
    (r,) = info["rnns"]
    assert r["cell"] is None and {c["cell"] for c in r["candidates"]} == {"gru", "lstm"}
    text = report.inspect_text(info)
    assert "GRU, input 5, units 1" in text and "LSTM, input 3, units 1" in text
    with pytest.raises(UsageError, match="Pass --cell"):
        from gruconv.writers.planning import plan

        plan(t1.read(prefix, Options(hints={"variable": "params"})).document(), tmp_path / "x.keras", Options())
    doc = t1.read(prefix, Options(hints={"variable": "params", "cell": "lstm", "num_layers": 1,
                                         "direction": "uni"}))
    assert doc.stacks[0].shape.to_dict() == MANIFEST["layer_uni_1l_h1"]["stacks"][0]["shape"]


def test_hint_cell_contradicts_canonical():
    with pytest.raises(UsageError, match=r"cell=gru \(stored: lstm\)"):
        _read("layer_uni", hints={"cell": "gru"})
    with pytest.raises(UsageError, match="hint cell must be one of gru, lstm"):
        _read("layer_uni", hints={"cell": "rnn"})


def test_projection_refused(tf, tmp_path):
    t = _tensors("layer_uni")
    t[CELL0 + "projection/kernel"] = np.zeros((6, 3), np.float32)
    with pytest.raises(UnsupportedError, match="projection.*Keras 3 LSTM has no projection"):
        t1.read(_save(tf, tmp_path / "p.ckpt", t))


def test_forget_bias_hint(tmp_path):
    plain = _read("canonical_only_stacked").stacks
    fb = _read("canonical_only_stacked", hints={"forget_bias": 1.0})
    for a, b in zip(plain, fb.stacks):
        np.testing.assert_array_equal(b.stack.params[0].input_bias[1],
                                      (a.stack.params[0].input_bias[1].astype(np.float64) + 1).astype(np.float32))
        np.testing.assert_array_equal(b.stack.params[0].input_bias[0], a.stack.params[0].input_bias[0])
        assert "forget_bias 1" in b.source
    assert sum("forget_bias 1 added" in w for w in fb.warnings) == 2
    with pytest.raises(UsageError, match="forget_bias applies to LSTM stacks only"):
        t1.read(FIXTURES / "tf1" / "layer_uni_1l", Options(hints={"forget_bias": 1.0}))
    assert _read("canonical_only_stacked", hints={"forget_bias": 0}).warnings == []


def test_mis_sized_lstm_buffer_left_alone(tf, tmp_path):
    t = _tensors("layer_uni_1l_h1")
    t["lm/cudnn_lstm/opaque_kernel"] = np.ones(1234, np.float32)
    doc = t1.read(_save(tf, tmp_path / "m.ckpt", t))
    assert [e.scope for e in doc.stacks] == ["cudnn_lstm"]
    assert "lm/cudnn_lstm/opaque_kernel" in doc.other_keys


def test_natural_scope_order():
    scopes = ["cudnn_lstm_10", "cudnn_lstm_9", "cudnn_lstm", "cudnn_lstm_1"]
    assert sorted(scopes, key=names.natural_key) == ["cudnn_lstm", "cudnn_lstm_1", "cudnn_lstm_9", "cudnn_lstm_10"]


# --------------------------------------------------------------------------- rest.npz member names


CRAFTED = ["../../x", "/etc/x", "a\x1bb", "line\nbreak", "dense/kernel", "dense__kernel", "Dense/Kernel",
           "back\\slash", ".hidden", "ünïcode", "", "__manifest__", "x" * 400]


def test_npz_member_names_are_safe_and_unique():
    got = rest_npz.npz_member_names(CRAFTED)
    assert len({n.lower() for n in got}) == len(got)
    for n in got:
        assert n and n.isascii() and n.isprintable() and "/" not in n and "\\" not in n and ".." not in n
        assert not n.startswith(".") and len(n) <= 180 and n.lower() != "__manifest__"
    assert got[4] == "dense__kernel" and got[5] == "dense__kernel_2"


def test_rest_npz_with_crafted_names(tf, tmp_path):
    t = _tensors("layer_uni_1l_h1")
    extra = {name: np.full(2, i, np.float32) for i, name in enumerate(CRAFTED) if name}
    prefix = _save(tf, tmp_path / "c.ckpt", {**t, **extra})
    from gruconv import api

    api.convert(prefix, tmp_path / "m.keras", Options())
    rest = tmp_path / "m.keras.rest.npz"
    with zipfile.ZipFile(rest) as z:
        members = z.namelist()
        manifest = json.loads(z.read(rest_npz.REST_MANIFEST))["tensors"]
    assert rest_npz.REST_MANIFEST in members
    for m in members:
        assert "/" not in m and "\\" not in m and ".." not in m and m.isascii() and m.isprintable()
    with np.load(rest) as z:
        arrays = {manifest[k]: z[k] for k in z.files if k != rest_npz.REST_MANIFEST}
    assert sorted(arrays) == sorted(list(extra) + ["global_step"])
    for name, v in extra.items():
        np.testing.assert_array_equal(arrays[name], v)
