"""The module structure the readers → document → writers split promises (issue 16), checked on the
source: no import cycle (function-level imports included), no private name used across modules, no
format name in ``verify`` or ``batch``, and every registered reader and writer offering its verbs.

Each check is an AST walk over ``src/gruconv``; a planted violation is shown failing in
:func:`test_the_cycle_finder_finds_a_planted_cycle`.  The tests mirror the packages: every test
module lives in ``tests/PACKAGE/`` (or ``tests/MODULE/``, e.g. ``tests/cli/``) but for this module and
``test_process_state.py`` (:func:`test_every_test_module_lives_in_a_mirrored_folder`, proven on a
planted tree)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from conftest import ROOT

SRC = ROOT / "src"
PKG = SRC / "gruconv"


def _modules() -> dict:
    out = {}
    for p in PKG.rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def _from_target(pkg: str, n: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` in package ``pkg`` names (relative levels resolved)."""
    if not n.level:
        return n.module or ""
    base = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
    return ".".join(base + ([n.module] if n.module else []))


def _imports(name: str, path: Path, mods: dict):
    """(target module, imported name or None) for every gruconv import in ``path``, at any depth."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom):
            target = _from_target(pkg, n)
            if not target.startswith("gruconv"):
                continue
            for a in n.names:
                full = f"{target}.{a.name}"
                yield (full, None) if full in mods else (target, a.name)
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.startswith("gruconv"):
                    yield a.name, None


def _graph(mods: dict) -> dict:
    return {m: {t for t, _ in _imports(m, p, mods) if t in mods and t != m} for m, p in mods.items()}


def _cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    """Package -> own-submodule edges are kept (issue 28): ``verify`` -> ``verify.graph`` ->
    ``verify.verdicts`` -> ``verify`` (``CURRENT_RUN`` read from the package) was a cycle that dropping
    them hid; :func:`test_no_upward_import` keeps such a back edge from coming back."""
    assert _cycles(_graph(_modules())) == []


def _upward(name: str, path: Path, source: str, mods: dict) -> list:
    """Imports in module ``name`` of a NAME (not a submodule) from one of its ancestor packages:
    ``from . import CURRENT_RUN`` in ``verify.verdicts``, ``from .. import __version__`` in
    ``batch.records``.  A package ``__init__`` defines nothing its submodules import, so a package
    never imports back from a child that it is still initialising (STRUCTURE-REVIEW house rules)."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.ImportFrom):
            target = _from_target(pkg, n)
            if target != name and name.startswith(target + "."):
                out += [f"{name} imports {target}.{a.name}" for a in n.names if f"{target}.{a.name}" not in mods]
        elif isinstance(n, ast.Import):
            out += [f"{name} imports {a.name}" for a in n.names if name.startswith(a.name + ".")]
    return out


def test_no_upward_import():
    mods = _modules()
    assert [b for m, p in mods.items() for b in _upward(m, p, p.read_text(), mods)] == []


def test_the_upward_import_finder_finds_planted_ones():
    mods = _modules()
    path = PKG / "verify" / "verdicts.py"
    planted = "from . import CURRENT_RUN\nfrom .. import __version__\nfrom . import graph\nimport gruconv\n"
    assert _upward("gruconv.verify.verdicts", path, planted, mods) == [
        "gruconv.verify.verdicts imports gruconv.verify.CURRENT_RUN",
        "gruconv.verify.verdicts imports gruconv.__version__",
        "gruconv.verify.verdicts imports gruconv"]


def _with_package_inits(graph: dict) -> dict:
    """``graph`` with the edges an import also makes at run time: importing ``a.b.c`` runs ``a/b/__init__``
    (and ``a/__init__``), so a module that imports a submodule of another package also depends on that
    package's ``__init__`` (child -> parent-package edges; a module's own ancestors are running already and
    add no edge).  The count of ``../shared/STRUCTURE-REVIEW.md`` section 1, which found two cycles the plain
    count did not (``readers.tf2`` <-> ``readers.tfgraph``, ``verify`` -> ``graph_stacks`` -> ``verify``)."""
    out = {}
    for m, targets in graph.items():
        edges = set(targets)
        for t in targets:
            parts = t.split(".")
            for i in range(1, len(parts)):
                anc = ".".join(parts[:i])
                if anc in graph and anc != m and not m.startswith(anc + "."):
                    edges.add(anc)
        out[m] = edges
    return out


def test_no_import_cycle_counting_package_inits():
    assert _cycles(_with_package_inits(_graph(_modules()))) == []


def test_the_package_init_count_finds_a_planted_cycle():
    """The shape of the readers' old tie: each package imports a submodule of the other, no module cycle."""
    graph = {"r": set(), "r.tf2": {"r.tfgraph.scan"}, "r.tf2.metadata": set(),
             "r.tfgraph": {"r.tf2.metadata"}, "r.tfgraph.scan": set()}
    assert _cycles(graph) == []
    assert _cycles(_with_package_inits(graph)) == [["r.tf2", "r.tfgraph"]]
    # a module importing its own package's submodules adds no edge to its own package
    assert _with_package_inits({"p": {"p.a"}, "p.a": {"p.b"}, "p.b": set()})["p.a"] == {"p.b"}


