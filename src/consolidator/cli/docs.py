"""``consolidator docs``: pages written from the code, so they are never written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from consolidator.cli.render import echo

docs_app = typer.Typer(help="Pages written from the code (the configuration and metrics references, the Grafana dashboard).",
                       no_args_is_help=True)

CheckOption = Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 when the file differs.")]


def _write_or_check(out: Path, text: str, source: str, check: bool) -> None:
    if check:
        if not out.is_file() or out.read_text() != text:
            echo(f"{out} differs from {source}: run `make docs`", err=True)
            raise typer.Exit(1)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    echo(f"wrote {out}")


@docs_app.command("metrics")
def metrics(
    out: Annotated[Path, typer.Option("--out", help="Where the page goes.")] = Path("docs/reference/metrics.md"),
    check: CheckOption = False,
) -> None:
    """Write the metrics reference from the one list of metrics and of panels
    (src/consolidator/services/metrics.py, panels.py): every metric's EMF and Prometheus name,
    unit, kind and meaning, and the dashboard panels. Needs no CONSOLIDATOR_* variable."""
    from consolidator.services.metrics_reference import reference_page

    _write_or_check(out, reference_page(), "the list of metrics", check)


@docs_app.command("grafana")
def grafana(
    out: Annotated[Path, typer.Option("--out", help="Where the dashboard goes.")] = Path(
        "deploy/grafana/consolidator.json"),
    check: CheckOption = False,
) -> None:
    """Write the Grafana dashboard of the worker's metrics from the panel list the CloudWatch
    dashboard is built from (src/consolidator/services/panels.py). Needs no CONSOLIDATOR_* variable."""
    from consolidator.services.panels import grafana_json

    _write_or_check(out, grafana_json(), "the panel list", check)


@docs_app.command("config")
def config(
    out: Annotated[Path, typer.Option("--out", help="Where the page goes.")] = Path("docs/reference/configuration.md"),
    check: CheckOption = False,
) -> None:
    """Write the configuration reference from the settings' declarations
    (src/consolidator/settings/): every variable, its default, bounds, doc line and runtimes.
    Needs no CONSOLIDATOR_* variable."""
    from consolidator.settings.reference import configuration_reference

    _write_or_check(out, configuration_reference(), "the settings' declarations", check)
