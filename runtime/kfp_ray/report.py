"""The run report as one HTML page the KFP UI renders: what the run was (its parameters, image,
Ray version, links to the KFP run), how it ended, a timeline of its tasks at their real start
and end times, the training curves (per epoch, or per trial with the best marked), the
confusion matrix as a heatmap, the best hyperparameters, the cluster's shape and queue, and
where things are in S3 (the job log included). A failed run's report says where it failed and
why; a terminated one says so, and is not called a failure.

Self-contained: inline CSS and SVG, no script, font, image or stylesheet fetched from anywhere,
so it renders the same offline, in the UI's sandboxed iframe, or saved to disk; its only URLs
are links a reader may follow. Accessible (WCAG 2 AA, checked with axe-core in
tests/report): `lang`, landmarks, each chart named and followed by its data as a table, and
every colour pair at least 4.5:1. Stdlib only."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

# Every colour below is checked against the white page (text and marks ≥ 4.5:1) by
# tests/report/test_report_html.py::test_every_colour_pair_reads_at_4_5_to_1.
INK, MUTED, PAGE = "#1f1f1f", "#4d4d4d", "#ffffff"
# badge background per state; the badge text is white
BADGES = {"SUCCEEDED": "#1e7b45", "FAILED": "#b3261e", "TERMINATED": "#8a4b00", "UNKNOWN": "#4d5b6b"}
# what each state says in words, under the badge (FAILED says where and why instead)
STATE_TEXT = {
    "TERMINATED": "The run was terminated (cancelled) before it finished. No task failed: the tasks that were "
                  "running were stopped and the exit handler deleted the run's Ray clusters.",
    "UNKNOWN": "How the run ended is not known here. The run's page in the Kubeflow Pipelines UI has its state.",
}
# Terminated under another name: KFP says CANCELED, Ray says STOPPED, older reports said ENDED.
ALIASES = {"ENDED": "TERMINATED", "CANCELED": "TERMINATED", "CANCELLED": "TERMINATED", "STOPPED": "TERMINATED"}
BARS = {"succeeded": "#1f5fbf", "failed": "#b3261e", "terminated": "#8a4b00", "running": "#4d5b6b",
        "queued": "#8a4b00", "starting": "#1f5fbf", "job": "#1e7b45", "teardown": "#4d5b6b"}
SERIES = ["#1f5fbf", "#a84a00", "#1e7b45", "#7b3fa0"]
BEST = "#b3261e"
HEAT = (0x1f, 0x4e, 0x99)  # the heatmap's darkest cell; white is zero


@dataclass
class Phase:
    """A timeline row: a task (or a phase) from `start` to `end`, in seconds from the report's
    `started_at`. `state`: succeeded, failed, terminated or running (colours the bar)."""
    name: str
    start: float
    end: float
    note: str = ""
    state: str = ""


@dataclass
class RunReport:
    run_id: str
    title: str = "Ray training run"
    status: str = "SUCCEEDED"  # FAILED, TERMINATED, UNKNOWN (aliases: ALIASES)
    failed_at: str = ""  # the task that failed
    error: str = ""  # why (or, for another state, what the page could not read)
    phases: list[Phase] = field(default_factory=list)  # the timeline: real start and end times
    started_at: datetime | None = None  # the timeline's zero, UTC
    durations: dict[str, float] = field(default_factory=dict)  # phase -> seconds (queued, starting, job, teardown)
    curves: dict[str, list[float]] = field(default_factory=dict)  # series -> values per step
    steps: str = "epoch"  # what a step is: epoch, or trial
    best_step: int | None = None  # index of the best step (trial), marked
    labels: list[str] = field(default_factory=list)  # confusion matrix labels
    matrix: list[list[int]] = field(default_factory=list)  # rows: true, columns: predicted
    metrics: dict = field(default_factory=dict)
    best_config: dict = field(default_factory=dict)
    run: dict = field(default_factory=dict)  # the run's parameters, image, Ray version...
    run_url: str = ""  # the run in the KFP UI
    cluster: dict = field(default_factory=dict)  # name, shape...
    usage: dict = field(default_factory=dict)  # the usage ledger's lines (usage.report_rows): what the run cost
    locations: dict = field(default_factory=dict)  # model, checkpoints, results, job log -> s3://
    links: dict = field(default_factory=dict)  # a location's name -> its page in an S3 console
    log_tail: str = ""
    timeline_note: str = ""  # why there is no timeline (only durations), when there is none


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _num(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def state_of(status: str) -> str:
    s = (status or "").upper()
    s = ALIASES.get(s, s)
    return s if s in BADGES else "UNKNOWN"


def _link(url: str, text: str) -> str:
    """A link a reader may follow (https only: nothing else is made clickable)."""
    if not url.startswith("https://"):
        return _e(text)
    return f'<a href="{_e(url)}" target="_blank" rel="noopener noreferrer">{_e(text)}</a>'


# --- colour ---------------------------------------------------------------------------------
def luminance(color: str) -> float:
    """WCAG 2 relative luminance of #rrggbb or rgb(r,g,b)."""
    if color.startswith("rgb("):
        rgb = [int(c) for c in color[4:-1].split(",")]
    else:
        rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    lin = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def heat(shade: float) -> tuple[str, str]:
    """A heatmap cell's fill for shade 0..1 and the ink (black or white) that reads best on it:
    one of the two always reaches 4.58:1."""
    fill = "rgb({},{},{})".format(*(round(255 - (255 - c) * shade) for c in HEAT))
    ink = "#000000" if contrast(fill, "#000000") >= contrast(fill, "#ffffff") else "#ffffff"
    return fill, ink


