"""The verify report as a page people look at: one self-contained HTML file per model (inline CSS,
inline SVG, no script, no network), and the batch index that lists every model's verdict.

Why a page: the text table (:func:`gruconv.report.verify_text`) gives each check's max error, but
not *where* in the sequence it arises.  Rounding grows with the sequence (float32 error
accumulating through the recurrence, within the measured floor); a wrong gate or a swapped bias is
wrong from the first step.  Each check's curve (max |diff| per time step over batch and features:
``Check.per_step``, :func:`gruconv.verify.verdicts.per_step_errors`) is drawn on a log axis against
that check's floor, k x floor, rtol x max|ref| and tolerance lines, so the two read differently.

Everything shown comes from the report's JSON form (``VerifyReport.to_json``, a batch record's
``verification``), so a page can be rendered in the batch driver's process from what workers
returned.  Every string that comes from a model (layer names are user input, file names too) is
escaped with :func:`html.escape`.  This module renders text only: no Keras, no NumPy, no file
writing (the CLI and :mod:`gruconv.batch` place the files, atomically).
"""

from __future__ import annotations

import hashlib
import html
import math
import re
from typing import Optional

from ._version import __version__
from .report import bound_text, kernels_text

#: The plot's size in CSS pixels, and its margins (left for the decade labels, bottom for steps)
_W, _H, _ML, _MR, _MT, _MB = 720, 200, 52, 150, 10, 34

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:900px;
color:#1d2330;padding:0 16px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:700;color:#fff}
.pass{background:#1a7f37}.fail{background:#cf222e}.info{background:#6e7781}.skip{background:#9a6700}
table{border-collapse:collapse;margin:4px 0 8px}td,th{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{color:#57606a;font-weight:600}
.check{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;margin:12px 0}
.check h3{font-size:14.5px;margin:0 0 6px;word-break:break-all}
.reason{color:#cf222e}.muted{color:#57606a}
svg text{font:11px system-ui,sans-serif;fill:#57606a}
"""

#: Line styles of the bounds: (label, stroke, dash)
_LINES = {"tolerance": ("tolerance", "#8250df", "6 3"), "rtol": ("rtol x max|ref|", "#bf8700", "2 3"),
          "floor": ("k x floor", "#0969da", "6 3"), "measured floor": ("floor", "#0969da", "1 3")}


def esc(value) -> str:
    """Any value as HTML text (quotes included: the same text goes into attributes)."""
    return html.escape(str(value), quote=True)


def page_name(input: str) -> str:
    """The file name of one model's page in a batch's HTML directory: the input's name made safe
    (letters, digits, ``._-``), and 8 hex digits of its full path, so inputs of different shards and
    directories never share a page and a rerun writes the same name."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", str(input).rstrip("/").rsplit("/", 1)[-1])[:60].strip("._") or "model"
    digest = hashlib.sha1(str(input).encode("utf-8", "backslashreplace")).hexdigest()[:8]
    return f"{base}-{digest}.html"


def _num(v, spec: str = ".2e") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return format(v, spec)


def _verdict_span(passed: Optional[bool], counts: bool = True, label: Optional[str] = None) -> str:
    if label is None:
        label = ("PASS" if passed else "FAIL") if counts else ("(info) within" if passed else "(info) over")
    cls = "info" if not counts else ("pass" if passed else "fail")
    return f'<span class="verdict {cls}">{esc(label)}</span>'


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"generator\" content=\"gruconv {esc(__version__)}\"><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")


# --------------------------------------------------------------------------- the error plot

def _bound_lines(c: dict) -> list:
    """[(key, value)] of the horizontal lines of a check's plot: its limits and measured floor."""
    limits = c.get("limits") or {}
    out = [(k, limits.get(k)) for k in ("tolerance", "rtol", "floor")]
    if not limits:
        out = [("tolerance", c.get("tolerance"))]
    out.append(("measured floor", c.get("floor")))
    return [(k, float(v)) for k, v in out if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]


def error_svg(c: dict) -> str:
    """One check's curve: max |diff| per time step (``per_step``) on a log y axis, with the check's
    bounds as labelled horizontal lines.  A zero error sits on the bottom edge, an infinite one
    (NaN/Inf) on the top edge, drawn red."""
    errs = list(c.get("per_step") or [])
    if not errs:
        return '<p class="muted">no per-step errors (the outputs could not be compared step by step)</p>'
    stride = int(c.get("per_step_stride") or 1)
    lines = _bound_lines(c)
    finite = [e for e in errs if math.isfinite(e) and e > 0] + [v for _, v in lines]
    lo = math.floor(math.log10(min(finite))) if finite else -12
    hi = math.ceil(math.log10(max(finite))) if finite else 0
    lo, hi = min(lo, hi - 1), max(hi, lo + 1)
    if hi - lo > 14:   # a wide range (an error of 1 against a floor of 1e-12): keep the error in view
        lo = hi - 14
    pw, ph = _W - _ML - _MR, _H - _MT - _MB

    def y(v: float) -> float:
        if not math.isfinite(v):
            return _MT
        if v <= 0:
            return _MT + ph
        t = (math.log10(v) - lo) / (hi - lo)
        return _MT + ph * (1 - min(1.0, max(0.0, t)))

    n = len(errs)

    def x(i: int) -> float:
        return _ML + (pw * i / (n - 1) if n > 1 else pw / 2)

    parts = [f'<svg width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img" '
             f'aria-label="max abs error per time step, log scale">',
             f'<rect x="{_ML}" y="{_MT}" width="{pw}" height="{ph}" fill="#f6f8fa" stroke="#d0d7de"/>']
    step = 1 if hi - lo <= 8 else 2
    for d in range(lo, hi + 1, step):
        yy = y(10.0 ** d)
        parts.append(f'<line x1="{_ML}" x2="{_ML + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eaeef2"/>')
        parts.append(f'<text x="{_ML - 6}" y="{yy + 4:.1f}" text-anchor="end">1e{d}</text>')
    last = (n - 1) * stride
    ticks = sorted({0, (n - 1) // 4, (n - 1) // 2, 3 * (n - 1) // 4, n - 1}) if n > 1 else []
    for i in ticks:
        anchor = "start" if i == 0 else "end" if i == n - 1 else "middle"
        parts.append(f'<text x="{x(i):.1f}" y="{_MT + ph + 14}" text-anchor="{anchor}">{i * stride}</text>')
    parts.append(f'<text x="{_ML + pw / 2:.1f}" y="{_H - 3}" text-anchor="middle">'
                 f'{"time step" if n > 1 else "final value (no time axis)"}</text>')
    label_ys: list = []
    for key, v in lines:
        label, color, dash = _LINES[key]
        yy = y(v)
        parts.append(f'<line x1="{_ML}" x2="{_ML + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="{color}" '
                     f'stroke-width="1.3" stroke-dasharray="{dash}"/>')
        ly = yy + 4
        while any(abs(ly - o) < 12 for o in label_ys):   # labels of close lines stacked, not overlaid
            ly += 12
        label_ys.append(ly)
        parts.append(f'<text x="{_ML + pw + 6}" y="{ly:.1f}" style="fill:{color}">{esc(label)} {v:.1e}</text>')
    ok = c.get("passed", False)
    color = "#1a7f37" if ok else "#cf222e"
    pts = " ".join(f"{x(i):.1f},{y(e):.1f}" for i, e in enumerate(errs))
    parts.append(f'<polyline class="errors" data-steps="{n}" points="{pts}" fill="none" stroke="{color}" '
                 f'stroke-width="1.8"/>')
    if n <= 64:
        for i, e in enumerate(errs):
            dot = "#cf222e" if not math.isfinite(e) else color
            parts.append(f'<circle cx="{x(i):.1f}" cy="{y(e):.1f}" r="2.6" fill="{dot}"/>')
    parts.append("</svg>")
    caption = (f"max |converted - reference| per time step over batch and features, steps 0-{last}"
               + (f", each point the max of {stride} steps" if stride > 1 else "") if n > 1 else
               "max |converted - reference| (this output has no time axis: one point)")
    return "".join(parts) + f'<div class="muted">{esc(caption)}; log scale</div>'


# --------------------------------------------------------------------------- one model's page

def _check_section(c: dict) -> str:
    counts = c.get("counts", True)
    rows = [("device", c.get("device", "cpu")), ("max abs", _num(c.get("max_abs"))),
            ("max rel", _num(c.get("max_rel"))), ("ref vs float64", _num(c.get("reference_error"))),
            ("floor", _num(c.get("floor"))), ("decided by", bound_text(c)),
            ("shape", "x".join(str(d) for d in c.get("shape") or []))]
    extra = []
    if c.get("reference_algorithm"):
        extra.append(f"compared with cuDNN's {c['reference_algorithm']} algorithm")
    if c.get("by_algorithm"):
        extra.append("max abs by cuDNN algorithm: " + ", ".join(f"{a} {_num(v)}" for a, v in c["by_algorithm"].items()))
    if c.get("nonfinite"):
        extra.append(f"{c['nonfinite']} NaN/Inf value(s)")
    table = ("<tr>" + "".join(f"<th>{esc(k)}</th>" for k, _ in rows) + "</tr><tr>"
             + "".join(f'<td class="mono">{esc(v)}</td>' for _, v in rows) + "</tr>")
    if extra:
        table += f'<tr><td colspan="{len(rows)}" class="muted">{esc("; ".join(extra))}</td></tr>'
    reason = f'<p class="reason">{esc(c["reason"])}</p>' if c.get("reason") and not c.get("passed") else ""
    return (f'<div class="check"><h3>{_verdict_span(c.get("passed"), counts)} {esc(c.get("name", "?"))}</h3>'
            f"{reason}{error_svg(c)}<table>{table}</table></div>")


def verify_body(rep: dict) -> str:
    """The page's body for a verify report (``VerifyReport.to_json()``)."""
    out = [f"<h1>{_verdict_span(rep.get('passed'))} {esc(rep.get('input', '?'))}</h1>"]
    if rep.get("nothing_to_convert"):
        out.append("<p>nothing to convert (no cuDNN RNN: CuDNNGRU/CuDNNLSTM layer or cudnn_rnn stack); "
                   "nothing to verify</p>")
    checks = rep.get("checks") or []
    counted = [c for c in checks if c.get("counts", True)]
    env = rep.get("environment") or {}
    conv = "; ".join(env["converted_by"]) if env.get("converted_by") else \
        f"Keras {env.get('keras', '?')} on {env.get('backend', '?')}"
    rule = (f"max abs within tolerance {rep.get('tolerance', 0):g}, or rtol {rep.get('rtol', 0):g} x max|ref|, "
            f"or {rep.get('floor_k', 0):g} x the measured float32 floor")
    rows = [("converted", rep.get("converted") or "in memory (what convert writes)"),
            ("reference", f"{rep.get('reference', '?')} ({rep.get('reference_reason', '')})"),
            ("reference math", rep.get("math_mode", "")), ("converted model", conv),
            ("inputs", f"batch {rep.get('batch')} x steps {rep.get('steps')}, seed {rep.get('seed')}"),
            ("rule", rule), ("checks", f"{sum(bool(c.get('passed')) for c in counted)}/{len(counted)} within bounds")]
    for key, label in (("gpu", "GPU"), ("cudnn_version", "cuDNN"), ("cuda_runtime_version", "CUDA runtime"),
                       ("driver_version", "driver"), ("cudnn_algorithms", "cuDNN algorithms")):
        if env.get(key):
            val = env[key]
            rows.append((label, ", ".join(f"{a}: {w}" for a, w in val.items()) if isinstance(val, dict) else val))
    out.append("<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows) + "</table>")
    devices = rep.get("devices") or []
    if devices:
        out.append("<h2>Devices</h2><table><tr><th>device</th><th>math</th><th>ran</th><th>why</th><th>kernels</th></tr>")
        out.extend(f"<tr><td>{esc(d.get('device'))}</td><td>{esc(d.get('math', ''))}</td>"
                   f"<td>{'yes' if d.get('ran') else 'no'}</td><td>{esc(d.get('reason', ''))}</td>"
                   f"<td class=\"mono\">{esc(kernels_text(d)) if d.get('ran') else '-'}</td></tr>" for d in devices)
        out.append("</table>")
    if checks:
        out.append("<h2>Checks</h2>")
        out.extend(_check_section(c) for c in checks)
    notes = rep.get("notes") or []
    if notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return "\n".join(out)


def verify_page(rep: dict, *, back: Optional[str] = None) -> str:
    """A whole HTML page for one verify report; ``back``: a link to the batch index."""
    link = f'<p><a href="{esc(back)}">all models</a></p>' if back else ""
    title = f"gruconv verify: {'PASS' if rep.get('passed') else 'FAIL'} {rep.get('input', '')}"
    return _page(title, link + verify_body(rep) + _footer())


def _footer() -> str:
    return f'<p class="muted">gruconv {esc(__version__)} verify report</p>'


# --------------------------------------------------------------------------- batch pages

_STATUS_CLASS = {"ok": "pass", "nothing-to-convert": "info", "skipped": "skip", "parity-failed": "fail",
                 "failed": "fail"}


def verdict_of(record: dict) -> str:
    """What the index says of one batch record: the parity verdict when it was verified, else its status."""
    v = record.get("verification")
    if v is not None and not v.get("nothing_to_convert"):
        return "PASS" if v.get("passed") else "FAIL"
    return {"ok": "converted", "nothing-to-convert": "nothing to convert", "skipped": "skipped",
            "parity-failed": "FAIL", "failed": "failed"}.get(record.get("status"), str(record.get("status")))


def record_page(record: dict, *, back: str = "index.html") -> str:
    """One batch input's page: its verify report, or (not verified, skipped, failed) its status."""
    v = record.get("verification")
    if v is not None:
        return verify_page(v, back=back)
    status = record.get("status", "?")
    rows = [("status", status), ("output", ", ".join(record.get("outputs") or []) or record.get("output") or "-")]
    if record.get("reason"):
        rows.append(("reason", record["reason"]))
    if record.get("error"):
        rows.append(("error", record["error"]))
    rows.extend(("warning", w) for w in record.get("warnings") or [])
    body = (f'<p><a href="{esc(back)}">all models</a></p><h1><span class="verdict '
            f'{_STATUS_CLASS.get(status, "info")}">{esc(verdict_of(record))}</span> {esc(record.get("input", "?"))}</h1>'
            "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(x)}</td></tr>" for k, x in rows) + "</table>")
    return _page(f"gruconv: {status} {record.get('input', '')}", body + _footer())


def index_page(records: list, pages: dict, *, title: str = "gruconv batch") -> str:
    """The batch index: every input with its verdict, worst error and a link to its page.
    ``records``: batch records' JSON; ``pages``: {input: page file name}."""
    rows = []
    for r in records:
        verdict = verdict_of(r)
        cls = "pass" if verdict == "PASS" else "fail" if verdict in ("FAIL", "failed") else \
            _STATUS_CLASS.get(r.get("status"), "info")
        v = r.get("verification") or {}
        counted = [c for c in v.get("checks") or [] if c.get("counts", True)]
        worst = _num(max((c.get("max_abs", 0.0) for c in counted), default=None))
        checks = f"{sum(bool(c.get('passed')) for c in counted)}/{len(counted)}" if counted else "-"
        page = pages.get(r.get("input"))
        name = esc(r.get("input", "?"))
        cell = f'<a href="{esc(page)}">{name}</a>' if page else name
        rows.append(f'<tr><td><span class="verdict {cls}">{esc(verdict)}</span></td><td class="mono">{cell}</td>'
                    f'<td class="mono">{checks}</td><td class="mono">{worst}</td></tr>')
    counts: dict = {}
    for r in records:
        counts[verdict_of(r)] = counts.get(verdict_of(r), 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    body = (f"<h1>{esc(title)}</h1><p>{len(records)} model(s): {esc(summary or 'none')}</p>"
            "<table><tr><th>verdict</th><th>model</th><th>checks</th><th>max abs</th></tr>"
            + "".join(rows) + "</table>" + _footer())
    return _page(title, body)
