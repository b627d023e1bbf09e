"""The HTML verify report (``gruconv verify --html``, ``gruconv convert --out-dir --verify --html``):
pages parsed with the stdlib's :mod:`html.parser` from real verify runs (a correct conversion and one
with a planted error), the per-step errors they plot, escaping of names from the model, and the
batch index and JUnit links."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv import api
from gruconv.cli import main
from gruconv.report_html import page_name, verify_page
from gruconv.options import Bounds
from gruconv.verify.verdicts import PER_STEP_POINTS, compare, per_step_errors

KERAS = FIXTURES / "keras"


class Page(HTMLParser):
    """What a test looks at in a page: each check section (its heading text and the point count of
    its error polyline), every tag name, every src/href value, links, and all text."""

    def __init__(self, text: str):
        super().__init__()
        self.checks: list = []
        self.tags: list = []
        self.urls: list = []
        self.links: list = []
        self.text: list = []
        self._in_h3 = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        for k in ("src", "href", "xlink:href", "action"):
            if k in a:
                self.urls.append(a[k])
        if tag == "a":
            self.links.append(a.get("href"))
        if tag == "div" and a.get("class") == "check":
            self.checks.append({"title": "", "points": None})
        if tag == "h3" and self.checks:
            self._in_h3 = True
        if tag == "polyline" and self.checks and a.get("class") == "errors":
            self.checks[-1]["points"] = len(a["points"].split())

    def handle_endtag(self, tag):
        if tag == "h3":
            self._in_h3 = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_h3:
            self.checks[-1]["title"] += data


def assert_self_contained(page: Page):
    assert "script" not in page.tags and "iframe" not in page.tags and "link" not in page.tags
    assert not any("http" in u or u.startswith("//") for u in page.urls), page.urls


def steps_of(check: dict) -> int:
    """The points a check's curve must have: its time steps (axis 1 of a batch-major sequence), else one."""
    shape = check["shape"]
    return shape[1] if len(shape) >= 3 else 1


def verify_html(tmp_path, *args) -> tuple:
    html, js = tmp_path / "r.html", tmp_path / "r.json"
    res = CliRunner().invoke(main, ["verify", *map(str, args), "--reference", "oracle", "--html", str(html),
                                    "--json", str(js)])
    return res, Page(html.read_text(encoding="utf-8")), json.loads(js.read_text())


def test_page_has_every_check_curve_and_verdict(tmp_path):
    res, page, rep = verify_html(tmp_path, KERAS / "sequential.h5", "--steps", "13")
    assert res.exit_code == 0, res.output
    assert_self_contained(page)
    # per layer, the Sequential end to end, and the original run by tf_keras (issue 40)
    assert len(page.checks) == len(rep["checks"]) == 4
    for sec, c in zip(page.checks, rep["checks"]):
        assert c["name"] in sec["title"] and "PASS" in sec["title"]
        assert sec["points"] == len(c["per_step"]) == steps_of(c)
        assert max(c["per_step"]) == pytest.approx(c["max_abs"], rel=5e-3)
    assert [len(c["per_step"]) for c in rep["checks"]] == [13, 1, 1, 1]  # sequence; last output; model output x2
    text = " ".join(page.text)
    assert "PASS" in text and "oracle" in text and "decided by" in text and "tensorflow" in text


def _planted(tmp_path) -> Path:
    """sequential.h5 converted, then its second GRU's recurrent bias dropped (a wrong conversion)."""
    from gruconv.keras3.runtime import keras

    good = tmp_path / "good.keras"
    api.convert(KERAS / "sequential.h5", good)
    model = keras().saving.load_model(good)
    layer = model.get_layer("cu_dnngru_1")
    k, rk, b = layer.get_weights()
    layer.set_weights([k, rk, np.stack([b[0], np.zeros_like(b[1])])])
    bad = tmp_path / "planted.keras"
    model.save(bad)
    return bad


