"""The configuration reference is written from the settings' declarations, never by hand: the
committed page is what ``consolidator docs config`` writes, and every setting has what the page
and the derived options show (a doc line, a runtime that reads it)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from consolidator.cli import app
from consolidator.settings import all_models
from consolidator.settings.reference import PAGE, configuration_reference, declarations

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_configuration_reference_is_the_one_the_declarations_write():
    committed = (ROOT / PAGE).read_text()
    assert committed == configuration_reference(), f"{PAGE} differs from the settings' declarations: run `make docs`"


def test_every_setting_has_a_doc_line_and_a_runtime_that_reads_it():
    for name, (declared_in, info, used_by) in declarations().items():
        assert info.description and info.description.strip(), f"{declared_in.__name__}.{name} has no doc line"
        assert used_by, f"{name}: no settings model with USED_BY reads it"
    assert all(name in configuration_reference() for model in all_models() for name in
               (f"CONSOLIDATOR_{field.upper()}" for field in model.model_fields))


def test_docs_config_writes_the_page_and_checks_it(tmp_path):
    out = tmp_path / "configuration.md"
    runner = CliRunner()
    assert runner.invoke(app, ["docs", "config", "--check", "--out", str(out)]).exit_code == 1
    assert runner.invoke(app, ["docs", "config", "--out", str(out)]).exit_code == 0
    assert out.read_text() == configuration_reference()
    assert runner.invoke(app, ["docs", "config", "--check", "--out", str(out)]).exit_code == 0
