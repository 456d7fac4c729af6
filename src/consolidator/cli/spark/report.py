"""Replay report: figures per policy, rendered as Markdown, HTML and a PNG chart.

Figures (per policy): messages in (every input record), batches out, events batched, compaction
ratio (events batched / batches out), batch size distribution (member rows per batch),
latency percentiles (flushed_at - first_seen per member row; linear interpolation, like
numpy's default), flush reasons, dead-lettered records, expired rows (TTL) and the events in
them, batches held back by the rate limit with their wait (``held_back_ms``: p50/p95/max), and
``unbatched`` (valid, unique events neither batched nor expired: always 0 unless something is broken).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path

from consolidator.cli.spark.report_chart import render_chart
from consolidator.cli.spark.report_choice import (
    TIE_TOLERANCE,
    differing,
    dominated,
    near_ties,
    recommend,
    short_ids,
)
from consolidator.rules.printable import printable
from consolidator.spark.figures import WORST_GROUPS, InputSummary, PolicyFigures

__all__ = ["recommend", "render_chart", "render_html", "render_markdown", "write_report"]
TIE_PERCENT = f"{TIE_TOLERANCE:.0%}"

def _seconds(ms: float) -> str:
    return f"{ms / 1000:.1f} s"


def _iso(ms: int | None) -> str:
    from consolidator.rules.batch import iso_ms

    return "-" if ms is None else iso_ms(ms)


def _span(source: InputSummary) -> str:
    if source.first_ms is None or source.last_ms is None:
        return "no records"
    hours = (source.last_ms - source.first_ms) / 3_600_000
    return f"{_iso(source.first_ms)} to {_iso(source.last_ms)} ({hours:.1f} h)"


NAME_HELP = ("A policy name lists its settings: `d300s-h1800s-n500-t30s` is debounce 300 s (flush a group "
             "once it has been quiet that long), hard window 1800 s (flush at the latest that long after "
             "the group's oldest pending event), at most 500 rows per batch (a full group flushes at once), "
             "and flush ticks every 30 s. When set, `-r2per60s` is a rate limit of 2 batches per 60 s for each "
             "group (the rest waits for the next allowed claim), and `-ttl21600s` a time-to-live of 21600 s "
             "(a row whose newest event's record timestamp is older than that when it would be claimed goes to the "
             "dead-letter destination as expired).")
GLOSSARY = ("Compaction = events batched / batches out (higher: fewer, larger batches downstream). "
            "Latency = flushed_at - first_seen per buffered row.")


def recommendation_text(figures: Sequence[PolicyFigures], max_p95_ms: float | None) -> str | None:
    if max_p95_ms is None:
        return None
    best = recommend(figures, max_p95_ms)
    if best is None:
        fastest = min(figures, key=lambda f: f.latency_p95_ms)
        return (f"No policy keeps p95 latency within {_seconds(max_p95_ms)}; the lowest p95 is "
                f"`{fastest.policy}` ({_seconds(fastest.latency_p95_ms)}).")
    ids = short_ids(figures)
    text = (f"Recommended for p95 latency <= {_seconds(max_p95_ms)}: {ids[best.policy]} `{best.policy}`: compaction "
            f"{best.compaction_ratio:.2f}, p95 latency {_seconds(best.latency_p95_ms)} (the best compaction "
            "among the policies within the bound).")
    ties = near_ties(figures, best, max_p95_ms)
    if ties:
        others = ", ".join(f"{ids[f.policy]} `{f.policy}` (compaction {f.compaction_ratio:.2f}, p95 "
                           f"{_seconds(f.latency_p95_ms)})" for f in ties)
        text += (f" Near tie: {others} {'is' if len(ties) == 1 else 'are'} within {TIE_PERCENT} of its compaction"
                 " and also within the bound, so the figures barely separate them")
        settings = dict(pair for tie in ties for pair in differing(best, tie))
        if settings:
            text += (f"; they differ in {', '.join(settings)}: choose on what the figures do not measure"
                     f" ({'; '.join(settings.values())}).")
        else:
            text += "."
    return text


_ROWS = (
    ("messages in", lambda f: f"{f.messages_in:,}"),
    ("dead-lettered", lambda f: f"{f.dead_lettered:,}"),
    ("duplicates ignored", lambda f: f"{f.replayed:,}"),
    ("events batched", lambda f: f"{f.events_batched:,}"),
    ("batches out", lambda f: f"{f.batches_out:,}"),
    ("compaction ratio", lambda f: f"{f.compaction_ratio:.2f}"),
    ("batch size min / mean / p50 / p95 / max",
     lambda f: f"{f.batch_size_min} / {f.batch_size_mean:.1f} / {f.batch_size_p50:g} / "
               f"{f.batch_size_p95:g} / {f.batch_size_max}"),
    ("latency p50", lambda f: _seconds(f.latency_p50_ms)),
    ("latency p95", lambda f: _seconds(f.latency_p95_ms)),
    ("latency p99", lambda f: _seconds(f.latency_p99_ms)),
    ("latency max", lambda f: _seconds(f.latency_max_ms)),
    ("reasons", lambda f: ", ".join(f"{k} {v:,}" for k, v in f.reasons.items()) or "-"),
    ("batch sizes", lambda f: ", ".join(f"{k}: {v:,}" for k, v in f.batch_size_histogram.items()) or "-"),
    ("expired rows (events)", lambda f: f"{f.expired:,} ({f.expired_events:,})"),
    ("late arrivals (older than the TTL when they arrived)", lambda f: f"{f.late_arrivals:,}"),
    ("throttled batches", lambda f: f"{f.held_back_batches:,}"),
    ("throttled wait p50 / p95 / max", lambda f: f"{_seconds(f.held_back_p50_ms)} / {_seconds(f.held_back_p95_ms)}"
                                                 f" / {_seconds(f.held_back_max_ms)}"),
    ("unbatched (must be 0)", lambda f: f"{f.unbatched:,}"),
)


def _input_lines(source: InputSummary) -> list[str]:
    files = (f"{len(source.files)} file(s): " + ", ".join(source.files[:5])
             + (f" and {len(source.files) - 5} more" if len(source.files) > 5 else "")) if source.files else "-"
    return [printable(line) for line in (f"source: {source.source}", f"files: {files}", f"time span: {_span(source)}",
                                         f"records: {source.records:,}", f"groups: {source.groups:,}")]


def render_markdown(figures: Sequence[PolicyFigures], source: InputSummary | None = None,
                    max_p95_ms: float | None = None, chart_name: str | None = "chart.png") -> str:
    lines = ["# Replay report", ""]
    if source:
        lines += ["## Input", "", *(f"- {line}" for line in _input_lines(source)), ""]
    advice = recommendation_text(figures, max_p95_ms)
    if advice:
        lines += ["## Recommendation", "", advice, ""]
    if chart_name:
        lines += [f"![p95 latency against compaction, one point per policy]({chart_name})", ""]
    lines += ["## Policies", "", NAME_HELP, "", GLOSSARY, "", "| id | policy | dominated by |", "|---|---|---|"]
    lines += [f"| {ident} | `{name}` | {by} |" for ident, name, by in _key(figures)]
    lines += ["", "| | " + " | ".join(short_ids(figures).values()) + " |", "|---|" + "---|" * len(figures)]
    for label, cell in _ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(f) for f in figures) + " |")
    lines += ["", "## Worst groups", "", WORST_HELP, "", "| id | group | p95 latency | max latency | batches |",
              "|---|---|---|---|---|"]
    lines += [f"| {ident} | {_md_code(g)} | {p95} | {top} | {n} |" for ident, g, p95, top, n in _worst_rows(figures)]
    return "\n".join(lines) + "\n"


DOMINATED_HELP = ("A policy is dominated when another one has at least its compaction and at most its p95 latency "
                  "(better on one, no worse on the other): there is no reason to choose it.")
WORST_HELP = (f"Per policy, the {WORST_GROUPS} groups with the highest p95 latency: where a policy's "
              "latency comes from (a hot group held to its hard window, a group throttled by its rate limit).")


def _key(figures: Sequence[PolicyFigures]) -> list[tuple[str, str, str]]:
    """(short id, policy name, the id of a policy that dominates it or '-') per policy."""
    ids, beaten = short_ids(figures), dominated(figures)
    return [(ids[f.policy], f.policy, ids[beaten[f.policy]] if f.policy in beaten else "-") for f in figures]


def _worst_rows(figures: Sequence[PolicyFigures]) -> list[tuple[str, str, str, str, str]]:
    """One row per worst group; the group key printable (a producer chose it: it is shown as text)."""
    ids = short_ids(figures)
    return [(ids[f.policy], printable(g["group_key"]), _seconds(g["latency_p95_ms"]), _seconds(g["latency_max_ms"]),
             f"{g['batches']:,}") for f in figures for g in f.worst_groups]


def _md_code(text: str) -> str:
    """``text`` as a Markdown code span in a table cell: fenced with more backticks than its
    longest run of them, its ``|`` escaped (the table's column separator)."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if longest else text
    return fence + padded.replace("|", "\\|") + fence


def _code(text: str) -> str:
    """Markdown-ish `code` spans to HTML (text escaped first)."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def render_html(figures: Sequence[PolicyFigures], source: InputSummary | None = None,
                max_p95_ms: float | None = None, chart_name: str | None = "chart.png") -> str:
    head = "".join(f"<th>{ident}</th>" for ident in short_ids(figures).values())
    body = "".join(
        f"<tr><th>{html.escape(label)}</th>" + "".join(f"<td>{html.escape(cell(f))}</td>" for f in figures) + "</tr>"
        for label, cell in _ROWS
    )
    sections = []
    if source:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in _input_lines(source))
        sections.append(f"<h2>Input</h2><ul>{items}</ul>")
    advice = recommendation_text(figures, max_p95_ms)
    if advice:
        sections.append(f'<h2>Recommendation</h2><p class="advice">{_code(advice)}</p>')
    if chart_name:
        sections.append(f'<p><img src="{html.escape(chart_name)}" '
                        'alt="p95 latency against compaction, one point per policy"></p>')
    key = "".join(f"<tr><th>{i}</th><td class=\"name\"><code>{html.escape(n)}</code></td><td>{by}</td></tr>"
                  for i, n, by in _key(figures))
    sections.append(f"<h2>Policies</h2><p>{_code(NAME_HELP)}</p><p>{_code(GLOSSARY)}</p>"
                    f"<p>{_code(DOMINATED_HELP)}</p><table><tr><th>id</th><th>policy</th><th>dominated by</th></tr>"
                    f"{key}</table><p></p><table><tr><th></th>{head}</tr>{body}</table>")
    worst = "".join(f"<tr><th>{i}</th><td class=\"name\"><code>{html.escape(g)}</code></td><td>{p95}</td>"
                    f"<td>{top}</td><td>{n}</td></tr>" for i, g, p95, top, n in _worst_rows(figures))
    sections.append(f"<h2>Worst groups</h2><p>{_code(WORST_HELP)}</p><table><tr><th>id</th><th>group</th>"
                    f"<th>p95 latency</th><th>max latency</th><th>batches</th></tr>{worst}</table>")
    return (
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Replay report</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:1em auto}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}table{border-collapse:collapse}"
        "td.name{text-align:left;white-space:nowrap}tr th:first-child{text-align:left;white-space:nowrap}"
        "img{max-width:100%}"
        ".advice{background:#eef6ee;border-left:4px solid #3a7d44;padding:6px 10px}</style></head>"
        "<body><h1>Replay report</h1>" + "".join(sections) + "</body></html>\n"
    )


def write_report(figures: Sequence[PolicyFigures], out_dir: Path, source: InputSummary | None = None,
                 max_p95_ms: float | None = None) -> dict[str, Path]:
    """``report.md``, ``report.html``, ``chart.png`` and ``report.json`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "chart": render_chart(figures, out_dir / "chart.png", max_p95_ms),
        "markdown": out_dir / "report.md",
        "html": out_dir / "report.html",
        "json": out_dir / "report.json",
    }
    paths["markdown"].write_text(render_markdown(figures, source, max_p95_ms), encoding="utf-8")
    paths["html"].write_text(render_html(figures, source, max_p95_ms), encoding="utf-8")
    best = recommend(figures, max_p95_ms) if max_p95_ms is not None else None
    document = {"input": source.as_dict() if source else None, "max_p95_ms": max_p95_ms,
                "recommended": best.policy if best else None, "policies": [f.as_dict() for f in figures]}
    paths["json"].write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return paths
