"""``consolidator docs``: pages written from the code, so they are never written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from consolidator.cli.render import echo

docs_app = typer.Typer(help="Pages written from the code (the configuration reference).", no_args_is_help=True)


@docs_app.command("config")
def config(
    out: Annotated[Path, typer.Option("--out", help="Where the page goes.")] = Path("docs/reference/configuration.md"),
    check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 when the page differs.")] = False,
) -> None:
    """Write the configuration reference from the settings' declarations
    (src/consolidator/settings/): every variable, its default, bounds, doc line and runtimes.
    Needs no CONSOLIDATOR_* variable."""
    from consolidator.settings.reference import configuration_reference

    text = configuration_reference()
    if check:
        if not out.is_file() or out.read_text() != text:
            echo(f"{out} differs from the settings' declarations: run `make docs`", err=True)
            raise typer.Exit(1)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    echo(f"wrote {out}")