# --- charts -----------------------------------------------------------------------------------
def _clock(started_at: datetime | None, seconds: float) -> str:
    if started_at is None:
        return f"+{seconds:.1f} s"
    t = started_at.astimezone(UTC) + timedelta(seconds=seconds)
    return t.strftime("%H:%M:%S") + f" UTC (+{seconds:.1f} s)"


def timeline_svg(phases: list[Phase], started_at: datetime | None = None, width: int = 760) -> str:
    """One bar per row at its real start and end on a shared time axis (so the gaps between
    tasks show), labelled with its length."""
    if not phases:
        return ""
    total = max(p.end for p in phases) or 1.0
    left, row, top = 190, 26, 10
    height = top + row * len(phases) + 40
    scale = (width - left - 70) / total
    since = f" since {started_at.astimezone(UTC):%H:%M:%S} UTC" if started_at else ""
    parts = [f'<svg class="timeline" role="img" aria-labelledby="timeline-title" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="timeline-title">Timeline: {len(phases)} rows at their real start and end times, '
             f'{total:.1f} s in all; the table below has the same data</title>']
    for i, p in enumerate(phases):
        y = top + i * row
        x, w = left + p.start * scale, max((p.end - p.start) * scale, 2)
        color = BARS.get(p.state or p.name, BARS["running"])
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end" class="lbl" fill="{INK}">{_e(p.name)}</text>')
        parts.append(f'<rect class="phase" data-phase="{_e(p.name)}" data-start="{p.start:.1f}" data-end="{p.end:.1f}" '
                     f'data-state="{_e(p.state)}" '
                     f'x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" rx="3" fill="{color}"></rect>')
        parts.append(f'<text x="{x + w + 4:.1f}" y="{y + 16}" class="val" fill="{INK}">{p.end - p.start:.1f}s</text>')
    axis_y = top + row * len(phases) + 8
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + total * scale:.1f}" y2="{axis_y}" class="axis"/>')
    for t in _ticks(total):
        x = left + t * scale
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle" class="tick">{_num(t)}s</text>')
    parts.append(f'<text x="{left + total * scale / 2:.1f}" y="{axis_y + 32}" text-anchor="middle" class="tick">'
                 f'seconds{_e(since)}</text></svg>')
    return "".join(parts)


