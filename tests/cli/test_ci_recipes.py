"""The CI recipes of docs/ci.md run as written: the ``gruconv`` lines of the GitHub Actions matrix job
(``run:``) and of the GitLab ``parallel`` job (``script:``) are read from the page's fenced yaml
blocks and run on fixture models for shards 1/2 and 2/2, with the matrix / parallel variables set
as each CI sets them and ``gruconv`` as this interpreter's ``python -m gruconv``.  Together the
shards convert every model once, write their JUnit files and HTML indexes; a second run with the
cached output directories (``--skip-existing``) converts nothing."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ci.md"
MODELS = {"sequential.h5": "sequential.h5", "sub/bidir_concat.h5": "bidir_concat.h5",
          "sub/return_state.h5": "return_state.h5"}


def yaml_blocks(text: str) -> list:
    return re.findall(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M)


def github_commands(block: str) -> list:
    """The single-line ``run:`` steps of a workflow that call gruconv (setup steps are not run here)."""
    runs = [m.group(1).strip() for m in re.finditer(r"^\s*(?:-\s+)?run:\s*(\S.*)$", block, flags=re.M)]
    return [r for r in runs if r.startswith("gruconv ")]


def gitlab_commands(block: str) -> list:
    """The items of the job's ``script:`` list that call gruconv."""
    out, indent = [], None
    for line in block.splitlines():
        m = re.match(r"^(\s*)script:\s*$", line)
        if m:
            indent = len(m.group(1))
            continue
        if indent is not None:
            item = re.match(r"^(\s*)-\s+(.*)$", line)
            if item and len(item.group(1)) > indent:
                out.append(item.group(2).strip())
            elif line.strip():
                indent = None
    return [c for c in out if c.startswith("gruconv ")]


def test_doc_has_both_recipes():
    gh, gl = yaml_blocks(DOC.read_text())[:2]
    for cmds in (github_commands(gh), gitlab_commands(gl)):
        assert len(cmds) == 1
        for opt in ("--shard", "--skip-existing", "--junit", "--html", "--verify"):
            assert opt in cmds[0]


def run_shard(cmd: str, cwd: Path, k: int, n: int, ci: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    if ci == "github":   # Actions substitutes its expressions into the text before the shell runs it
        cmd = cmd.replace("${{ matrix.shard }}", str(k)).replace("${{ strategy.job-total }}", str(n))
        assert "${{" not in cmd
    else:                # GitLab sets variables; the shell expands them
        env.update(CI_NODE_INDEX=str(k), CI_NODE_TOTAL=str(n))
    cmd = re.sub(r"^gruconv ", shlex.quote(sys.executable) + " -m gruconv ", cmd)
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow   # about 110 s each on 2 cores: 4 runs, 2 of them spawning workers that import TensorFlow
@pytest.mark.parametrize("ci", ["github", "gitlab"])
def test_recipe_runs_sharded_and_cached(ci, tmp_path):
    gh, gl = yaml_blocks(DOC.read_text())[:2]
    (cmd,) = github_commands(gh) if ci == "github" else gitlab_commands(gl)
    for rel, name in MODELS.items():
        (tmp_path / "models" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / "keras" / name, tmp_path / "models" / rel)
    n = 2
    seen = []
    for k in range(1, n + 1):
        p = run_shard(cmd, tmp_path, k, n, ci)
        assert p.returncode == 0, p.stdout + p.stderr
        junit = tmp_path / "reports" / f"junit-{k}.xml"
        suite = ET.parse(junit).getroot()
        names = [c.get("name") for c in suite.findall("testcase")]
        assert suite.get("failures") == "0" and suite.get("skipped") == "0"
        seen += names
        index = tmp_path / "reports" / f"html-{k}" / "index.html"
        assert index.is_file()
        for case in suite.findall("testcase"):
            assert (junit.parent / case.find("properties/property[@name='html']").get("value")).is_file()
        assert list((tmp_path / "converted" / f"shard-{k}").rglob("*.keras"))
    assert sorted(seen) == sorted(f"models/{rel}" for rel in MODELS)   # every model once, across shards
    for k in range(1, n + 1):   # the cached output directories: nothing to convert again
        p = run_shard(cmd, tmp_path, k, n, ci)
        assert p.returncode == 0, p.stdout + p.stderr
        suite = ET.parse(tmp_path / "reports" / f"junit-{k}.xml").getroot()
        assert int(suite.get("tests")) > 0 and suite.get("skipped") == suite.get("tests")
        assert "skipped" in (tmp_path / "reports" / f"html-{k}" / "index.html").read_text()
