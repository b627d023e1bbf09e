"""The module structure the readers → document → writers split promises (issue 16), checked on the
source: no import cycle (function-level imports included), no private name used across modules, no
format name in ``verify`` or ``batch``, and every registered reader and writer offering its verbs.

Each check is an AST walk over ``src/gruconv``; a planted violation is shown failing in
:func:`test_the_cycle_finder_finds_a_planted_cycle`."""

from __future__ import annotations

import ast
import importlib
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
    """(required constants, {required verb: parameter names}) read off :class:`gruconv.writers.Writer`."""
    import inspect

    from gruconv import writers

    consts = tuple(writers.Writer.__annotations__)
    verbs = {n: [p for p in inspect.signature(f).parameters if p != "self"]
             for n, f in vars(writers.Writer).items() if inspect.isfunction(f) and not n.startswith("_")}
    return consts, verbs


def _writer_breaches(w, consts, verbs, optional) -> list:
    """How module ``w`` breaks the writer contract: a missing constant or verb, a verb whose parameters
    differ from the Protocol's, or a public function that is neither a verb nor a declared optional one."""
    import inspect

    out = [f"no {c}" for c in consts if not hasattr(w, c)]
    for v, params in verbs.items():
        f = getattr(w, v, None)
        if f is None:
            out.append(f"no {v}()")
        elif [p for p in inspect.signature(f).parameters] != params:
            out.append(f"{v}{tuple(inspect.signature(f).parameters)} is not {v}{tuple(params)}")
    public = {n for n, f in vars(w).items() if inspect.isfunction(f) and f.__module__ == w.__name__
              and not n.startswith("_")}
    out += [f"{n}() is neither a writer verb nor in writers.OPTIONAL" for n in sorted(public - set(verbs) - set(optional))]
    return out


def test_every_writer_satisfies_the_writer_protocol():
    """The contract is written once (``writers.Writer``) and every registered writer module has it;
    optional verbs are declared in ``writers.OPTIONAL`` (found with ``writers.hook``, not ``hasattr``)."""
    from gruconv import writers

    consts, verbs = _writer_contract()
    assert {"FORMAT", "SUFFIX", "CLAIMS", "MANY"} <= set(consts) and {"write_stack", "write_graph", "load"} <= set(verbs)
    for name in writers.WRITERS:
        w = writers.module(name)
        assert _writer_breaches(w, consts, verbs, writers.OPTIONAL) == [], name
        assert w.FORMAT == name
        assert w.SUFFIX.endswith(w.CLAIMS) or any(w.SUFFIX.endswith(c) for c in w.CLAIMS)
        assert writers.claimed_by("x" + w.SUFFIX) == name


def test_the_writer_protocol_check_finds_planted_breaches():
    import types

    from gruconv import writers

    consts, verbs = _writer_contract()
    w = types.ModuleType("planted_writer")
    exec("FORMAT = SUFFIX = 'x'\nCLAIMS = ('x',)\nMANY = SAVES_MODEL = NEEDS_ARCHITECTURE = False\n"
         "def options(graph): pass\ndef write_stack(document, entry, target, options, name): pass\n"
         "def write_graph(document, target, options, *, final): pass\ndef sneaky(path): pass\n", vars(w))
    assert _writer_breaches(w, consts, verbs, writers.OPTIONAL) == [
        "write_graph('document', 'target', 'options', 'final') is not "
        "write_graph('document', 'target', 'options', 'warnings', 'final')", "no load()",
        "sneaky() is neither a writer verb nor in writers.OPTIONAL"]
    with pytest.raises(KeyError):
        writers.hook(w, "sneaky")


def test_every_reader_offers_the_reader_verbs():
    from gruconv import readers

    for name in readers.READERS:
        r = readers.module(name)
        assert r.FORMAT == name
        for attr in ("DESCRIPTION", "OPTIONS", "GRAPH", "SUFFIXES", "sniff", "read", "inspect", "input_files",
                     "extra_outputs", "output_format", "check_outputs", "convert", "output_name",
                     "natural_output", "nothing_to_verify", "verify_subjects"):
            assert hasattr(r, attr), (name, attr)


def test_options_cover_every_field_once():
    """Every ``Options`` field is read by some reader or writer (or is common): none can be refused
    for every input, and none is silently ignored by all."""
    import dataclasses

    from gruconv import readers, writers
    from gruconv.options import Options

    read = set(writers.COMMON_OPTIONS)
    for name in readers.READERS:
        read |= readers.accepted_options(name, list(writers.WRITERS))
    assert {f.name for f in dataclasses.fields(Options)} == read
    importlib.import_module("gruconv.cli")  # the --format choices come from the registry