def timeline_table(phases: list[Phase], started_at: datetime | None) -> str:
    """The timeline's data: each row's start, end and length, and the idle gap before it."""
    rows, last_end = [], None
    for p in phases:
        gap = "" if last_end is None or p.start <= last_end else f"{p.start - last_end:.1f} s"
        rows.append(f"<tr><th scope=\"row\">{_e(p.name)}</th><td>{_e(_clock(started_at, p.start))}</td>"
                    f"<td>{_e(_clock(started_at, p.end))}</td><td>{p.end - p.start:.1f} s</td><td>{gap}</td>"
                    f"<td>{_e(p.note)}</td></tr>")
        last_end = p.end if last_end is None else max(last_end, p.end)
    return ('<table id="timeline-data"><caption>The timeline as a table</caption><tr><th scope="col">task</th>'
            '<th scope="col">start</th><th scope="col">end</th><th scope="col">length</th>'
            '<th scope="col">idle before</th><th scope="col">note</th></tr>' + "".join(rows) + "</table>")


def durations_svg(durations: dict[str, float], width: int = 760) -> str:
    """The phases' lengths as bars from zero (when their start times are not known)."""
    items = [(k, v) for k, v in durations.items() if v and v > 0]
    if not items:
        return ""
    top_value = max(v for _, v in items)
    left, row, top = 110, 26, 8
    height = top + row * len(items) + 8
    scale = (width - left - 80) / top_value
    parts = [f'<svg class="durations" role="img" aria-labelledby="durations-title" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
             '<title id="durations-title">How long each phase took; the table below has the same data</title>']
    for i, (name, seconds) in enumerate(items):
        y = top + i * row
        w = max(seconds * scale, 2)
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end" class="lbl" fill="{INK}">{_e(name)}</text>'
                     f'<rect class="duration" data-phase="{_e(name)}" x="{left}" y="{y + 3}" width="{w:.1f}" '
                     f'height="{row - 8}" rx="3" fill="{BARS.get(name, BARS["running"])}"></rect>'
                     f'<text x="{left + w + 4:.1f}" y="{y + 16}" class="val" fill="{INK}">{seconds:.1f}s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ticks(top: float, count: int = 5) -> list[float]:
    if top <= 0:
        return [0.0]
    step = 10 ** math.floor(math.log10(top / count))
    for m in (1, 2, 5, 10):
        if top / (step * m) <= count:
            step *= m
            break
    return [round(i * step, 10) for i in range(int(top / step) + 1)]


