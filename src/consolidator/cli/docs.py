"""``consolidator docs``: the generated pages and files, printed on stdout (``make docs`` writes
them where they are committed; tests compare the committed files with this output)."""

from __future__ import annotations

import typer

from consolidator.cli.render import echo

docs_app = typer.Typer(help="Generated reference pages and dashboards (make docs writes them).", no_args_is_help=True)


def _lines(text: str) -> None:
    for line in text.splitlines():
        echo(line)


@docs_app.command("metrics")
def metrics() -> None:
    """The metrics reference (docs/reference/metrics.md): every metric's EMF and Prometheus name,
    unit, kind and meaning, and the dashboard panels."""
    from consolidator.services.metrics_reference import reference_page

    _lines(reference_page())


@docs_app.command("grafana")
def grafana() -> None:
    """The Grafana dashboard of the worker's metrics (deploy/grafana/consolidator.json), from the
    panel list the CloudWatch dashboard is built from."""
    from consolidator.services.panels import grafana_json

    _lines(grafana_json())