def test_the_cycle_finder_sees_a_package_importing_back_from_its_child():
    """The shape of the cycle that the old package-edge filter hid."""
    graph = {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p"}}
    assert _cycles(graph) == [["p", "p.a", "p.b"]]


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_private_name_used_across_modules():
    mods = _modules()
    bad = []
    for m, p in mods.items():
        for target, imported in _imports(m, p, mods):
            if imported and imported.startswith("_") and not imported.startswith("__") and target != m:
                bad.append(f"{m} imports {target}.{imported}")
    assert bad == []


def _private_attributes(name: str, source: str, mods: dict, package: bool = False) -> list:
    """``module._private`` attribute uses in ``source`` where ``module`` is a name bound to another
    gruconv module (``from ..readers import keras_h5`` then ``keras_h5._open``): the same breach of a
    module's boundary as importing the private name, which :func:`_imports` alone does not see."""
    pkg = name if package else name.rsplit(".", 1)[0]
    tree = ast.parse(source)
    alias = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            target = _from_target(pkg, n)
            for a in n.names:
                if f"{target}.{a.name}" in mods:
                    alias[a.asname or a.name] = f"{target}.{a.name}"
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name in mods and a.asname:
                    alias[a.asname] = a.name
    out = []
    for n in ast.walk(tree):
        if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in alias
                and n.attr.startswith("_") and not n.attr.startswith("__") and alias[n.value.id] != name):
            out.append(f"{name} uses {alias[n.value.id]}.{n.attr}")
    return sorted(set(out))


def test_no_private_attribute_of_another_module():
    mods = _modules()
    bad = [b for m, p in mods.items() for b in _private_attributes(m, p.read_text(), mods, p.name == "__init__.py")]
    assert bad == []


def test_the_private_attribute_finder_finds_a_planted_use():
    mods = _modules()
    planted = "from ..readers import keras_h5\n\ndef f(p):\n    return keras_h5._secret(p), keras_h5.read(p)\n"
    assert _private_attributes("gruconv.keras3.archive", planted, mods) == \
        ["gruconv.keras3.archive uses gruconv.readers.keras_h5._secret"]


@pytest.mark.parametrize("package", ["verify", "batch"])
def test_no_format_name_in(package):
    """``verify`` asks the document and the writers; ``batch`` asks the readers and the writers."""
    from gruconv import readers, writers

    names = set(readers.READERS) | set(writers.WRITERS) | {".rest.npz", ".weights.h5", "CHECKPOINT"}
    found = []
    for p in (PKG / package).rglob("*.py"):
        tree = ast.parse(p.read_text())
        # a dict key such as the report's {"keras": keras.__version__} names the library, not a format
        keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys if k is not None}
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names and id(n) not in keys:
                found.append(f"{p.name}:{n.lineno} {n.value!r}")
    assert found == []


def _writer_contract():
    """(required constants, {required verb: parameter names}, {optional verb: parameter names}) read off
    :class:`gruconv.writers.Writer` (optional verbs are the ones marked ``@optional`` there)."""
    import inspect

    from gruconv import writers

    consts = tuple(writers.Writer.__annotations__)
    verbs, optional = {}, {}
    for n, f in vars(writers.Writer).items():
        if inspect.isfunction(f) and not n.startswith("_"):
            (optional if getattr(f, "optional", False) else verbs)[n] = [
                p for p in inspect.signature(f).parameters if p != "self"]
    return consts, verbs, optional


def _writer_breaches(w, consts, verbs, optional) -> list:
    """How module ``w`` breaks the writer contract: a missing constant or verb, a verb (required or
    optional) whose parameters differ from the Protocol's, a target kind or ``WRITES`` outside the
    registry's, or a public function that is neither a verb nor a declared optional one."""
    import inspect

    from gruconv.writers import registry

    out = [f"no {c}" for c in consts if not hasattr(w, c)]
    for v, params in list(verbs.items()) + list(optional.items()):
        f = getattr(w, v, None)
        if f is None:
            if v in verbs:
                out.append(f"no {v}()")
        elif [p for p in inspect.signature(f).parameters] != params:
            out.append(f"{v}{tuple(inspect.signature(f).parameters)} is not {v}{tuple(params)}")
    out += [f"KINDS has {k!r}" for k in getattr(w, "KINDS", ()) if k not in registry.KINDS]
    if hasattr(w, "WRITES") and w.WRITES not in registry.WRITES:
        out.append(f"WRITES is {w.WRITES!r}")
    public = {n for n, f in vars(w).items() if inspect.isfunction(f) and f.__module__ == w.__name__
              and not n.startswith("_")}
    out += [f"{n}() is neither a writer verb nor optional in writers.Writer"
            for n in sorted(public - set(verbs) - set(optional))]
    return out