def curves_svg(curves: dict[str, list[float]], steps: str, best: int | None, width: int = 760, height: int = 260) -> str:
    """Each series as a line over its steps; the best step marked."""
    series = {k: v for k, v in curves.items() if v}
    if not series:
        return ""
    n = max(len(v) for v in series.values())
    lo = min(min(v) for v in series.values())
    hi = max(max(v) for v in series.values())
    if hi == lo:
        hi, lo = hi + 1, lo - 1
    left, right, top, bottom = 50, 130, 12, 34
    sx = (width - left - right) / max(n - 1, 1)
    sy = (height - top - bottom) / (hi - lo)

    def pt(i, v):
        return left + i * sx, top + (hi - v) * sy

    marked = f"; best {steps} {best + 1} marked" if best is not None and 0 <= best < n else ""
    parts = [f'<svg class="curves" role="img" aria-labelledby="curves-title" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="curves-title">Training curves: {_e(", ".join(series))} per {_e(steps)}{_e(marked)}; '
             'the table below has the same data</title>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" class="axis"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" class="axis"/>',
             f'<text x="{(left + width - right) / 2}" y="{height - 2}" text-anchor="middle" class="tick">{_e(steps)}</text>',
             f'<text x="{left - 6}" y="{top + 10}" text-anchor="end" class="tick">{_num(hi)}</text>',
             f'<text x="{left - 6}" y="{height - bottom}" text-anchor="end" class="tick">{_num(lo)}</text>']
    if n <= 25:
        for i in range(n):
            parts.append(f'<text x="{left + i * sx:.1f}" y="{height - bottom + 14}" text-anchor="middle" '
                         f'class="tick">{i + 1}</text>')
    for k, (name, values) in enumerate(series.items()):
        color = SERIES[k % len(SERIES)]
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in (pt(i, v) for i, v in enumerate(values)))
        parts.append(f'<polyline class="series" data-series="{_e(name)}" fill="none" stroke="{color}" stroke-width="2" '
                     f'points="{points}"/>')
        for i, v in enumerate(values):
            x, y = pt(i, v)
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"></circle>')
        y = top + 14 + 18 * k  # the legend: a swatch of the line, its name in its colour
        parts.append(f'<line x1="{width - right + 8}" y1="{y - 4}" x2="{width - right + 26}" y2="{y - 4}" stroke="{color}" '
                     f'stroke-width="3"/><text x="{width - right + 32}" y="{y}" class="lbl" fill="{color}">{_e(name)}</text>')
    if marked:
        x = left + best * sx
        parts.append(f'<line class="best" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" '
                     f'stroke="{BEST}" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{x - 4:.1f}" y="{top + 10}" text-anchor="end" class="best-label">'
                     f'best {_e(steps)} {best + 1}</text>')
    parts.append("</svg>")
    return "".join(parts)


def curves_table(curves: dict[str, list[float]], steps: str, best: int | None) -> str:
    series = {k: v for k, v in curves.items() if v}
    n = max((len(v) for v in series.values()), default=0)
    head = f'<tr><th scope="col">{_e(steps)}</th>' + "".join(f'<th scope="col">{_e(k)}</th>' for k in series) + "</tr>"
    rows = "".join(f'<tr><th scope="row">{i + 1}{" (best)" if i == best else ""}</th>'
                   + "".join(f"<td>{_e(_num(v[i])) if i < len(v) else ''}</td>" for v in series.values()) + "</tr>"
                   for i in range(n))
    return f'<table id="curves-data"><caption>The training curves as a table</caption>{head}{rows}</table>'


def heatmap_svg(labels: list[str], matrix: list[list[int]], cell: int = 46) -> str:
    """The confusion matrix: rows true, columns predicted, darker for more."""
    if not labels or not matrix:
        return ""
    n = len(labels)
    left, top = 110, 100
    width, height = left + cell * n + 90, top + cell * n + 10
    peak = max(max(row) for row in matrix) or 1
    parts = [f'<svg class="heatmap" role="img" aria-labelledby="heatmap-title" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="heatmap-title">Confusion matrix of {n} classes, rows true, columns predicted; '
             'the table below has the same data</title>',
             f'<text x="{left + cell * n / 2}" y="14" text-anchor="middle" class="tick">predicted</text>',
             f'<text x="12" y="{top + cell * n / 2}" class="tick" transform="rotate(-90 12 {top + cell * n / 2})" '
             'text-anchor="middle">true</text>']
    for j, label in enumerate(labels):
        x = left + j * cell + cell / 2
        parts.append(f'<text x="{x}" y="{top - 8}" text-anchor="start" class="tick" '
                     f'transform="rotate(-40 {x} {top - 8})">{_e(label)}</text>')
    for i, row in enumerate(matrix):
        y = top + i * cell
        parts.append(f'<text x="{left - 6}" y="{y + cell / 2 + 4}" text-anchor="end" class="tick">{_e(labels[i])}</text>')
        for j, v in enumerate(row):
            fill, ink = heat(v / peak)
            parts.append(f'<rect class="cell" data-row="{i}" data-col="{j}" x="{left + j * cell}" y="{y}" width="{cell}" '
                         f'height="{cell}" fill="{fill}" stroke="#ffffff"></rect>')
            parts.append(f'<text x="{left + j * cell + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" '
                         f'fill="{ink}" class="val">{v}</text>')
    parts.append("</svg>")
    return "".join(parts)


