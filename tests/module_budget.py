"""The quick tier's budget, printed at the end of every run: its slowest test modules (issue 47 item 1).

``make test`` has a target (<= 300 s whole-process on 2 cores, ``docs/testing.md``) that grew past itself
unnoticed for rounds: 261 s, then 483 s, then 684 s, with nothing in the run's output saying which modules
took the time.  This plugin (loaded by ``tests/conftest.py``) sums, per test module, the duration of every
phase of its tests (setup, where a module or session fixture is built, call and teardown) and prints the
``--slowest-modules`` (default 15) modules with the largest sums in the terminal summary, with:

* ``cpu s``: CPU seconds of the process that ran the phase, its own plus those of the children it waited
  for (``getrusage`` SELF + CHILDREN): a tf_keras or ``gruconv`` child is charged to the test that ran it.
  On the shared development machine (load 4-12 on 2 cores) wall time measures the neighbours as much as the
  test; CPU seconds compare from one run to the next.
* per xdist worker, the summed wall time of the tests it ran: with ``--dist loadgroup`` one worker that
  holds a long ``xdist_group`` while the other idles shows as two unequal sums.

A session-scoped fixture is charged to the module of the first test that asked for it.  Under xdist the
workers measure (the ``cpu_s`` of each report travels in ``report.user_properties``) and the controller
prints.  Proven on a planted suite by ``tests/test_process_state.py``.  Not a timed assertion: it prints.
"""

from __future__ import annotations

import resource
from collections import defaultdict

import pytest

_KEY = "module_budget_cpu_s"


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def pytest_addoption(parser):
    parser.addoption("--slowest-modules", type=int, default=15, metavar="N",
                     help="print the N test modules with the largest summed duration (0: none); "
                          "tests/module_budget.py")


_BUDGET: dict = {}


def pytest_configure(config):
    _BUDGET.clear()
    _BUDGET.update(wall=defaultdict(float), cpu=defaultdict(float), tests=defaultdict(set),
                   workers=defaultdict(float))


def _timed(item, when):
    start = _cpu()
    yield
    item.__dict__.setdefault("_module_budget_cpu", {})[when] = _cpu() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _timed(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _timed(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    cpu = item.__dict__.get("_module_budget_cpu", {}).get(call.when)
    if cpu is not None:
        outcome.get_result().user_properties.append((_KEY, round(cpu, 4)))


def pytest_runtest_logreport(report):
    """Runs where the report is logged: in the one process, or (xdist) in the controller."""
    if not _BUDGET or report.when not in ("setup", "call", "teardown"):
        return
    module = report.nodeid.split("::", 1)[0]
    _BUDGET["wall"][module] += report.duration or 0.0
    _BUDGET["tests"][module].add(report.nodeid)
    _BUDGET["cpu"][module] += sum(v for k, v in report.user_properties if k == _KEY)
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    _BUDGET["workers"][worker or "main"] += report.duration or 0.0


def summary_lines(budget: dict, n: int) -> list:
    """The lines the terminal summary prints (``budget``: the sums gathered above)."""
    wall, cpu, tests = budget["wall"], budget["cpu"], budget["tests"]
    ranked = sorted(wall, key=lambda m: -wall[m])[:n]
    if not ranked:
        return []
    lines = [f"{'wall s':>8} {'cpu s':>8} {'tests':>6}  module",
             *(f"{wall[m]:8.1f} {cpu.get(m, 0.0):8.1f} {len(tests[m]):6d}  {m}" for m in ranked),
             f"{sum(wall.values()):8.1f} {sum(cpu.values()):8.1f} {sum(len(t) for t in tests.values()):6d}  "
             f"all {len(wall)} modules"]
    workers = budget["workers"]
    if len(workers) > 1 or "main" not in workers:
        lines.append("per worker (summed wall s of its tests): "
                     + ", ".join(f"{w} {workers[w]:.1f}" for w in sorted(workers)))
    return lines


def pytest_terminal_summary(terminalreporter, config):
    n = config.getoption("slowest_modules", 15)
    lines = summary_lines(_BUDGET, n) if n and _BUDGET else []
    if not lines:
        return
    terminalreporter.write_sep("=", f"slowest {min(n, len(_BUDGET['wall']))} test modules "
                                    "(setup + call + teardown summed; tests/module_budget.py)")
    for line in lines:
        terminalreporter.write_line(line)