def test_every_writer_satisfies_the_writer_protocol():
    """The contract is written once (``writers.Writer``, a ``typing.Protocol``) and every registered
    writer module has it: its constants, one ``write`` verb, ``load``; optional verbs are declared in
    the Protocol (``@optional``) and found with ``writers.hook``, not ``hasattr``."""
    from gruconv import writers

    consts, verbs, optional = _writer_contract()
    assert {"FORMAT", "SUFFIX", "CLAIMS", "KINDS", "WRITES", "MANY"} <= set(consts)
    assert set(verbs) == {"options", "write", "load"} and set(optional) == set(writers.OPTIONAL)
    for name in writers.WRITERS:
        w = writers.module(name)
        assert _writer_breaches(w, consts, verbs, optional) == [], name
        assert w.FORMAT == name
        if w.WRITES == "graph":  # a whole TensorFlow graph (a SavedModel directory): no stacks, no name ending
            assert w.KINDS == ("tf-graph",) and w.CLAIMS == () and w.SUFFIX == "", name
            continue
        assert "stack" in w.KINDS and "graph" in w.KINDS
        assert w.SUFFIX.endswith(w.CLAIMS) or any(w.SUFFIX.endswith(c) for c in w.CLAIMS)
        assert writers.claimed_by("x" + w.SUFFIX) == name
        if "graph-rnn" in w.KINDS:  # a directory of one file per RNN needs their names
            assert writers.hook(w, "graph_targets") and writers.hook(w, "refuse"), name
    assert writers.by_kind("document") == ["torch"] and writers.by_kind("graph-rnn") == ["onnx", "openvino"]
    assert writers.by_kind("tf-graph") == ["saved-model"]


def test_the_writer_protocol_check_finds_planted_breaches():
    import types

    from gruconv import writers

    consts, verbs, optional = _writer_contract()
    w = types.ModuleType("planted_writer")
    exec("FORMAT = SUFFIX = 'x'\nCLAIMS = ('x',)\nKINDS = ('stack', 'table')\nWRITES = 'model'\n"
         "MANY = NEEDS_ARCHITECTURE = EVERY_MODEL = False\n"
         "def options(graph): pass\ndef write(document, target): pass\n"
         "def describe(shape, more): pass\ndef sneaky(path): pass\n", vars(w))
    assert _writer_breaches(w, consts, verbs, optional) == [
        "options('graph',) is not options('kind',)",  # the option set is by target kind (issue 45)
        "write('document', 'target') is not write('document', 'target', 'options')", "no load()",
        "describe('shape', 'more') is not describe('shape',)", "KINDS has 'table'",
        "sneaky() is neither a writer verb nor optional in writers.Writer"]
    with pytest.raises(KeyError):
        writers.hook(w, "sneaky")


#: What a reader module offers: reading verbs only.
READER_VERBS = ("DESCRIPTION", "OPTIONS", "CONTENTS", "SUFFIXES", "sniff", "read", "inspect", "input_facts",
                "input_files")
#: Writer, planning, verify or driver verbs a reader once had (issue 28): writing and planning are the
#: writers' (``writers.planning``), what to verify is ``verify.subjects``', driving is api's.
NOT_READER_VERBS = ("convert", "check_outputs", "output_format", "write", "write_stack", "write_graph",
                    "stack_targets", "extra_outputs", "output_name", "natural_output", "nothing_to_verify",
                    "verify_subjects", "to_keras")


def _reader_breaches(r) -> list:
    return ([f"no {v}" for v in READER_VERBS if not hasattr(r, v)]
            + [f"{v} is a writer verb" for v in NOT_READER_VERBS if hasattr(r, v)])


def test_every_reader_offers_the_reader_verbs_and_no_writer_verb():
    from gruconv import readers

    for name in readers.READERS:
        r = readers.module(name)
        assert r.FORMAT == name
        assert _reader_breaches(r) == [], name


def test_the_reader_verb_check_finds_a_planted_writer_verb():
    import types

    from gruconv import readers

    r = types.ModuleType("planted_reader")
    vars(r).update(vars(readers.module("keras-h5")))
    r.convert = lambda doc, output, opts: None
    r.verify_subjects = lambda doc, converted, opts: iter(())
    del r.inspect
    assert _reader_breaches(r) == ["no inspect", "convert is a writer verb", "verify_subjects is a writer verb"]


def test_planning_and_verify_decide_every_content_kind():
    """Readers state what a document holds (``doc.content``, ``input_facts``); planning's
    ``NATURAL_FORMAT`` and verify's ``CHECKS`` each decide every kind, and nothing else (issue 28)."""
    from gruconv import writers
    from gruconv.model.canonical import CONTENTS, InputFacts
    from gruconv.verify.subjects import CHECKS
    from gruconv.writers.planning import NATURAL_FORMAT

    assert set(NATURAL_FORMAT) == set(CONTENTS) == set(CHECKS)
    assert set(NATURAL_FORMAT.values()) <= set(writers.WRITERS)
    with pytest.raises(ValueError):
        InputFacts("sound")