def heatmap_table(labels: list[str], matrix: list[list[int]]) -> str:
    head = '<tr><th scope="col">true \\ predicted</th>' + "".join(f'<th scope="col">{_e(x)}</th>' for x in labels) + "</tr>"
    rows = "".join(f'<tr><th scope="row">{_e(labels[i])}</th>' + "".join(f"<td>{v}</td>" for v in row) + "</tr>"
                   for i, row in enumerate(matrix))
    return f'<table id="confusion-data"><caption>The confusion matrix as a table</caption>{head}{rows}</table>'


# --- the page ---------------------------------------------------------------------------------
CSS = f"""
body{{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:{INK};background:{PAGE};margin:24px;
max-width:920px}}
h1{{font-size:22px;margin:0 0 4px}} h2{{font-size:16px;margin:26px 0 8px;border-bottom:1px solid #d0d0d0;
padding-bottom:4px}}
.status{{display:inline-block;padding:2px 10px;border-radius:10px;color:#ffffff;font-weight:600}}
{"".join(f".{k}{{background:{v}}}" for k, v in BADGES.items())}
.note{{background:#f3f3f3;border-left:4px solid {BADGES["UNKNOWN"]};padding:10px 14px;margin:12px 0}}
.failure{{background:#fdecea;border-left:4px solid {BADGES["FAILED"]};padding:10px 14px;margin:12px 0}}
.ended{{background:#fbf1e3;border-left:4px solid {BADGES["TERMINATED"]};padding:10px 14px;margin:12px 0}}
table{{border-collapse:collapse;margin:8px 0}} td,th{{border:1px solid #d0d0d0;padding:4px 10px;text-align:left}}
th{{background:#f3f3f3}} caption{{text-align:left;color:{MUTED};padding:2px 0}}
a{{color:#1a55a8}} code,pre{{font-family:Menlo,Consolas,monospace;font-size:12px}}
pre{{background:#f3f3f3;padding:10px;overflow:auto}}
summary{{cursor:pointer;color:{MUTED}}}
.lbl,.val{{font-size:12px}} .tick{{font-size:11px;fill:{MUTED}}} .axis{{stroke:{MUTED}}}
.best-label{{font-size:11px;fill:{BEST}}}
"""


def _table(rows: dict, head: tuple[str, str] | None = None, tid: str = "") -> str:
    body = "".join(f'<tr><th scope="row">{_e(k)}</th><td>{_e(_num(v))}</td></tr>' for k, v in rows.items())
    top = f'<tr><th scope="col">{_e(head[0])}</th><th scope="col">{_e(head[1])}</th></tr>' if head else ""
    ident = f' id="{tid}"' if tid else ""
    return f"<table{ident}>{top}{body}</table>"


def _outcome(r: RunReport, state: str) -> str:
    if state == "SUCCEEDED":
        return ""
    if state == "FAILED":
        return (f'<div class="failure" id="failure"><strong>Failed at {_e(r.failed_at or "a task this page could not name")}'
                f"</strong><br>{_e(r.error or 'no error message was recorded')}</div>")
    cls, tid = ("ended", "ended") if state == "TERMINATED" else ("note", "unknown")
    extra = f"<br>{_e(r.error)}" if r.error else ""
    return f'<div class="{cls}" id="{tid}"><strong>{_e(STATE_TEXT[state])}</strong>{extra}</div>'


