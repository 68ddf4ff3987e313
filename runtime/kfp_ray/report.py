"""The run report as one HTML page the KFP UI renders: a timeline of the run's phases, the
training curves (per epoch, or per trial with the best marked), the confusion matrix as a
heatmap, the best hyperparameters, the cluster's shape and queue, and where things are in S3.
A failed run's report says where it failed and why.

Self-contained: inline CSS and SVG, no script, font, image or link fetched from anywhere, so it
renders the same offline, in the UI's sandboxed iframe, or saved to disk. Stdlib only."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

COLORS = {"queued": "#c9a227", "starting": "#4a90d9", "job": "#2e9d5b", "teardown": "#8c8c8c", "failed": "#c0392b"}
SERIES = ["#2e6fd9", "#d9792e", "#2e9d5b", "#8e44ad"]


@dataclass
class Phase:
    name: str  # queued, starting, job, teardown
    start: float  # seconds from the run's first phase
    end: float
    note: str = ""


@dataclass
class RunReport:
    run_id: str
    title: str = "Ray training run"
    status: str = "SUCCEEDED"  # or FAILED
    failed_at: str = ""  # the task that failed
    error: str = ""  # why
    phases: list[Phase] = field(default_factory=list)
    curves: dict[str, list[float]] = field(default_factory=dict)  # series -> values per step
    steps: str = "epoch"  # what a step is: epoch, or trial
    best_step: int | None = None  # index of the best step (trial), marked
    labels: list[str] = field(default_factory=list)  # confusion matrix labels
    matrix: list[list[int]] = field(default_factory=list)  # rows: true, columns: predicted
    metrics: dict = field(default_factory=dict)
    best_config: dict = field(default_factory=dict)
    cluster: dict = field(default_factory=dict)  # name, queue, head, workers, image...
    locations: dict = field(default_factory=dict)  # model, checkpoints, results, trials, log -> s3://
    log_tail: str = ""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _num(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# --- charts -----------------------------------------------------------------------------------
def timeline_svg(phases: list[Phase], width: int = 720) -> str:
    """One bar per phase on a shared time axis, labelled with its length."""
    if not phases:
        return ""
    total = max(p.end for p in phases) or 1.0
    left, row, top = 90, 26, 10
    height = top + row * len(phases) + 30
    scale = (width - left - 70) / total
    parts = [f'<svg class="timeline" role="img" aria-label="run timeline" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, p in enumerate(phases):
        y = top + i * row
        x, w = left + p.start * scale, max((p.end - p.start) * scale, 2)
        color = COLORS.get(p.name, COLORS["failed"] if p.name.startswith("failed") else "#555")
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end" class="lbl">{_e(p.name)}</text>')
        parts.append(f'<rect class="phase" data-phase="{_e(p.name)}" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" '
                     f'height="{row - 8}" rx="3" fill="{color}"><title>{_e(p.name)}: {p.end - p.start:.1f}s'
                     f'{(" (" + _e(p.note) + ")") if p.note else ""}</title></rect>')
        parts.append(f'<text x="{x + w + 4:.1f}" y="{y + 16}" class="val">{p.end - p.start:.1f}s</text>')
    axis_y = top + row * len(phases) + 8
    parts.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + total * scale:.1f}" y2="{axis_y}" class="axis"/>')
    for t in _ticks(total):
        x = left + t * scale
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle" class="tick">{_num(t)}s</text>')
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


def curves_svg(curves: dict[str, list[float]], steps: str, best: int | None, width: int = 720, height: int = 260) -> str:
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

    parts = [f'<svg class="curves" role="img" aria-label="training curves" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
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
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"><title>{_e(name)} {_e(steps)} '
                         f'{i + 1}: {_num(v)}</title></circle>')
        parts.append(f'<text x="{width - right + 10}" y="{top + 14 + 16 * k}" class="lbl" fill="{color}">{_e(name)}</text>')
    if best is not None and 0 <= best < n:
        x = left + best * sx
        parts.append(f'<line class="best" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" '
                     f'stroke="#c0392b" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{x - 4:.1f}" y="{height - bottom - 6}" text-anchor="end" class="best-label">'
                     f'best {_e(steps)} {best + 1}</text>')
    parts.append("</svg>")
    return "".join(parts)


def heatmap_svg(labels: list[str], matrix: list[list[int]], cell: int = 46) -> str:
    """The confusion matrix: rows true, columns predicted, darker for more."""
    if not labels or not matrix:
        return ""
    n = len(labels)
    left, top = 110, 100
    width, height = left + cell * n + 90, top + cell * n + 10
    peak = max(max(row) for row in matrix) or 1
    parts = [f'<svg class="heatmap" role="img" aria-label="confusion matrix" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
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
            shade = v / peak
            fill = f"rgb({int(255 - 205 * shade)},{int(255 - 150 * shade)},{int(255 - 40 * shade)})"
            ink = "#fff" if shade > 0.55 else "#222"
            parts.append(f'<rect class="cell" data-row="{i}" data-col="{j}" x="{left + j * cell}" y="{y}" width="{cell}" '
                         f'height="{cell}" fill="{fill}" stroke="#fff"><title>true {_e(labels[i])}, predicted '
                         f'{_e(labels[j])}: {v}</title></rect>')
            parts.append(f'<text x="{left + j * cell + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" '
                         f'fill="{ink}" class="val">{v}</text>')
    parts.append("</svg>")
    return "".join(parts)


# --- the page ---------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#222;margin:24px;max-width:900px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.status{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600}
.SUCCEEDED{background:#2e9d5b} .FAILED{background:#c0392b}
.failure{background:#fdecea;border-left:4px solid #c0392b;padding:10px 14px;margin:12px 0}
table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:4px 10px;text-align:left} th{background:#f5f5f5}
code,pre{font-family:Menlo,Consolas,monospace;font-size:12px} pre{background:#f7f7f7;padding:10px;overflow:auto}
.lbl{font-size:12px} .tick{font-size:11px;fill:#555} .val{font-size:11px} .axis{stroke:#999}
.best-label{font-size:11px;fill:#c0392b}
"""