def test_cell_tables_fail_loudly_on_an_unknown_cell():
    """Cell switches are tables keyed by cell (issue 28): a third cell is a KeyError, never sent down the
    GRU or LSTM branch."""
    from gruconv import eligibility
    from gruconv.model.canonical import CELLS
    from gruconv.readers.tf1 import reading
    from gruconv.readers.tf1.cells import TF_CELLS

    for bad in (lambda: reading._not_fitting_hint("rnn_tanh"),
                lambda: eligibility._defaults("SimpleRNN", {}, False),
                lambda: CELLS["rnn_tanh"].shape_prefix):
        with pytest.raises(KeyError):
            bad()
    assert reading._not_fitting_hint("gru") != reading._not_fitting_hint("lstm")
    assert all(c.input_want and c.not_fitting for c in TF_CELLS.values())
    assert eligibility._defaults("GRU", {}, True)["reset_after"] is False
    assert "reset_after" not in eligibility._defaults("LSTM", {}, False)


#: Where the Keras 2 cuDNN class names may be spelled: their table (``model/keras_layout.py``), and the
#: eligibility rules, which import no NumPy (a config alone decides there).
CUDNN_CLASS_NAMES = {"CuDNNGRU", "CuDNNLSTM"}
CUDNN_CLASS_NAME_HOMES = {"model/keras_layout.py", "eligibility/__init__.py"}


def _cudnn_class_literals(source: str) -> list:
    """Line numbers of string constants that are exactly a cuDNN class name (docstrings are longer)."""
    return [n.lineno for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and n.value in CUDNN_CLASS_NAMES]


def test_the_cudnn_class_names_are_spelled_in_one_table():
    """One fact, one place (issue 28): readers, keras3 and writers ask ``keras_layout.CUDNN_KERAS_CLASS`` /
    ``CELL_OF_CUDNN_CLASS`` for the cuDNN class of a cell, so a new cell is one row there; an unknown class
    is a KeyError, not a GRU."""
    from gruconv.keras3 import legacy

    found = {str(f.relative_to(PKG)): _cudnn_class_literals(f.read_text()) for f in PKG.rglob("*.py")}
    assert {f for f, lines in found.items() if lines} == CUDNN_CLASS_NAME_HOMES
    assert _cudnn_class_literals('x = {"CuDNNGRU": 1}\n"""CuDNNGRU, a docstring"""\n') == [1]  # planted
    with pytest.raises(KeyError):
        legacy.gru_config({"class_name": "SimpleRNN", "config": {"units": 2}})


#: A project ticket number in prose: ``issue 23``, ``Issue 30:``, a provenance tag ``stop 37``.  Another
#: project's issue (``keras-team/keras#18504``) is a citation and does not match.
_TICKET = re.compile(r"\b[Ii]ssues? \d+|\bstop \d+\b")


def _ticket_numbers(source: str) -> list:
    return [i for i, line in enumerate(source.splitlines(), 1) if _TICKET.search(line)]


def test_code_names_no_ticket_number():
    """Comments and docstrings keep the why and drop the ticket number: the number goes in the commit
    message and the test name, where it stays true."""
    found = {str(f.relative_to(PKG)): _ticket_numbers(f.read_text()) for f in PKG.rglob("*.py")}
    assert {f: lines for f, lines in found.items() if lines} == {}
    planted = '"""Why (issue 20): slow."""\nx = 1  # stop 37\n# keras-team/keras#18504, tensorflow#77442\n'
    assert _ticket_numbers(planted) == [1, 2]


#: The ``tempfile`` calls that make a file or directory; only ``files/outputs.py`` calls them.
TEMP_MAKERS = {"mkstemp", "mkdtemp", "TemporaryDirectory", "NamedTemporaryFile", "TemporaryFile",
               "SpooledTemporaryFile"}


def _temp_makers(source: str) -> list:
    """Line numbers of ``tempfile.<maker>`` uses and ``from tempfile import <maker>`` (not docstrings)."""
    tree = ast.parse(source)
    return sorted({n.lineno for n in ast.walk(tree)
                   if (isinstance(n, ast.Attribute) and n.attr in TEMP_MAKERS
                       and isinstance(n.value, ast.Name) and n.value.id == "tempfile")
                   or (isinstance(n, ast.ImportFrom) and n.module == "tempfile"
                       and any(a.name in TEMP_MAKERS for a in n.names))})


def test_temporaries_are_made_in_one_place():
    """Every temporary file and directory comes from ``files.outputs.scratch_file`` / ``scratch_dir``,
    which make it with the signals held (``signals.held``), so a SIGTERM/SIGINT never lands between its
    creation and the ``finally`` that removes it (CI stop 36: a hidden temporary left in a batch's
    ``--out-dir``).  A new ``mkstemp`` elsewhere would reopen that window."""
    found = {str(f.relative_to(PKG)): _temp_makers(f.read_text()) for f in PKG.rglob("*.py")}
    assert {f for f, lines in found.items() if lines} == {"files/outputs.py"}, \
        {f: lines for f, lines in found.items() if lines}
    planted = 'import tempfile\nfrom tempfile import mkdtemp\n"""tempfile.mkstemp in prose"""\nfd, p = tempfile.mkstemp()\n'
    assert _temp_makers(planted) == [2, 4]