def render(r: RunReport) -> str:
    state = state_of(r.status)
    run_id = _link(r.run_url, r.run_id) if r.run_url else f"<code>{_e(r.run_id)}</code>"
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(r.title)} {_e(r.run_id)}: {state}</title><style>{CSS}</style></head><body><main>",
           f'<h1>{_e(r.title)}</h1><p>run {run_id} '
           f'<span class="status {state}" id="status">{state}</span></p>', _outcome(r, state)]
    if r.run:
        out.append(f'<h2>Run</h2><section id="run" aria-label="run">{_table(r.run)}</section>')
    if r.phases:
        out.append('<h2>Timeline</h2><section id="timeline" aria-label="timeline">'
                   f"{timeline_svg(r.phases, r.started_at)}{timeline_table(r.phases, r.started_at)}</section>")
    if r.durations:
        note = f"<p>{_e(r.timeline_note)}</p>" if r.timeline_note and not r.phases else ""
        chart = "" if r.phases else durations_svg(r.durations)
        rows = {k: f"{v:.1f} s" for k, v in r.durations.items() if v and v > 0}
        if rows:
            out.append(f'<h2>Phases</h2><section id="durations" aria-label="phases">{note}{chart}'
                       f'{_table(rows, ("phase", "length"), "durations-data")}</section>')
    if r.curves:
        out.append('<h2>Training curves</h2><section id="curves" aria-label="training curves">'
                   f"{curves_svg(r.curves, r.steps, r.best_step)}<details><summary>The curves as a table</summary>"
                   f"{curves_table(r.curves, r.steps, r.best_step)}</details></section>")
    if r.metrics:
        out.append(f'<h2>Metrics</h2><section id="metrics" aria-label="metrics">{_table(r.metrics, ("metric", "value"))}'
                   "</section>")
    if r.matrix:
        out.append('<h2>Confusion matrix</h2><section id="confusion" aria-label="confusion matrix">'
                   f"{heatmap_svg(r.labels, r.matrix)}{heatmap_table(r.labels, r.matrix)}</section>")
    if r.best_config:
        out.append('<h2>Best hyperparameters</h2><section id="best" aria-label="best hyperparameters">'
                   f'{_table(r.best_config, ("parameter", "value"))}</section>')
    if r.cluster:
        out.append(f'<h2>Cluster</h2><section id="cluster" aria-label="cluster">{_table(r.cluster)}</section>')
    if r.usage:
        out.append(f'<h2>Usage</h2><section id="usage" aria-label="usage">{_table(r.usage, ("what", "amount"))}</section>')
    where = {k: v for k, v in r.locations.items() if v}
    if where:
        rows = "".join(f'<tr><th scope="row">{_e(k)}</th><td><code>{_e(v)}</code>'
                       + (f" ({_link(r.links[k], 'open in the S3 console')})" if r.links.get(k) else "") + "</td></tr>"
                       for k, v in where.items())
        out.append(f'<h2>Where things are</h2><section id="locations" aria-label="where things are"><table>{rows}'
                   "</table></section>")
    if r.log_tail:
        out.append('<h2>End of the job log</h2><section id="log" aria-label="end of the job log">'
                   f'<pre tabindex="0">{_e(r.log_tail)}</pre></section>')
    out.append("</main></body></html>")
    return "\n".join(part for part in out if part)


def s3_console_url(uri: str, endpoint: str = "") -> str:
    """The AWS S3 console's page for an s3:// location, when the data connection is AWS S3
    (an empty endpoint or *.amazonaws.com); other stores (MinIO, ODF) have no console URL
    known from here: "" then."""
    from urllib.parse import urlparse

    if not uri.startswith("s3://"):
        return ""
    if endpoint:
        host = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}").hostname or ""
        if not (host == "amazonaws.com" or host.endswith(".amazonaws.com")):
            return ""
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket:
        return ""
    if not key or key.endswith("/"):
        return f"https://s3.console.aws.amazon.com/s3/buckets/{quote(bucket)}?prefix={quote(key)}"
    return f"https://s3.console.aws.amazon.com/s3/object/{quote(bucket)}?prefix={quote(key)}"
