"""Records and what is shown of them: one :class:`Record` per input, the :class:`Summary`, the console lines and table, the JSON and JUnit reports."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .._version import __version__
from ..errors import InputError, InternalError, ParityError


#: ``failed``: a :class:`~gruconv.errors.GruconvError` (the input, an output, an option: exit 3);
#: ``internal-error``: any other exception, a bug in gruconv (exit 4, the traceback in the JSON report);
#: a worker process that died is one too (killed or out of memory: nothing gruconv reported).
STATUSES = ("ok", "nothing-to-convert", "skipped", "parity-failed", "failed", "internal-error")
#: The statuses of an input that did not convert (its outputs are removed; without --keep-going the run stops).
FAILED = ("failed", "parity-failed", "internal-error")
#: The reason of a ``--skip-existing`` skip.
UP_TO_DATE = "output is up to date (recorded as converted, unchanged since)"


# --------------------------------------------------------------------------- records

@dataclass
class Record:
    """What happened to one input (one line of the console, one JSON entry, one JUnit testcase)."""

    input: str
    status: str = "failed"
    format: Optional[str] = None
    output: Optional[str] = None          # the planned output path (file or directory)
    outputs: list = field(default_factory=list)
    stacks: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    verification: Optional[dict] = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    exit_code: int = 0
    seconds: float = 0.0
    traceback: Optional[str] = None
    reason: Optional[str] = None          # why it was skipped (status "skipped")

    def to_json(self) -> dict:
        out = {
            "input": self.input, "format": self.format, "status": self.status, "output": self.output,
            "outputs": self.outputs, "stacks": self.stacks, "warnings": self.warnings,
            "verification": self.verification, "error": self.error, "exit_code": self.exit_code,
            "seconds": round(self.seconds, 4), "reason": self.reason,
        }
        if self.traceback is not None:
            out["traceback"] = self.traceback
        return out


@dataclass
class Summary:
    """The outcome of :func:`convert_many`: per-input records (sorted by input) and the exit code."""

    records: list
    not_run: list = field(default_factory=list)   # inputs never started (the run stopped first)
    started: str = ""
    duration_s: float = 0.0
    jobs: int = 1
    shard: Optional[str] = None
    out_dir: str = ""
    #: Set when no input of any shard could be converted (none found, or every directory skipped):
    #: the one line naming the roots; the run then exits 3, never green on nothing.
    nothing_found: Optional[str] = None

    @property
    def counts(self) -> dict:
        c = {s: 0 for s in STATUSES}
        for r in self.records:
            c[r.status] += 1
        return c

    @property
    def exit_code(self) -> int:
        """The most serious outcome wins: ``InternalError.exit_code`` (4) if any input hit a bug (a
        bug must never hide behind the other inputs' failures); else ``InputError.exit_code`` (3) if
        any input failed (whatever its own error was: docs/exit-codes.md's "3 if any input failed") or nothing
        convertible was found at all (:attr:`nothing_found`); else ``ParityError.exit_code`` (1) for a
        parity failure; else 0."""
        if any(r.status == "internal-error" for r in self.records):
            return InternalError.exit_code
        if self.nothing_found is not None or any(r.status == "failed" for r in self.records):
            return InputError.exit_code
        if any(r.status == "parity-failed" for r in self.records):
            return ParityError.exit_code
        return 0

    @property
    def converted(self) -> int:
        return sum(1 for r in self.records if r.status in ("ok", "parity-failed"))

    def to_json(self) -> dict:
        return {
            "gruconv_version": __version__, "started": self.started, "duration_s": round(self.duration_s, 4),
            "jobs": self.jobs, "shard": self.shard, "out_dir": self.out_dir,
            "summary": self.counts, "exit_code": self.exit_code, "error": self.nothing_found,
            "inputs": [r.to_json() for r in self.records], "not_run": list(self.not_run),
        }


# --------------------------------------------------------------------------- console

class Console:
    def __init__(self, total: int, enabled: bool, say=None):
        self.total, self.done, self.enabled = total, 0, enabled
        self.tty = enabled and _isatty(sys.stderr)
        self.width = 0
        self.say = say or print_console

    def record(self, rec: Record) -> None:
        self.done += 1
        if not self.enabled:
            return
        line = _line(rec)
        if self.tty:
            self._clear()
            if rec.status in FAILED:
                self.say(line, err=True)
            progress = f"[{self.done}/{self.total}] {rec.status}  {_display(rec.input)}"
            cols = _columns()
            progress = progress if len(progress) < cols else progress[: cols - 4] + "..."
            self.say("\r" + progress, err=True, nl=False)
            self.width = len(progress)
        else:
            self.say(line, err=True)

    def _clear(self) -> None:
        if self.width:
            self.say("\r" + " " * self.width + "\r", err=True, nl=False)
            self.width = 0

    def close(self) -> None:
        if self.tty:
            self._clear()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns() -> int:
    try:
        return max(20, os.get_terminal_size(sys.stderr.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        return 80


def _display(text) -> str:
    from ..files.inputs import display

    return display(text)


def _short_error(rec: Record) -> str:
    err = rec.error or rec.status
    for prefix in (f"{rec.input}: ", f"{_display(rec.input)}: "):
        if err.startswith(prefix):
            return err[len(prefix):]
    return err


def _line(rec: Record) -> str:
    """One console line for a record; control characters in names escaped (one line, always)."""
    t = f"({rec.seconds:.1f}s)"
    name = _display(rec.input)
    if rec.status == "ok":
        outs = ", ".join(rec.outputs) or rec.output or "?"
        return f"ok  {name} -> {_display(outs)} {t}"
    if rec.status == "nothing-to-convert":
        return f"ok  {name}: nothing to convert {t}"
    if rec.status == "skipped":
        return f"skipped {name}" + (f": {_display(rec.reason)}" if rec.reason else "")
    return f"FAILED {name}: {_display(_short_error(rec))}"


def summary_text(summary: Summary) -> str:
    """The table printed on stdout at the end of a batch."""
    c = summary.counts
    rows = [(s, str(c[s])) for s in STATUSES]
    if summary.not_run:
        rows.append(("not run", str(len(summary.not_run))))
    rows.append(("total", str(len(summary.records) + len(summary.not_run))))
    rate = summary.converted / summary.duration_s if summary.duration_s > 0 else 0.0
    rows += [("time", f"{summary.duration_s:.1f} s"), ("throughput", f"{rate:.2f} models/s"),
             ("jobs", str(summary.jobs))]
    if summary.shard:
        rows.append(("shard", summary.shard))
    w = max(len(k) for k, _ in rows)
    v = max(len(x) for _, x in rows)
    return "\n".join(f"{k:<{w}}  {x:>{v}}" for k, x in rows)


# --------------------------------------------------------------------------- reports

_XML_BAD = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(s) -> str:
    s = str(s).encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates from odd file names
    return _XML_BAD.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def junit_xml(summary: Summary, pages: Optional[dict] = None) -> bytes:
    """One ``<testsuite name="gruconv">``, one ``<testcase>`` per input that ran (or was skipped).
    An input that failed or failed verification is a ``<failure>``; an internal error (a bug) is an
    ``<error>``, JUnit's element for "the test itself broke", counted in the suite's ``errors``.

    ``pages``: {input: path of its HTML page} (``--html``), linked from its testcase as a
    ``<property name="html">`` and a ``html report:`` line of ``system-out`` (JUnit has no link
    element; CI viewers show both)."""
    import xml.etree.ElementTree as ET

    c = summary.counts
    failures = c["failed"] + c["parity-failed"] + (summary.nothing_found is not None)
    suite = ET.Element("testsuite", {
        "name": "gruconv", "tests": str(len(summary.records) + (summary.nothing_found is not None)),
        "failures": str(failures), "errors": str(c["internal-error"]),
        "skipped": str(c["skipped"]), "time": f"{summary.duration_s:.3f}", "timestamp": summary.started,
        "hostname": _xml_text(socket.gethostname() or "localhost"),
    })
    props = ET.SubElement(suite, "properties")
    for name, value in (("gruconv_version", __version__), ("jobs", summary.jobs), ("shard", summary.shard or ""),
                        ("out_dir", summary.out_dir)):
        ET.SubElement(props, "property", {"name": name, "value": _xml_text(value)})
    for r in summary.records:
        case = ET.SubElement(suite, "testcase", {"classname": "gruconv.convert", "name": _xml_text(r.input),
                                                 "time": f"{r.seconds:.3f}"})
        if r.status in FAILED:
            fail = ET.SubElement(case, "error" if r.status == "internal-error" else "failure", {"message": _xml_text(_short_error(r)),
                                                   "type": _xml_text(r.error_type or r.status)})
            fail.text = _xml_text(r.error or "") + ("\n\n" + _xml_text(r.traceback) if r.traceback else "")
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", {"message": _xml_text(r.reason or UP_TO_DATE)})
        out_lines = [f"status: {r.status}"] + [f"output: {o}" for o in r.outputs] + \
                    [f"warning: {w}" for w in r.warnings]
        page = (pages or {}).get(r.input)
        if page is not None:
            ET.SubElement(ET.SubElement(case, "properties"), "property", {"name": "html", "value": _xml_text(page)})
            out_lines.append(f"html report: {page}")
        ET.SubElement(case, "system-out").text = _xml_text("\n".join(out_lines))
    if summary.nothing_found is not None:   # a run that converted nothing is a failing suite, never green
        case = ET.SubElement(suite, "testcase", {"classname": "gruconv.discover", "name": "inputs", "time": "0.000"})
        ET.SubElement(case, "failure", {"message": _xml_text(summary.nothing_found), "type": "InputError"})
    ET.indent(suite)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True) + b"\n"


def write_atomic(path: Path, data: bytes) -> None:
    from ..files.outputs import atomic_path

    path = Path(path)
    if str(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, force=True) as tmp:
        tmp.write_bytes(data)


def write_reports(summary: Summary, report=None, junit=None, html=None) -> None:
    """The JSON report, the HTML pages (:func:`write_html`) and the JUnit file, which links them."""
    if report is not None:
        write_atomic(Path(report), (json.dumps(summary.to_json(), indent=2) + "\n").encode("utf-8"))
    pages = write_html(summary, Path(html)) if html is not None else None
    if junit is not None:
        if pages is not None:   # linked relative to the JUnit file, as CI artifacts keep them together
            base = os.path.dirname(os.path.abspath(junit))
            pages = {i: os.path.relpath(os.path.abspath(p), base) for i, p in pages.items()}
        write_atomic(Path(junit), junit_xml(summary, pages))


def write_html(summary: Summary, html_dir: Path) -> dict:
    """``--html DIR``: one page per input that ran or was skipped (its verify report, or its status:
    :mod:`gruconv.report_html`) and ``DIR/index.html`` listing every one with its verdict; returns
    {input: page path}.  Page names come from :func:`gruconv.report_html.page_name` (stable across
    runs and shards)."""
    from ..report_html import index_page, page_name, record_page

    records = [r.to_json() for r in summary.records]
    names = {r["input"]: page_name(r["input"]) for r in records}
    for r in records:
        write_atomic(html_dir / names[r["input"]], record_page(r).encode("utf-8"))
    title = "gruconv batch" + (f", shard {summary.shard}" if summary.shard else "")
    write_atomic(html_dir / "index.html", index_page(records, names, title=title).encode("utf-8"))
    return {i: str(html_dir / n) for i, n in names.items()}


def print_console(text: str, err: bool = False, nl: bool = True) -> None:
    """The default ``print_fn``: like ``click.echo`` for text, to the current ``sys.stderr`` /
    ``sys.stdout`` (looked up at each call, so test runners that swap them see the output)."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(text + ("\n" if nl else ""))
    stream.flush()