def _package_imports(mods: dict, packages, targets=("readers",)) -> list:
    """``module -> gruconv.<target>...`` imports (any depth) from the modules under ``packages``."""
    found = []
    for m, p in mods.items():
        if any(m == f"gruconv.{pkg}" or m.startswith(f"gruconv.{pkg}.") for pkg in packages):
            found += [f"{m} -> {t}" for t, _ in _imports(m, p, mods)
                      if any(t == f"gruconv.{x}" or t.startswith(f"gruconv.{x}.") for x in targets)]
    return sorted(set(found))


def _reader_imports(mods: dict, packages) -> list:
    return _package_imports(mods, packages, ("readers",))


def test_writers_keras3_and_model_never_import_readers():
    """A writer reads nothing but the ``Document`` (issue 28): no module under ``writers/``, ``keras3/`` or
    ``model/`` imports a reader, at any depth (a Keras graph's weights come through its store,
    :mod:`gruconv.model.weights`)."""
    assert _reader_imports(_modules(), ("writers", "keras3", "model")) == []


def test_the_reader_import_finder_finds_a_planted_one(tmp_path):
    mods = _modules()
    planted = tmp_path / "planted.py"
    planted.write_text("def f(p):\n    from ..readers import keras_h5\n    return keras_h5.read(p)\n")
    mods["gruconv.writers.planted"] = planted
    assert _reader_imports(mods, ("writers",)) == ["gruconv.writers.planted -> gruconv.readers.keras_h5"]


def test_writers_never_import_verify():
    """A writer hands ``verify`` what it wrote (its ``load`` and ``runners`` verbs) and imports nothing of
    it: the runner of a torch/onnx stack lives with the targets and takes the GPU math as an argument
    (:class:`gruconv.writers.runner.StackRunner`)."""
    assert _package_imports(_modules(), ("writers",), ("verify",)) == []


def test_readers_never_import_writers():
    """A reader imports no writer: option refusal and the input suffixes batch strips read both registries,
    so they live with the drivers (:mod:`gruconv.run_options`), not in ``readers/__init__.py``."""
    assert _package_imports(_modules(), ("readers",), ("writers", "verify", "batch", "api", "run_options")) == []


#: What verify may import of ``writers/`` beyond the registry (``from .. import writers``): the planning rule of
#: where ``convert`` put each file (``stack_targets``, ``natural_format``), which is no writer.
VERIFY_MAY_IMPORT = {"gruconv.verify.subjects -> gruconv.writers.planning"}


def _verify_reaches_into(mods: dict) -> list:
    """``verify`` imports of a writer or reader *module* (the packages' registries are how it asks them)."""
    return [f for f in _package_imports(mods, ("verify",), ("writers", "readers"))
            if f.split(" -> ")[1] not in ("gruconv.writers", "gruconv.readers")]


def test_verify_names_no_writer_or_reader_module():
    """Issue 45: verify asks a writer through the registry (``writers.module(fmt)``, its ``load``/``runners``/
    ``node_runner``/``built`` hooks) and walks configs with :mod:`gruconv.model.keras_config`, so it names no
    writer's or reader's module: what it checks is what the registry hands ``convert`` too."""
    assert set(_verify_reaches_into(_modules())) == VERIFY_MAY_IMPORT


def test_the_verify_import_finder_finds_planted_ones(tmp_path):
    mods = _modules()
    planted = tmp_path / "planted.py"
    planted.write_text("from .. import writers, readers\n"
                       "def f():\n    from ..writers.saved_model.node_runner import runner\n"
                       "    from ..readers.keras_h5 import walk_layers\n")
    mods["gruconv.verify.planted"] = planted
    got = set(_verify_reaches_into(mods)) - VERIFY_MAY_IMPORT
    assert got == {"gruconv.verify.planted -> gruconv.writers.saved_model.node_runner",
                   "gruconv.verify.planted -> gruconv.readers.keras_h5"}


#: Readers that still import the Keras 3 side for config vocabulary (issue 38 point 3 moves the pure config
#: walking into one module under ``model/``; each entry goes when its import does, and no new one comes).
READERS_IMPORTING_KERAS3 = {
    "gruconv.readers.keras_h5 -> gruconv.keras3.builtins",
    "gruconv.readers.keras_h5 -> gruconv.keras3.legacy",
    "gruconv.readers.tf1.reading -> gruconv.keras3.runtime",
    "gruconv.readers.tf_keras_zip -> gruconv.keras3.config",
}


def test_readers_import_keras3_only_where_still_known():
    assert set(_package_imports(_modules(), ("readers",), ("keras3",))) == READERS_IMPORTING_KERAS3


