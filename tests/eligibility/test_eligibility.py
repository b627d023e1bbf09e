"""cuDNN eligibility of recurrent layers, from config alone (issue 22): gruconv.eligibility.

Fixtures come from the real writers (``fixtures/make_keras3_fixtures.py``: Keras 3 ``model.save`` /
``save_weights`` on TensorFlow, tf_keras ``model.save`` for legacy HDF5).  The rules are checked against
what Keras does on a GPU in ``tests/eligibility/test_eligibility_gpu.py``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from gruconv import eligibility as el
from gruconv.errors import InputError, UsageError

K3 = FIXTURES / "keras3"
ROOT = FIXTURES.parent


def _by_path(report):
    return {e["path"]: e for e in report["layers"]}


def _verdicts(entry):
    return {be: entry["backends"][be]["verdict"] for be in el.BACKENDS}


def _failing(entry, be):
    return {f["field"]: f["value"] for f in entry["backends"][be]["failing"]}


# --------------------------------------------------------------------------- real fixtures


def test_mixed_model_each_layer_names_its_own_condition():
    rep = el.inspect_path(K3 / "mixed.keras")
    assert rep["format"] == ".keras" and rep["saved_by_keras"].startswith("3.")
    got = {p.split("/")[-1]: (_verdicts(e), {be: _failing(e, be) for be in el.BACKENDS})
           for p, e in _by_path(rep).items()}
    T, J, P = "tensorflow", "jax", "torch"
    assert got["gru_ok"] == ({T: "cudnn", J: "fused", P: "cudnn"}, {T: {}, J: {}, P: {}})
    assert got["gru_reset_before"] == ({T: "fallback", J: "fallback", P: "fallback"},
                                       {T: {"reset_after": False}, J: {"reset_after": False},
                                        P: {"reset_after": False}})
    assert got["gru_hard_sigmoid"] == ({T: "fallback", J: "fused", P: "fused"},
                                       {T: {"recurrent_activation": "hard_sigmoid"}, J: {},
                                        P: {"recurrent_activation": "hard_sigmoid"}})
    assert got["lstm_recurrent_dropout"] == ({T: "fallback", J: "fallback", P: "fallback"},
                                             {b: {"recurrent_dropout": 0.2} for b in (T, J, P)})
    assert got["lstm_relu"] == ({T: "fallback", J: "fallback", P: "fused"},
                                {b: {"activation": "relu"} for b in (T, J, P)})
    assert got["gru_no_bias"] == ({T: "fallback", J: "fused", P: "fused"},
                                  {T: {"use_bias": False}, J: {}, P: {"use_bias": False}})
    assert got["lstm_unroll"] == ({T: "fallback", J: "fallback", P: "fused"},
                                  {b: {"unroll": True} for b in (T, J, P)})
    assert rep["summary"]["torch"] == {"cudnn": 1, "fused": 4, "fallback": 2}


def test_every_failing_condition_cites_keras_release_and_source_file():
    rep = el.inspect_path(K3 / "mixed.keras")
    for e in rep["layers"]:
        for be in el.BACKENDS:
            for f in e["backends"][be]["failing"]:
                assert f["source"].startswith(f"Keras {el.KERAS_RELEASE} keras/src/"), f
    for r in el.RULES:
        path = r["source"].split()[0]
        installed = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
            "site-packages" / path
        assert installed.is_file(), (r["id"], path)


def test_masks_are_followed_through_functional_nested_and_wrappers():
    rep = _by_path(el.inspect_path(K3 / "masked_text.keras"))
    for p in ("masked_text/bi_gru[forward]", "masked_text/bi_gru[backward]", "masked_text/lstm_after_bi"):
        e = rep[p]
        assert e["mask"] == {"reaches": True, "from": ["embed"]}, p
        assert _verdicts(e) == {"tensorflow": "cudnn", "jax": "fallback", "torch": "fallback"}
        assert "right-padded" in e["backends"]["tensorflow"]["requires"]
        assert e["wrapper"] == ("Bidirectional" if "bi_gru" in p else None)
    nested = _by_path(el.inspect_path(K3 / "nested.keras"))
    assert nested["nested/inner/inner_lstm"]["mask"] == {"reaches": True, "from": ["pad_mask"]}
    wr = _by_path(el.inspect_path(K3 / "wrappers.keras"))
    assert wr["wrappers/td_gru/gru_2"]["wrapper"] == "TimeDistributed"
    assert _verdicts(wr["wrappers/rnn_cell"]) == {b: "fallback" for b in el.BACKENDS}
    assert wr["wrappers/rnn_cell"]["cell"] == "GRUCell"


def test_no_mask_without_a_mask_maker_and_mask_dropped_by_non_masking_layers():
    cfg = json.loads((K3 / "eligible.config.json").read_text())
    assert not any(e["mask"]["reaches"] for e in el.evaluate(cfg)["layers"])
    # a Masking layer before the GRU: the GRU and (through return_sequences) the LSTM see it
    layers = cfg["config"]["layers"]
    masking = {"module": "keras.layers", "class_name": "Masking", "config": {"name": "m", "mask_value": 0.0}}
    with_mask = copy.deepcopy(cfg)
    with_mask["config"]["layers"].insert(1, masking)
    got = [e["mask"]["reaches"] for e in el.evaluate(with_mask)["layers"]]
    assert got == [True, True]
    # GRU without return_sequences drops the mask; so does a Conv1D between Masking and the GRU
    no_seq = copy.deepcopy(with_mask)
    no_seq["config"]["layers"][2]["config"]["return_sequences"] = False
    assert [e["mask"]["reaches"] for e in el.evaluate(no_seq)["layers"]] == [True, False]
    conv = copy.deepcopy(with_mask)
    conv["config"]["layers"].insert(2, {"class_name": "Conv1D", "config": {"name": "c"}})
    assert [e["mask"]["reaches"] for e in el.evaluate(conv)["layers"]] == [False, False]
    assert len(layers) == 3


def test_legacy_plain_gru_says_what_it_takes_and_refuses_reset_after():
    rep = el.inspect_path(K3 / "legacy_gru_v1.h5")
    assert rep["legacy"] and rep["format"] == "legacy HDF5 model"
    by = _by_path(rep)
    gru = by["legacy_gru_v1/gru_v1"]
    assert _verdicts(gru) == {b: "fallback" for b in el.BACKENDS}
    fixes = {t["field"]: t for t in gru["to_become_eligible"]}
    assert set(fixes) == {"reset_after", "recurrent_activation"}
    assert fixes["reset_after"]["weights_allow"] is False
    assert "cannot become reset_after=True with the same function" in fixes["reset_after"]["note"]
    assert fixes["recurrent_activation"]["weights_allow"] is False
    lstm = by["legacy_gru_v1/lstm_slow"]
    fx = {t["field"]: t["weights_allow"] for t in lstm["to_become_eligible"]}
    assert fx == {"recurrent_dropout": True, "unroll": True}
    masked = _by_path(el.inspect_path(K3 / "legacy_masked.h5"))
    fw = masked["legacy_masked/bi[forward]"]
    assert fw["mask"] == {"reaches": True, "from": ["embed"]}
    assert _failing(fw, "torch") == {"mask": True, "use_bias": False}
    assert _failing(fw, "tensorflow") == {"use_bias": False}
    ok = _by_path(el.inspect_path(K3 / "legacy_eligible.h5"))["legacy_eligible/gru_v2"]
    assert _verdicts(ok) == {"tensorflow": "cudnn", "jax": "fused", "torch": "cudnn"}
    assert ok["to_become_eligible"] == []


def test_legacy_cudnngru_is_reported_as_converted():
    cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "CuDNNGRU", "config": {"name": "g", "units": 4}},
        {"class_name": "CuDNNLSTM", "config": {"name": "l", "units": 4}}]}}
    rep = el.evaluate(cfg, legacy=True)
    g, l_ = rep["layers"]
    assert "gruconv convert" in g["note"] and _verdicts(g)["torch"] == "cudnn"
    assert _verdicts(l_) == {b: "cudnn" for b in el.BACKENDS}


def test_weights_h5_needs_config_and_uses_it():
    with pytest.raises(UsageError, match="--config"):
        el.inspect_path(K3 / "eligible.weights.h5")
    rep = el.inspect_path(K3 / "eligible.weights.h5", config=K3 / "eligible.config.json")
    assert rep["format"] == "weights + config"
    assert [_verdicts(e)["jax"] for e in rep["layers"]] == ["fused", "cudnn"]
    # the config JSON on its own answers the same
    rep2 = el.inspect_path(K3 / "eligible.config.json")
    assert rep2["layers"] == rep["layers"]


# --------------------------------------------------------------------------- every rule flips


_FAIL_VALUE = {"eq": lambda t: "hard_sigmoid" if t[1] == "sigmoid" else "relu", "in": lambda t: False,
               "zero": lambda t: 0.2, "false": lambda t: True, "true": lambda t: False,
               "no_mask": lambda t: True}


def _base(cls):
    fields = {"activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True, "unroll": False,
              "recurrent_dropout": 0.0, "use_cudnn": "auto"}
    if cls == "GRU":
        fields["reset_after"] = True
    return fields


@pytest.mark.parametrize("rule", el.RULES, ids=lambda r: f"{r['backend']}-{'/'.join(r['layers'])}-{r['id']}")
def test_each_rule_changes_the_verdict_through_a_real_config(rule):
    """Change the one field a rule reads in a real Keras 3 config: the verdict must move to the rule's
    ``else`` and the failing list must name the field with its value."""
    base_cfg = json.loads((K3 / "eligible.config.json").read_text())
    for cls in rule["layers"]:
        cfg = copy.deepcopy(base_cfg)
        layers = cfg["config"]["layers"]
        idx = next(i for i, lay in enumerate(layers) if lay["class_name"] == cls)
        before = _by_path(el.evaluate(cfg))
        key = f"eligible/{layers[idx]['config']['name']}"
        best = before[key]["backends"][rule["backend"]]["verdict"]
        bad = _FAIL_VALUE[rule["test"][0]](rule["test"])
        if rule["field"] == "mask":
            layers.insert(idx, {"class_name": "Masking", "config": {"name": "pad", "mask_value": 0.0}})
        else:
            layers[idx]["config"][rule["field"]] = bad
        after = _by_path(el.evaluate(cfg))[key]["backends"][rule["backend"]]
        assert after["verdict"] == rule["else"] != best, (rule, best, after)
        assert {f["field"]: f["value"] for f in after["failing"]}[rule["field"]] == bad


def test_planted_wrong_rule_is_caught(monkeypatch):
    """The flip test is not vacuous: a rule table with torch's reset_after rule saying 'fused' gives a
    different (wrong) verdict for the real reset_after=False fixture."""
    rep = _by_path(el.inspect_path(K3 / "mixed.keras"))
    assert rep["mixed/gru_reset_before"]["backends"]["torch"]["verdict"] == "fallback"
    bad = [dict(r, **({"else": "fused"} if (r["backend"], r["id"]) == ("torch", "reset_after") else {}))
           for r in el.RULES]
    monkeypatch.setattr(el, "RULES", bad)
    rep = _by_path(el.inspect_path(K3 / "mixed.keras"))
    assert rep["mixed/gru_reset_before"]["backends"]["torch"]["verdict"] == "fused"


def test_use_cudnn_true_on_an_ineligible_layer_raises_in_keras():
    v = el.verdict_for("GRU", dict(_base("GRU"), use_cudnn=True, reset_after=False), "torch", False)
    assert v["verdict"] == "fallback" and "ValueError" in v["raises"]
    v = el.verdict_for("GRU", dict(_base("GRU"), use_cudnn=True), "torch", False)
    assert "raises" not in v


# --------------------------------------------------------------------------- text and JSON


def test_text_lines_golden_and_json_round_trip():
    rep = el.inspect_path(K3 / "eligible.keras")
    lines = el.text_lines(rep)
    assert lines[1:] == [
        "  eligible/gru  GRU(8)",
        "    tensorflow cudnn",
        "    jax        fused (no cuDNN GRU on JAX)",
        "    torch      cudnn",
        "  eligible/lstm  LSTM(6)",
        "    tensorflow cudnn",
        "    jax        cudnn",
        "    torch      cudnn",
        "  summary: tensorflow 2 cudnn; jax 1 cudnn, 1 fused; torch 2 cudnn",
    ]
    assert json.loads(json.dumps(rep)) == rep


def test_docs_example_is_real_output():
    doc = (ROOT / "docs" / "eligibility.md").read_text()
    rep = el.inspect_path(K3 / "mixed.keras")
    rep["source"] = "mixed.keras"
    for line in el.text_lines(rep):
        assert line in doc, line


def test_inspect_imports_no_framework():
    code = ("import sys; from gruconv import eligibility as e; "
            f"e.inspect_path({str(K3 / 'masked_text.keras')!r}); e.inspect_path({str(K3 / 'legacy_gru_v1.h5')!r}); "
            "bad = [m for m in ('keras', 'tensorflow', 'tf_keras', 'torch', 'jax') if m in sys.modules]; "
            "assert not bad, bad")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


# --------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("case", ["truncated", "directory", "missing", "garbage", "no_class"])
def test_bad_inputs_give_input_error(tmp_path, case):
    if case == "truncated":
        p = tmp_path / "t.keras"
        p.write_bytes((K3 / "eligible.keras").read_bytes()[:200])
    elif case == "directory":
        p = tmp_path
    elif case == "missing":
        p = tmp_path / "nope.keras"
    elif case == "garbage":
        p = tmp_path / "g.bin"
        p.write_bytes(b"\x00\x01garbage" * 10)
    else:
        p = tmp_path / "c.json"
        p.write_text('{"config": {"layers": []}}')
    with pytest.raises(InputError):
        el.inspect_path(p)


def test_legacy_h5_without_model_config_asks_for_config(tmp_path):
    import h5py

    p = tmp_path / "w.h5"
    with h5py.File(p, "w") as f:
        f.attrs["layer_names"] = [b"gru"]
    with pytest.raises(UsageError, match="--config"):
        el.inspect_path(p)


def test_a_list_config_with_inbound_nodes_is_read_not_a_crash():
    """``make fuzz`` (5000 cases, 2026-11-27) found it: a model whose ``config`` is a list (Keras 2.0-2.2's
    Sequential form) holding layers with ``inbound_nodes`` took the Functional walk, which read
    ``output_layers`` from the list (AttributeError)."""
    base = json.loads((K3 / "masked_text.config.json").read_text())
    layers = base["config"]["layers"]
    assert any(lay.get("inbound_nodes") for lay in layers)
    rep = el.evaluate({"class_name": "Functional", "config": layers})
    assert el.text_lines(rep)  # a report, like the dict form's
    def verdicts(r):  # the paths start with the model's name, which the list form has not got
        return [{k: v for k, v in lay.items() if k != "path"} for lay in r["layers"]]

    assert rep["layers"] and verdicts(rep) == verdicts(el.evaluate(base))  # the same as the dict form


def test_mangled_configs_never_crash():
    """Any JSON shape in place of any part of a real config gives a report or an InputError, not a bug."""
    import random

    from gruconv.errors import GruconvError

    rng = random.Random(22)
    base = json.loads((K3 / "masked_text.config.json").read_text())
    junk = [None, 3, -1.5, "x", [], {}, [1, "a", None], {"class_name": 7}, True, ["a", 0, 0]]

    def nodes(obj, acc, path=()):
        acc.append(path)
        if isinstance(obj, dict):
            for k, v in obj.items():
                nodes(v, acc, path + (k,))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                nodes(v, acc, path + (i,))
        return acc

    paths = nodes(base, [])
    for _ in range(400):
        cfg = copy.deepcopy(base)
        p = rng.choice(paths[1:])
        tgt = cfg
        for k in p[:-1]:
            tgt = tgt[k]
        tgt[p[-1]] = rng.choice(junk)
        try:
            rep = el.evaluate(cfg)
            el.text_lines(rep)
            json.dumps(rep)
        except GruconvError:
            pass