def _table(rows: dict, head: tuple[str, str] | None = None) -> str:
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(_num(v))}</td></tr>" for k, v in rows.items())
    top = f"<tr><th>{_e(head[0])}</th><th>{_e(head[1])}</th></tr>" if head else ""
    return f"<table>{top}{body}</table>"


def render(r: RunReport) -> str:
    out = ["<!DOCTYPE html><html><head><meta charset=\"utf-8\">",
           f"<title>{_e(r.title)} {_e(r.run_id)}</title><style>{CSS}</style></head><body>",
           f'<h1>{_e(r.title)}</h1><p>run <code>{_e(r.run_id)}</code> '
           f'<span class="status {_e(r.status)}" id="status">{_e(r.status)}</span></p>']
    if r.status != "SUCCEEDED":
        out.append(f'<div class="failure" id="failure"><strong>Failed at {_e(r.failed_at or "an unknown task")}</strong>'
                   f"<br>{_e(r.error or 'no error message was recorded')}</div>")
    if r.phases:
        out.append(f'<h2>Timeline</h2><section id="timeline">{timeline_svg(r.phases)}</section>')
    if r.curves:
        out.append(f'<h2>Training curves</h2><section id="curves">{curves_svg(r.curves, r.steps, r.best_step)}</section>')
    if r.metrics:
        out.append(f'<h2>Metrics</h2><section id="metrics">{_table(r.metrics, ("metric", "value"))}</section>')
    if r.matrix:
        out.append(f'<h2>Confusion matrix</h2><section id="confusion">{heatmap_svg(r.labels, r.matrix)}</section>')
    if r.best_config:
        out.append(f'<h2>Best hyperparameters</h2><section id="best">{_table(r.best_config, ("parameter", "value"))}</section>')
    if r.cluster:
        out.append(f'<h2>Cluster</h2><section id="cluster">{_table(r.cluster)}</section>')
    if r.locations:
        rows = "".join(f"<tr><td>{_e(k)}</td><td><code>{_e(v)}</code></td></tr>" for k, v in r.locations.items() if v)
        out.append(f'<h2>Where things are</h2><section id="locations"><table>{rows}</table></section>')
    if r.log_tail:
        out.append(f'<h2>End of the job log</h2><section id="log"><pre>{_e(r.log_tail)}</pre></section>')
    out.append("</body></html>")
    return "\n".join(out)