def test_the_package_import_finder_finds_planted_ones(tmp_path):
    mods = _modules()
    planted = tmp_path / "planted.py"
    planted.write_text("from ...verify.runners import matching_runner\n"
                       "def f():\n    from ... import writers\n    from ...keras3 import config\n")
    mods["gruconv.readers.tf1.planted"] = planted
    got = _package_imports(mods, ("readers",), ("writers", "verify", "keras3"))
    assert "gruconv.readers.tf1.planted -> gruconv.verify.runners" in got
    assert "gruconv.readers.tf1.planted -> gruconv.writers" in got
    assert "gruconv.readers.tf1.planted -> gruconv.keras3.config" in got
    writer = tmp_path / "writer.py"
    writer.write_text("def runners(path):\n    from ..verify.runners import StackRunner\n")
    mods["gruconv.writers.planted"] = writer
    assert _package_imports(mods, ("writers",), ("verify",)) == ["gruconv.writers.planted -> gruconv.verify.runners"]


#: What hands out an input's open storage: the reader-side openers and walkers, and the accessors a Keras
#: graph had before its store (``open_file``, ``weight_group``, ``weight_names``, ``open_weights``,
#: ``stored_weights``).  Outside ``readers/`` and ``files/`` none is named, as an attribute or an import.
STORAGE_WALKERS = {"open_model_file", "weight_names_of", "stored_layer_weights", "open_file", "weight_group",
                   "weight_names", "open_weights", "stored_weights", "open_hdf5_member"}


def _storage_walks(source: str) -> list:
    """Lines of ``source`` naming a :data:`STORAGE_WALKERS` name (attribute, imported name or call)."""
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Attribute) and n.attr in STORAGE_WALKERS:
            out.append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and any(a.name in STORAGE_WALKERS for a in n.names):
            out.append(n.lineno)
        elif isinstance(n, ast.Name) and n.id in STORAGE_WALKERS:
            out.append(n.lineno)
    return sorted(set(out))


def test_only_readers_and_files_walk_an_inputs_storage():
    """Only modules under ``readers/`` and ``files/`` open an input or walk its storage: everyone else
    reads a Keras graph's weights through its store (:class:`gruconv.model.weights.WeightStore`)."""
    found = {}
    for m, p in _modules().items():
        if m.startswith(("gruconv.readers", "gruconv.files")):
            continue
        lines = _storage_walks(p.read_text())
        if lines:
            found[m] = lines
    assert found == {}


def test_the_storage_walk_finder_finds_planted_ones():
    planted = ("from ..readers.keras_h5 import open_model_file\n"
               "def f(doc):\n    with doc.open_file() as src:\n        return doc.weight_names(src)\n"
               "def g(doc):\n    with doc.store.open() as s:\n        return s.layer_weights('x')\n")
    assert _storage_walks(planted) == [1, 3, 4]


def test_options_cover_every_field_once():
    """Every ``Options`` field is read by some reader or writer (or is common): none can be refused
    for every input, and none is silently ignored by all."""
    import dataclasses

    from gruconv import readers, run_options, writers
    from gruconv.options import Options

    read = set(writers.COMMON_OPTIONS)
    for name in readers.READERS:
        read |= run_options.accepted_options(name, list(writers.WRITERS))
    assert {f.name for f in dataclasses.fields(Options)} == read
    importlib.import_module("gruconv.cli")  # the --format choices come from the registry


def _graph_gaps(cls) -> list:
    """The members of :class:`gruconv.model.canonical.KerasGraph` that class ``cls`` lacks: attributes,
    dataclass fields or methods."""
    import dataclasses

    from gruconv.model.canonical import KerasGraph

    protos = [KerasGraph]
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    gaps = []
    for proto in protos:
        members = set(proto.__annotations__) | {n for n, f in vars(proto).items()
                                                if callable(f) and not n.startswith("_")}
        gaps += sorted(m for m in members if m not in fields and not hasattr(cls, m))
    return gaps


def test_every_keras_graph_is_complete():
    """Each reader's Keras graph implements the whole :class:`~gruconv.model.canonical.KerasGraph`
    (writers ask it, never the reader)."""
    from gruconv.readers.keras_h5 import KerasH5Model
    from gruconv.readers.tf_keras_zip import TfKerasZipModel

    for cls in (KerasH5Model, TfKerasZipModel):
        assert _graph_gaps(cls) == [], cls.__name__


def test_the_keras_graph_check_finds_a_planted_gap():
    import dataclasses

    from gruconv.readers.tf_keras_zip import TfKerasZipModel

    @dataclasses.dataclass
    class Half:
        path: str
        model_config: dict
        layout = "v3"

        def legacy_config(self):
            pass

    gaps = _graph_gaps(Half)
    assert "store" in gaps and "other_weights" in gaps and "legacy_config" not in gaps and "path" not in gaps
    assert _graph_gaps(TfKerasZipModel) == []


# --------------------------------------------------------------------------- the tests mirror the packages

#: Test modules allowed in ``tests/`` itself: rules over the whole source tree (this module) and over
#: the whole test suite (collection leaves the process as it found it).  Every other test module lives
#: in a folder named after the package or module of ``src/gruconv`` it tests (docs/testing.md).
ROOT_TEST_MODULES = ("test_structure.py", "test_process_state.py")


