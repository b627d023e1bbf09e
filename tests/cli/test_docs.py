"""The pages a user reads say what the commands do now.

- ``docs/cli.md`` is generated from every command's ``--help`` by ``scripts/cli_reference.py``; its ``--check``
  mode fails on drift, shown here on a planted edit of the page and on a changed option help.
- The README's examples (``$ gruconv ...`` lines in fenced blocks) are run as written, in order, in a scratch
  directory that sees ``fixtures/``, and their output compared with the block: timings are masked, and the
  verify table's measured differences (``9.28e-08``: BLAS rounding may differ on another CPU) are compared as
  numbers within a factor of 4, everything else (rows, names, verdicts, warnings) exactly.  The examples that
  start TensorFlow (``verify``, ``--verify``, a graph's SavedModel) are in the slow tier; the rest run here.
- Every relative link in README.md and docs/*.md names a file that exists and, with ``#anchor``, a heading of
  that file (GitHub's anchor rule); the checker is shown finding planted broken links.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gruconv.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cli_reference.py"
README = ROOT / "README.md"


def _script_module():
    """scripts/cli_reference.py as a module (loaded from its path: scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(doc: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--doc", str(doc)], capture_output=True,
                          text=True, timeout=120)


# --------------------------------------------------------------------------- the generated CLI reference


def test_cli_reference_matches_help():
    res = _check(ROOT / "docs" / "cli.md")
    assert res.returncode == 0, f"docs/cli.md is stale; run `make docs`:\n{res.stdout}{res.stderr}"


def test_cli_reference_lists_every_command_with_its_options():
    text = (ROOT / "docs" / "cli.md").read_text()
    for name in main.commands:
        assert f"\n## gruconv {name}\n" in text
        for p in main.commands[name].params:
            for opt in p.opts:
                if opt.startswith("--"):
                    assert opt in text, (name, opt)


def test_cli_reference_check_fails_on_a_planted_edit(tmp_path):
    doc = tmp_path / "cli.md"
    text = (ROOT / "docs" / "cli.md").read_text()
    planted = text.replace("Batch: write a JUnit XML report.", "Batch: write a JUnit report.", 1)
    assert planted != text
    doc.write_text(planted)
    res = _check(doc)
    assert res.returncode == 1
    assert "-  --junit PATH                    Batch: write a JUnit report." in res.stdout
    assert "+  --junit PATH                    Batch: write a JUnit XML report." in res.stdout
    assert "stale" in res.stderr
    # the generator puts it right, and leaves the hand-written text outside the markers alone
    subprocess.run([sys.executable, str(SCRIPT), "--doc", str(doc)], check=True, capture_output=True, timeout=120)
    assert doc.read_text() == text


def test_a_changed_option_help_makes_the_page_stale(monkeypatch):
    mod = _script_module()
    text = (ROOT / "docs" / "cli.md").read_text()
    assert mod.render(text) == text
    opt = next(p for p in main.commands["verify"].params if p.name == "steps")
    monkeypatch.setattr(opt, "help", "Time steps of the random inputs.")
    assert "Time steps of the random inputs." in mod.render(text)
    assert mod.render(text) != text


def test_a_new_command_gets_its_section(monkeypatch):
    import click

    mod = _script_module()

    @click.command("explain")
    def explain():
        """Say what a file is."""

    monkeypatch.setitem(main.commands, "explain", explain)
    out = mod.render((ROOT / "docs" / "cli.md").read_text())
    assert "\n## gruconv explain\n" in out and "$ gruconv explain --help\nUsage: gruconv explain" in out


def test_the_markers_are_required(tmp_path):
    doc = tmp_path / "cli.md"
    doc.write_text("# no markers\n")
    res = _check(doc)
    assert res.returncode != 0 and "expected one" in res.stderr


# --------------------------------------------------------------------------- the README's examples

#: Output formats written without TensorFlow (the streaming Keras writers, safetensors, the ONNX stack writer).
_QUICK_FORMATS = {"keras", "keras-weights", "h5-weights", "torch", "onnx"}
_QUICK_SUFFIXES = {".keras", ".h5", ".safetensors", ".onnx"}


def _needs_tensorflow(argv: list[str]) -> bool:
    """Examples that start TensorFlow (tens of seconds each on 2 shared cores) run in the slow tier: ``verify``,
    ``--verify``/``--check-load``, a graph input, and any output not known to be written without it (a
    SavedModel directory, an edge format added later)."""
    if argv[0] == "inspect":
        return False
    if argv[0] != "convert" or {"--verify", "--check-load"} & set(argv):
        return True
    if any(a.startswith("fixtures/graphs") for a in argv):
        return True
    if "--format" in argv:
        return argv[argv.index("--format") + 1] not in _QUICK_FORMATS
    return "--out-dir" not in argv and Path(argv[2]).suffix not in _QUICK_SUFFIXES


def fenced_blocks(text: str) -> list[str]:
    """The bodies of the plain fenced blocks (an opening line of exactly ```), in order; ```python and other
    tagged blocks are passed over whole, so their closing fence never opens a block."""
    out, body, plain = [], None, False
    for line in text.splitlines():
        if line.startswith("```"):
            if body is None:
                body, plain = [], line.strip() == "```"
            else:
                if plain:
                    out.append("\n".join(body))
                body = None
        elif body is not None:
            body.append(line)
    return out


def readme_examples(text: str) -> list[tuple[list[str], list[str]]]:
    """``(argv after "gruconv", expected output lines)`` for every ``$ gruconv ...`` line of a plain fenced
    block (a line ``...`` in the output stands for any lines)."""
    out = []
    for block in fenced_blocks(text):
        cur = None
        for line in block.splitlines():
            if line.startswith("$ gruconv "):
                cur = (shlex.split(line[len("$ gruconv "):]), [])
                out.append(cur)
            elif line.startswith("$ "):
                cur = None
            elif cur is not None:
                cur[1].append(line)
    for _, lines in out:
        while lines and not lines[-1].strip():
            lines.pop()  # a blank line between two examples of one block
    return out


_SCI = re.compile(r"\d\.\d\de[-+]\d\d")
_MASKS = [(re.compile(r"\(\d+\.\d+s\)"), "(T s)"), (re.compile(r"measured in [\d.]+ s"), "measured in T s"),
          (re.compile(r"^time\s+[\d.]+ s$"), "time T"), (re.compile(r"^throughput\s+[\d.]+ models/s$"), "throughput T")]


def _normal(line: str) -> tuple[str, list[float]]:
    for pat, rep in _MASKS:
        line = pat.sub(rep, line)
    # a table's columns are padded to its widest value (batch's summary: "throughput 34.04" is one character wider
    # than "0.82" and shifts every row): runs of spaces inside a line compare as one
    line = re.sub(r"(?<=\S)  +", " ", line)
    return _SCI.sub("N", line), [float(x) for x in _SCI.findall(line)]


def _same(expected: list[str], got: list[str], unordered: bool) -> str | None:
    """``None`` if the output matches the README's lines (``...`` matching any run of lines), else why not."""
    e, g = [_normal(x) for x in expected], [_normal(x) for x in got]
    if unordered:
        e, g = sorted(e), sorted(g)
    pattern = "".join(".*?" if x[0].strip() == "..." else re.escape(x[0] + "\n") for x in e)
    if not re.fullmatch(pattern, "".join(x[0] + "\n" for x in g), flags=re.S):
        return "lines differ:\n" + "\n".join(got)
    pairs = {x[0]: x[1] for x in g}
    for line, a in e:
        b = pairs.get(line, a)
        for x, y in zip(a, b):
            if (x == 0) != (y == 0) or (x and not 0.25 <= y / x <= 4):
                return f"{line}: README {a}, now {b}"
    return None


def _run_examples(tmp_path, monkeypatch, examples):
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    monkeypatch.chdir(tmp_path)
    for argv, expected in examples:
        res = CliRunner().invoke(main, argv, prog_name="gruconv")
        assert res.exit_code == 0 and res.exception is None or isinstance(res.exception, SystemExit), \
            (argv, res.exit_code, res.output)
        assert res.exit_code == 0, (argv, res.output)
        why = _same(expected, res.output.rstrip("\n").splitlines(), unordered="--out-dir" in argv)
        assert why is None, f"README example `gruconv {shlex.join(argv)}`: {why}"


def test_readme_has_the_quickstart_and_examples():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
    ran = {a[0] if a[0] != "convert" or "--out-dir" not in a else "batch" for a, _ in readme_examples(text)}
    assert {"convert", "inspect", "verify", "batch"} <= ran
    suffixes = {Path(a[2]).suffix for a, _ in readme_examples(text) if a[0] == "convert" and len(a) > 2}
    assert {".keras", ".h5", ".safetensors", ".onnx", ""} <= suffixes  # "" : the SavedModel directory
    assert len(text.splitlines()) <= 220


def test_readme_examples_without_tensorflow_are_real_output(tmp_path, monkeypatch):
    examples = [e for e in readme_examples(README.read_text()) if not _needs_tensorflow(e[0])]
    assert len(examples) >= 5
    _run_examples(tmp_path, monkeypatch, examples)


@pytest.mark.slow
def test_readme_examples_are_real_output(tmp_path, monkeypatch):
    # Keras's interactive logging on, as in a process that imported Keras before gruconv (a test worker, a
    # notebook): Keras's own prints must not reach the output either way (CI at 229eab3: the TFLite converter's
    # export printed "Saved artifact at ..." into the .tflite example)
    import keras

    was = keras.utils.is_interactive_logging_enabled()
    keras.utils.enable_interactive_logging()
    try:
        _run_examples(tmp_path, monkeypatch, readme_examples(README.read_text()))
    finally:
        if not was:
            keras.utils.disable_interactive_logging()  # the worker's state as it was, for the tests after


def test_examples_that_start_tensorflow_are_told_apart():
    quick = [["inspect", "a.h5"], ["convert", "a.h5", "a.keras"], ["convert", "c", "e.safetensors"],
             ["convert", "a.h5", "w.h5"], ["convert", "a*.h5", "--out-dir", "o", "--jobs", "2"],
             ["convert", "w.h5", "d", "--format", "onnx"]]
    slow = [["verify", "a.h5", "a.keras"], ["convert", "a.h5", "a.keras", "--verify"], ["convert", "g", "cpu_model"],
            ["convert", "fixtures/graphs/x", "m.onnx"], ["convert", "a.h5", "m.tflite"],
            ["convert", "a.h5", "d", "--format", "saved-model"]]
    assert [_needs_tensorflow(a) for a in quick + slow] == [False] * len(quick) + [True] * len(slow)


def test_example_matcher_catches_a_changed_line():
    out = ["wrote a.keras", "  cu_dnngru: sequence   9.28e-08  1.28e-07  ok", "note: floors measured in 0.67 s (x)"]
    assert _same(out, ["wrote a.keras", "  cu_dnngru: sequence   9.30e-08  1.20e-07  ok",
                       "note: floors measured in 1.2 s (x)"], False) is None
    assert _same(out, ["wrote b.keras", *out[1:]], False) is not None
    assert _same(out, [out[0], "  cu_dnngru: sequence   9.28e-05  1.28e-07  ok", out[2]], False) is not None
    assert _same(out, [out[0], "  cu_dnngru: sequence   9.28e-08  1.28e-07  FAIL", out[2]], False) is not None
    assert _same(out, out[:2], False) is not None
    assert _same(["wrote a.keras", "...", "note: floors measured in 1 s (x)"], out, False) is None
    assert _same(["...", "  cu_dnngru: sequence   9.28e-08  1.28e-07  ok", "..."], out, False) is None
    assert _same(["...", "wrote b.keras", "..."], out, False) is not None


def test_fenced_blocks_pass_over_tagged_blocks():
    text = "```python\nx = 1\n```\nprose\n```\n$ gruconv inspect a.h5\na.h5: x\n```\n```yaml\nb: 1\n```\n"
    assert fenced_blocks(text) == ["$ gruconv inspect a.h5\na.h5: x"]
    assert readme_examples(text) == [(["inspect", "a.h5"], ["a.h5: x"])]


# --------------------------------------------------------------------------- links


def _anchor(title: str) -> str:
    """GitHub's heading anchor: markup dropped, lower case, punctuation but ``-``/``_`` dropped, spaces to ``-``."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    title = title.replace("`", "").replace("*", "")
    keep = "".join(c for c in title.strip().lower() if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def _anchors(text: str) -> set[str]:
    out, seen = set(), {}
    for line in _outside_code(text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = _anchor(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def _outside_code(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def broken_links(root: Path, pages: list[Path]) -> list[str]:
    """``page: target`` for every relative link (outside code and comments) whose file or anchor is missing."""
    out = []
    for page in pages:
        text = _outside_code(page.read_text())
        text = re.sub(r"`[^`\n]*`", "", text)
        for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not checked (no network here)
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                out.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in _anchors(dest.read_text()):
                out.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return out


def test_every_link_in_the_readme_and_docs_resolves():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    assert broken_links(ROOT, pages) == []


def test_every_docs_page_is_named_in_the_readme():
    """A newcomer finds every page from the README (its table, or a mention outside comments)."""
    text = _outside_code(README.read_text())
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in text] == []


def test_the_link_checker_finds_planted_broken_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## The `x` option, in full\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok anchor](docs/a.md#the-x-option-in-full) [web](https://example.com/x)\n"
        "[gone](docs/b.md) [bad anchor](docs/a.md#nope) [self](#top)\n"
        "`[in code](docs/c.md)`\n<!-- [in a comment](docs/d.md) -->\n```\n[in a block](docs/e.md)\n```\n# Top\n")
    assert broken_links(tmp_path, [tmp_path / "README.md"]) == [
        "README.md: docs/b.md (no such file)", "README.md: docs/a.md#nope (no such heading)"]
