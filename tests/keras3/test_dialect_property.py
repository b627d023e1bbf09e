"""The legacy-dialect property (issue 40 item 2): **tf_keras accepts it => gruconv converts it (exit 0) and
its output computes what the original computes**, over legacy files written the way each Keras 2 / tf.keras
version wrote them.

Generator, oracle and check: ``tests/dialect_cases.py`` (random tf_keras CuDNN models saved by tf_keras's
legacy HDF5 writer, rewritten into older dialects -- each mutation cites the version that wrote it; the
precondition and the oracle are tf_keras 2.21 itself, in a child process: the file opens, and its config
with every CuDNN layer swapped for its CPU twin computes the reference).  Per case: ``gruconv convert``
exits 0, plain ``keras.saving.load_model`` opens the output, ``predict`` matches the oracle within 1e-5
(absolute, or relative to the output's magnitude), ``gruconv verify`` exits 0.  The corpus adds the files
real older writers wrote (``fixtures/legacy_writers``: tensorflow 2.12.1 and 2.15.1).

Profiles (as ``test_contract_generative.py``):

* default tier: each KNOWN_OPEN mutation alone on ``GRUCONV_DIALECT_QUICK_CASES`` (default 1) derandomized
  case(s), the mutations that pass together in two cases (:data:`QUICK_GROUPS`), three unmutated cases, the
  tf 2.15 corpus files; one tf_keras child for all of them.
* ``slow`` (also ``make fuzz``): ``GRUCONV_DIALECT_CASES`` (default 20) cases drawn from the version
  profiles (1-4 mutations together), derandomized unless ``GRUCONV_DIALECT_RANDOM=1``, plus every corpus
  file (with ``GRUCONV_DIALECT_CORPUS_KINDS=1`` also under each mutation); fails on a counterexample of a
  class not in :data:`KNOWN_OPEN`.
  ``scripts/dialect_sweep.py`` runs the same for longer, with a JSON summary.

A counterexample whose class is in :data:`KNOWN_OPEN` is ``xfail(strict=True)`` with the reason: when the
fix lands the test XPASSes, which fails the run, and the entry is removed here.  Any other failure (an
unknown class, a base model failing, a harness fault) fails as usual.
"""

from __future__ import annotations

import os

import pytest

import dialect_cases as dc

# xdist_group (docs/testing.md): the module fixture `quick` runs one tf_keras child for every quick case and
# converts them all; one worker runs it once.
pytestmark = pytest.mark.xdist_group("test_dialect_property")

QUICK_CASES = int(os.environ.get("GRUCONV_DIALECT_QUICK_CASES", "1"))
LONG_CASES = int(os.environ.get("GRUCONV_DIALECT_CASES", "20"))
#: ``1``: the slow test also runs every corpus file under every mutation (13 x 8 more cases; ``make fuzz``).
CORPUS_KINDS = os.environ.get("GRUCONV_DIALECT_CORPUS_KINDS") == "1"
RANDOM_LONG = os.environ.get("GRUCONV_DIALECT_RANDOM") == "1"

#: Counterexample classes open today, by mutation kind: {kind: reason}.  Empty since issue 40's fixes: the seven
#: classes the harness found on main at its start (78d03da) -- init_dtype, later_batch_input_shape,
#: nameless_custom, hard_sigmoid_rnn, hard_sigmoid_dense, bare_layer_list (a nested bare-list Sequential) and
#: the base class nested_functional_then_layer (a one-output Functional nested in a Sequential) -- each XPASSed
#: its strict xfail once the fix landed, and were removed here (docs/testing.md, the dialect property).
KNOWN_OPEN: dict = {}

#: Refusals (exit 3) accepted as right: {start of gruconv's error line: reason}.  Empty: every refusal of a file
#: tf_keras opens is a counterexample until an entry here argues otherwise.
ACCEPTED_REFUSALS: dict = {}
dc.ACCEPTED_REFUSALS.update(ACCEPTED_REFUSALS)

#: Mutations whose every file tf_keras 2.21 refuses: the property's precondition never holds, so they are not
#: cases; the test below keeps that fact checked (if tf_keras ever opens them they become cases).
DISCARDED_BY_TF_KERAS = {
    "no_reset_after": "tf_keras 2.21's GRU defaults to reset_after=True, and its legacy loader refuses the "
                      "stored (3H,) bias: 'GRU(reset_after=False) is not compatible with GRU(reset_after=True)'",
}


class KnownOpen(AssertionError):
    """A counterexample of a class in KNOWN_OPEN (the only failure the xfail marks accept)."""