def _misplaced_tests(tests: Path, pkg: Path) -> list:
    """What breaks the layout rule under ``tests``, for the package at ``pkg``: a ``test_*.py`` in
    ``tests/`` itself but for :data:`ROOT_TEST_MODULES`; one in a folder that mirrors no package
    (``pkg/FOLDER/__init__.py``) or module (``pkg/FOLDER.py``, e.g. ``cli/`` for ``cli.py``); two
    test modules of the same name (without ``__init__.py`` pytest imports each folder's modules by
    their bare name, so names are unique over the tree); an ``__init__.py``, a ``conftest.py`` or a
    support module in a folder (support modules live in ``tests/``, on ``sys.path`` through pyproject's
    ``pythonpath``)."""
    out, seen = [], {}
    for p in sorted(tests.rglob("*.py")):
        rel = p.relative_to(tests)
        if "__pycache__" in rel.parts:
            continue
        folder = rel.parent
        if folder == Path("."):
            if rel.name.startswith("test_") and rel.name not in ROOT_TEST_MODULES:
                out.append(f"{rel}: a test module in tests/ itself (it belongs in the folder of the package it tests)")
            continue
        if not rel.name.startswith("test_"):
            out.append(f"{rel}: not a test module (support modules, conftest.py and no __init__.py: tests/ itself)")
            continue
        if not ((pkg / folder / "__init__.py").is_file() or (pkg / folder).with_suffix(".py").is_file()):
            out.append(f"{rel}: {folder.as_posix()}/ mirrors no package or module of {pkg.name}")
        if rel.name in seen:
            out.append(f"{rel}: the same name as {seen[rel.name]}")
        seen.setdefault(rel.name, rel)
    return out


def test_every_test_module_lives_in_a_mirrored_folder():
    assert _misplaced_tests(ROOT / "tests", PKG) == []


def test_the_test_layout_check_finds_planted_violations(tmp_path):
    pkg, tests = tmp_path / "src" / "gruconv", tmp_path / "tests"
    for f in ("__init__.py", "cli.py", "readers/__init__.py", "readers/tf1/__init__.py", "verify/__init__.py"):
        (pkg / f).parent.mkdir(parents=True, exist_ok=True)
        (pkg / f).write_text("")
    good = ["test_structure.py", "test_process_state.py", "conftest.py", "make_things.py", "readers/test_a.py",
            "readers/tf1/test_b.py", "cli/test_c.py"]
    bad = ["test_loose.py", "writer/test_d.py", "verify/test_a.py", "readers/helper.py", "readers/__init__.py",
           "verify/conftest.py"]
    for f in good + bad:
        (tests / f).parent.mkdir(parents=True, exist_ok=True)
        (tests / f).write_text("")
    assert _misplaced_tests(tests, pkg) == [
        "readers/__init__.py: not a test module (support modules, conftest.py and no __init__.py: tests/ itself)",
        "readers/helper.py: not a test module (support modules, conftest.py and no __init__.py: tests/ itself)",
        "test_loose.py: a test module in tests/ itself (it belongs in the folder of the package it tests)",
        "verify/conftest.py: not a test module (support modules, conftest.py and no __init__.py: tests/ itself)",
        "verify/test_a.py: the same name as readers/test_a.py",
        "writer/test_d.py: writer/ mirrors no package or module of gruconv",
    ]
    for f in bad:
        (tests / f).unlink()
    assert _misplaced_tests(tests, pkg) == []


# --------------------------------------------------------------------------- the bench page keeps every section

