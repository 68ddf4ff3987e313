"""The fault matrix's summary table: every row records what it measured through the `recorder`
fixture (tests/reliability/conftest.py); the record travels in the test's report, and the
reporting process (the xdist controller, or the only one) collects it and prints the table at
the end (fault, outcome, seconds to detect, seconds to release quota, leaks, row seconds). The
hooks are in the root conftest.py, which every pytest process loads."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

RECORDED: list[dict] = []  # on the process that reports (the xdist controller, or the only one)
PROPERTY = "fault_matrix_row"


@dataclass
class Recorder:
    """One row of the summary table, filled by the test that measured it. It travels in the
    test's report (user_properties), so the table is whole also when xdist workers ran the rows."""

    node: pytest.Item
    entry: dict = field(default_factory=dict)

    def record(self, fault: str, outcome: str, detect_s: float | None, release_s: float | None, leaks: dict | None,
               seconds: float | None, expected: str = "", notes: str = "") -> None:
        self.entry = {"fault": fault, "outcome": outcome, "expected": expected, "detect_s": detect_s,
                      "release_s": release_s, "leaks": leaks, "seconds": seconds, "notes": notes,
                      "test": self.node.nodeid}
        self.node.user_properties.append((PROPERTY, self.entry))


def collect(report) -> None:
    if report.when == "call" or (report.when == "setup" and report.skipped):
        for name, entry in report.user_properties:
            if name == PROPERTY:
                RECORDED.append({**entry, "passed": "pass" if report.passed else "skip" if report.skipped else "FAIL"})


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, dict):
        leaked = {k: v for k, v in value.items() if v}
        return "none" if not leaked else ", ".join(f"{v} {k}" for k, v in leaked.items())
    return str(value)


def table(entries: list[dict]) -> list[str]:
    head = ("fault", "outcome", "detect s", "release s", "leaks", "row s", "test")
    rows = [(e["fault"], e["outcome"], _cell(e["detect_s"]), _cell(e["release_s"]),
             _cell(e["leaks"]) if e["leaks"] is not None else "-", _cell(e["seconds"]), e.get("passed", "?"))
            for e in entries]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return [line(head), line(tuple("-" * w for w in widths))] + [line(r) for r in rows]


def print_table(terminalreporter) -> None:
    if not RECORDED:
        return
    tr = terminalreporter
    tr.section("fault matrix")
    tr.write_line("detect s: from the fault to the run's first reaction (its log line, or its delete of the cluster); "
                  "release s: from the fault (or, for a run that succeeds, the job's end) to the ClusterQueue no longer "
                  "counting the cluster's Workload; leaks: RayClusters, Workloads holding quota, Ray processes of the row's "
                  "cluster once its run ended (+60 s at most); row s: the row's wall time (rows run concurrently).")
    for line in table(RECORDED):
        tr.write_line(line)