def test_planted_error_page_shows_the_failing_check(tmp_path):
    res, page, rep = verify_html(tmp_path, KERAS / "sequential.h5", _planted(tmp_path), "--steps", "9")
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output   # not a crash
    assert_self_contained(page)
    verdicts = {c["name"]: c["passed"] for c in rep["checks"]}
    assert verdicts["cu_dnngru: sequence"] and not verdicts["cu_dnngru_1: last output"]
    for sec, c in zip(page.checks, rep["checks"]):
        assert sec["points"] == steps_of(c) and ("PASS" if c["passed"] else "FAIL") in sec["title"]
    text = " ".join(page.text)
    assert "over every bound" in text and "FAIL" in text   # the failing check's reason


def test_model_strings_are_escaped(tmp_path):
    """A file name and a layer name (user input) holding markup: shown as text, never as markup."""
    evil = 'm<script>alert("x")&amp;"q.h5'   # no "/": a file name
    src = tmp_path / evil
    shutil.copy(KERAS / "sequential.h5", src)
    res, page, rep = verify_html(tmp_path, src, "--steps", "4")
    assert res.exit_code == 0, res.output
    assert_self_contained(page)
    assert evil in "".join(page.text)   # the name read back as text, exactly
    layer = '<script>x("1")</script> & "gru"'
    rep["checks"][0]["name"] = layer
    rep["notes"].append(layer)
    page2 = Page(verify_page(rep))
    assert_self_contained(page2)
    assert layer in page2.checks[0]["title"] and layer in "".join(page2.text)


def test_per_step_errors_keep_every_step_and_bound_long_runs():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(3, 50, 4))
    got = ref.copy()
    got[1, 7, 2] += 1e-3
    got[2, 40, 0] = np.nan
    c = compare("x", got, ref, None, Bounds(1e-5), "float32")
    assert len(c.per_step) == 50 and c.per_step_stride == 1
    assert c.per_step[7] == pytest.approx(1e-3, rel=1e-2) and c.per_step[40] == float("inf")
    assert max(v for v in c.per_step if v != float("inf")) == pytest.approx(1e-3, rel=1e-2)
    assert not c.passed and c.max_abs == float("inf")   # the verdict is compare's, unchanged
    assert compare("s", ref[:, 0], ref[:, 0], None, Bounds(1e-5), "float32").per_step == [0.0]   # no time axis
    long = np.zeros((1, PER_STEP_POINTS * 2 + 5, 1))
    long[0, -1, 0] = 2.0
    errs, stride = per_step_errors(long)
    assert stride == 3 and len(errs) <= PER_STEP_POINTS and errs[-1] == 2.0 and max(errs[:-1]) == 0.0


def test_batch_index_lists_every_model_and_junit_links_pages(tmp_path):
    src = tmp_path / "models"
    src.mkdir()
    for name in ("sequential.h5", "plain_gru.h5"):
        shutil.copy(KERAS / name, src / name)
    junk = src / "notes.h5"
    junk.write_bytes(b"not a model")
    html, junit = tmp_path / "html", tmp_path / "junit.xml"
    res = CliRunner().invoke(main, ["convert", str(src / "sequential.h5"), str(src / "plain_gru.h5"), str(junk),
                                    "--out-dir", str(tmp_path / "out"), "--verify", "--jobs", "1", "--keep-going",
                                    "--junit", str(junit), "--html", str(html)])
    assert res.exit_code == 3 and isinstance(res.exception, SystemExit), res.output   # the junk input failed
    index = Page((html / "index.html").read_text(encoding="utf-8"))
    assert_self_contained(index)
    rows = " ".join(index.text)
    for name in ("sequential.h5", "plain_gru.h5", "notes.h5"):
        assert name in rows
    assert rows.count("PASS") == 2 and "failed" in rows
    assert len(index.links) == 3 and all((html / link).is_file() for link in index.links)
    seq = Page((html / page_name(str(src / "sequential.h5"))).read_text(encoding="utf-8"))
    assert_self_contained(seq)
    assert len(seq.checks) == 4 and all(s["points"] for s in seq.checks) and "index.html" in seq.links
    cases = ET.parse(junit).getroot().findall("testcase")
    assert len(cases) == 3
    for case in cases:
        link = case.find("properties/property[@name='html']").get("value")
        assert (junit.parent / link).is_file() and f"html report: {link}" in case.find("system-out").text
        assert Path(link).name == page_name(case.get("name"))