def _bench_headings(bench: Path) -> list:
    """Every ``## `` heading the bench writes into ``docs/benchmarks.md``: the string literals starting with
    ``"## "`` handed to a call (``w("## Batch")``) in ``bench/*.py``; an f-string's literal head is enough
    to name a section (``w(f"## Verify {x}")`` -> ``## Verify``)."""
    out = []
    for p in sorted(bench.glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            arg = node.args[0]
            if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                arg = arg.values[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("## "):
                out.append((p.name, arg.value.rstrip()))
    return out


def _missing_bench_sections(bench: Path, page: str) -> list:
    """The bench's headings (:func:`_bench_headings`) that no line of ``page`` starts with."""
    lines = page.splitlines()
    return [f"{name}: {h!r}" for name, h in _bench_headings(bench) if not any(ln.startswith(h) for ln in lines)]


def test_every_section_the_bench_writes_is_in_the_bench_page():
    """Issue 47 item 3: a section added to ``make bench`` (``bench/run.py`` and the modules it renders) cannot
    be forgotten in ``docs/benchmarks.md``: rerun ``make bench`` (it rewrites the page) when this fails."""
    bench = ROOT / "bench"
    assert len(_bench_headings(bench)) >= 8  # the scan still finds the bench's headings
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert _missing_bench_sections(bench, page) == [], "rerun `make bench`: docs/benchmarks.md lacks these sections"
    assert re.search(r"^- \d{4}-\d\d-\d\d \d\d:\d\d UTC;", page, re.M), "the page names no date (## Machine)"
    assert re.search(r"at commit `[0-9a-f]{7,}`", page), "the page names no commit (## Machine)"


def test_the_bench_page_check_finds_a_planted_section(tmp_path):
    (tmp_path / "a.py").write_text('w = print\nw("## Alpha")\nw(f"## Beta {1}")\nw("text ## not a heading")\n')
    assert _bench_headings(tmp_path) == [("a.py", "## Alpha"), ("a.py", "## Beta")]
    assert _missing_bench_sections(tmp_path, "# Page\n\n## Alpha\n\n## Beta 2\n") == []
    assert _missing_bench_sections(tmp_path, "# Page\n\n## Alpha\n") == ["a.py: '## Beta'"]


# --------------------------------------------------------------------------- the TensorFlow boundary

#: The frameworks only the TensorFlow side (``gruconv/tf/``) imports (issue 45 item 1).
TF_FRAMEWORKS = ("tensorflow", "tf2onnx")
#: Modules outside ``tf/`` that import TensorFlow or tf2onnx (an ``import`` statement, or a call of
#: ``import_quietly``/``import_module`` with its name): the two that stay, each for a reason that is not the
#: graph family's, and no new one comes.  (Moved into ``tf/`` in issue 45: the rewrite, equations, node
#: runner, params evaluation, the tf2onnx loader, the served SavedModel, the probe loop.)
#:
#: * ``keras3.runtime``: TensorFlow *as Keras 3's backend* (its GPU probe, TF32 math, a ``tf.function`` of a
#:   stateless call): the Keras side's runtime, which must work with whichever backend Keras runs; moving it
#:   under ``tf/`` would make the Keras side depend on the graph family's package for its own backend.
#: * ``verify.reference.keras2``: tf_keras (Keras 2), which is TensorFlow's own Keras, is verify's independent
#:   reference of a legacy model; it needs ``tensorflow`` for its device scope and constants beside
#:   ``tf_keras`` (the one importer of tf_keras, ``../shared/STRUCTURE-REVIEW.md`` section 6).
TF_IMPORTERS_LEFT = {"gruconv.keras3.runtime", "gruconv.verify.reference.keras2"}


def _framework_imports(source: str, frameworks=TF_FRAMEWORKS) -> list:
    """Line numbers where ``source`` imports one of ``frameworks``: an import statement, or a call
    ``import_quietly("name")`` / ``importlib.import_module("name")``."""
    lines = []
    for n in ast.walk(ast.parse(source)):
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and not n.level:
            names = [n.module or ""]
        elif isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) \
                and isinstance(n.args[0].value, str):
            f = n.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if called in ("import_quietly", "import_module"):
                names = [n.args[0].value]
        if any(name.split(".")[0] in frameworks for name in names):
            lines.append(n.lineno)
    return sorted(lines)


def test_tensorflow_and_tf2onnx_are_imported_only_by_the_tensorflow_side():
    found = {m for m, p in _modules().items()
             if not (m == "gruconv.tf" or m.startswith("gruconv.tf.")) and _framework_imports(p.read_text())}
    assert found - TF_IMPORTERS_LEFT == set(), "a new module imports TensorFlow or tf2onnx outside gruconv/tf/"
    assert TF_IMPORTERS_LEFT - found == set(), "moved into gruconv/tf/: take it off TF_IMPORTERS_LEFT"


def test_the_tensorflow_import_finder_finds_planted_ones():
    planted = ("import numpy as np\nimport tensorflow as tf\n"
               "def f():\n    from tensorflow.core.protobuf import saved_model_pb2\n"
               "def g():\n    return import_quietly('tf2onnx')\n"
               "def h():\n    import importlib\n    return importlib.import_module('tensorflow.python')\n"
               "def k():\n    from . import tensorflow_names\n    return import_quietly('tf_keras')\n")
    assert _framework_imports(planted) == [2, 4, 6, 9]


# --------------------------------------------------------------------------- SavedModel names, once

#: A SavedModel's member names and signature key (issue 45 item 5): spelled only in ``model/saved_model.py``.
SAVED_MODEL_NAMES = {"saved_model.pb", "saved_model.pbtxt", "serving_default", "keras_metadata.pb", "variables",
                     "variables/variables", "assets.extra"}


def _saved_model_names(source: str) -> list:
    """Line numbers of string constants in ``source`` that are exactly one of :data:`SAVED_MODEL_NAMES`."""
    return sorted(n.lineno for n in ast.walk(ast.parse(source))
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in SAVED_MODEL_NAMES)


def test_saved_model_names_are_spelled_once():
    found = [f"{m}:{line}" for m, p in _modules().items() if m != "gruconv.model.saved_model"
             for line in _saved_model_names(p.read_text())]
    assert found == [], "use gruconv.model.saved_model's names"


def test_the_saved_model_name_finder_finds_planted_ones():
    planted = ('"""Reads saved_model.pb (a docstring may say so)."""\n'
               'SIG = "serving_default"\n'
               'def f(d):\n    return d / "variables" / "variables", f"{d}/saved_model.pb"\n')
    assert _saved_model_names(planted) == [2, 4, 4]