QUICK_KINDS = [k for k in dc.MUTATIONS if k not in DISCARDED_BY_TF_KERAS]
SEED0 = 5000
#: The default tier's seed per mutation (derandomized): SEED0 + 10 * its position, except where that seed's
#: model does not bring the class out (the mutation picks layers at random: a later batch_input_shape that
#: lands on no CuDNN layer converts) or brings out another class too -- each known-open case must show its own
#: class and nothing else, or its strict xfail would hide the other.
QUICK_SEEDS = {"later_batch_input_shape": 5011, "bare_layer_list": 5016}


#: The mutations that pass today share two default-tier cases (time: each case is a tf_keras build, open and
#: run); a failure there is classified per mutation (a second tf_keras run) and fails the test.
QUICK_GROUPS = {5201: ["bytes_config", "lr_training_config", "no_time_major", "old_version_attrs"],
                5203: ["no_input_layer", "no_module_keys", "policy_dict"],
                # the seven classes that were open until issue 40 closed (seed 5301 applies all six; the
                # seventh, no_reset_after, is a DISCARDED_BY_TF_KERAS case below)
                5301: ["init_dtype", "later_batch_input_shape", "nameless_custom", "hard_sigmoid_rnn",
                       "hard_sigmoid_dense", "bare_layer_list"]}


#: The quick cases ``gruconv verify`` also runs on (with the corpus files): a whole model, a weights file, and the
#: six formerly-open mutations together.  Every quick case is converted, loaded by plain ``load_model`` and run
#: against tf_keras; verify of the rest is the slow profile's (issue 47: ~2 s a case, one worker), and verify of
#: dialect files stays quick in ``tests/keras3/test_dialects.py``.
QUICK_VERIFY = {"s7000-base", "s7001-base", "s5301-init_dtype+later_batch_input_shape+nameless_custom+hard_sigmoid_rnn"
                "+hard_sigmoid_dense+bare_layer_list"}


def _quick_cases() -> list:
    # two unmutated models without a BASE_FEATURE, and one with (7020: a nested Functional in a Sequential)
    cases = [dc.plan_case(7000, kinds=[], save="model"), dc.plan_case(7001, kinds=[], save="weights"),
             dc.plan_case(7020, kinds=[])]
    grouped = {k for g in QUICK_GROUPS.values() for k in g}
    cases += [dc.plan_case(seed, kinds=kinds) for seed, kinds in QUICK_GROUPS.items()]
    for n, kind in enumerate(QUICK_KINDS):
        if kind in grouped and kind not in KNOWN_OPEN:
            continue
        seed = QUICK_SEEDS.get(kind) or SEED0 + 10 * n
        for i in range(QUICK_CASES):
            cases.append(dict(dc.plan_case(seed + i, kinds=[kind]), with_base=kind in KNOWN_OPEN))
    for kind in DISCARDED_BY_TF_KERAS:
        cases.append(dc.plan_case(SEED0 - 1, kinds=[kind]))
    cases += [c for c in dc.corpus_cases() if c["corpus"] in QUICK_CORPUS]
    assert QUICK_VERIFY <= {c["id"] for c in cases}, QUICK_VERIFY - {c["id"] for c in cases}  # a renamed case
    return [dict(c, verify=c["id"] in QUICK_VERIFY or bool(c.get("corpus"))) for c in cases]


#: The files of real older writers the quick tier runs: one whole model, one weights file (issue 47: each is a
#: tf_keras build and open, a conversion and a verify); the slow test runs every corpus file.
QUICK_CORPUS = {"tf215_seq_hard_sigmoid_gru.h5", "tf215_weights_nested.h5"}


QUICK = _quick_cases()


def _message(rec: dict) -> str:
    r = rec.get("result") or {}
    return (f"counterexample {rec.get('class')}: seed {rec['seed']}, mutations {rec['kinds'] or 'none'}, "
            f"model: {rec['spec']}\n  {r.get('detail') or rec.get('detail')}\n  changes: {rec.get('changes')}\n"
            f"  reproduce: {dc.reproducer(rec)}")


def _check(rec: dict, own: set = None) -> None:
    """Pass; raise KnownOpen (a counterexample whose class names only KNOWN_OPEN kinds and, given ``own``,
    exactly those: the test's own class); or fail."""
    if rec["status"] == "passed":
        return
    if rec["status"] != "counterexample":
        pytest.fail(f"case {rec['id']} is {rec['status']}, not a case of the property: {rec.get('detail')}")
    kinds = dc.kinds_of_class(rec["class"])
    if kinds <= set(KNOWN_OPEN) and (own is None or kinds == own):
        raise KnownOpen(_message(rec))
    pytest.fail(_message(rec))


def _open_mark(kinds) -> list:
    open_ = [k for k in kinds if k in KNOWN_OPEN]
    if not open_:
        return []
    return [pytest.mark.xfail(strict=True, raises=KnownOpen, reason="; ".join(f"{k}: {KNOWN_OPEN[k]}" for k in open_))]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    records = dc.run_cases(QUICK, tmp_path_factory.mktemp("dialects"))
    return {r["id"]: r for r in records}


@pytest.mark.parametrize("case_id", [
    pytest.param(c["id"], marks=_open_mark(dc.base_features(c["spec"])), id=c["id"])
    for c in QUICK if not c["kinds"] and not c.get("corpus")])
def test_unmutated_models_convert_and_match(quick, case_id):
    """What tf_keras 2.21 itself writes; a model with a BASE_FEATURE in KNOWN_OPEN is a known class."""
    case = next(c for c in QUICK if c["id"] == case_id)
    _check(quick[case_id], own=set(dc.base_features(case["spec"])) or None)


@pytest.mark.parametrize("case_id", [
    pytest.param(c["id"], marks=_open_mark(c["kinds"]), id=c["id"])
    for c in QUICK if c["kinds"] and c["kinds"][0] not in DISCARDED_BY_TF_KERAS])
def test_each_dialect_alone_converts_and_matches(quick, case_id):
    """One mutation on a random model: the class of a counterexample is that mutation (or ``base``, when the
    unmutated file fails too: that fails here whatever KNOWN_OPEN says)."""
    _check(quick[case_id], own=set(quick[case_id]["kinds"]))


@pytest.mark.parametrize("case_id", [
    pytest.param(c["id"], marks=_open_mark(c.get("carries", [])), id=c["id"])
    for c in QUICK if c.get("corpus")])
def test_files_of_real_older_writers(quick, case_id):
    """``fixtures/legacy_writers``: written by tensorflow 2.15.1's own tf.keras; a failing file is a known
    class when every dialect it carries (``index.json``) is in KNOWN_OPEN."""
    _check(quick[case_id], own=set(next(c for c in QUICK if c["id"] == case_id)["carries"]))


@pytest.mark.parametrize("kind", sorted(DISCARDED_BY_TF_KERAS))
def test_dialects_tf_keras_refuses_are_not_cases(quick, kind):
    rec = next(quick[c["id"]] for c in QUICK if c["kinds"] == [kind])
    assert rec["status"] == "discarded", (f"tf_keras now opens {kind} files ({rec['status']}): move it from "
                                          f"DISCARDED_BY_TF_KERAS into the cases")
    assert "reset_after" in str(rec["detail"]), rec["detail"]


def test_mutations_are_deterministic():
    """The same seed and kinds plan the same case (what a printed reproducer relies on)."""
    for seed in (1, 2, 3):
        assert dc.plan_case(seed) == dc.plan_case(seed)
        assert dc.plan_case(seed, kinds=["init_dtype"]) == dc.plan_case(seed, kinds=["init_dtype"])


@pytest.mark.slow
def test_dialects_long_profile(tmp_path):
    """Random combinations (1-4 mutations of one version profile) and every corpus file under every
    mutation: no counterexample outside KNOWN_OPEN.  Known ones are printed, not failed (the quick tier's
    strict xfails track them)."""
    import random

    start = random.SystemRandom().randrange(10 ** 6) if RANDOM_LONG else 9000
    cases = [dc.plan_case(start + i) for i in range(LONG_CASES)]
    corpus = dc.corpus_cases()
    cases += corpus
    if CORPUS_KINDS:
        cases += [dict(c, id=f"{c['id']}-{k}", kinds=[k]) for c in corpus for k in QUICK_KINDS
                  if not (dc.MUTATIONS[k].full_only and c["spec"]["save"] == "weights")]
    records = []
    for i in range(0, len(cases), 20):
        records += dc.run_cases(cases[i:i + 20], tmp_path, log=lambda r: print(r["id"], r["status"], r.get("class", "")))
    new = [r for r in records if r["status"] == "counterexample" and not dc.kinds_of_class(r["class"]) <= set(KNOWN_OPEN)]
    bad = [r for r in records if r["status"] in ("build_error", "oracle_error")]
    assert not bad, "\n".join(f"{r['id']}: {r['status']} {r['detail']}" for r in bad)
    assert not new, f"start seed {start}:\n" + "\n".join(_message(r) for r in new)
