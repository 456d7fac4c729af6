"""The IaC security scan (checkov, infra/iac_scan.py) on every synthesized environment: nothing
beyond the accepted findings of infra/checkov-accepted.toml, each with its reason; and a new
insecure resource (a test-only stack) fails the scan. One checkov run for all templates."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.infra


def _insecure_template(outdir: Path) -> Path:
    """A test-only stack, laid out like the real ones (Stage/Consolidator), with SSH open to the world."""
    from app import create_app
    from aws_cdk import Stack, Stage
    from aws_cdk import aws_ec2 as ec2

    app = create_app(outdir=str(outdir))
    stack = Stack(Stage(app, "Intruders"), "Consolidator")
    ec2.CfnSecurityGroup(stack, "OpenSsh", group_description="test only: SSH from anywhere",
                         security_group_ingress=[ec2.CfnSecurityGroup.IngressProperty(
                             ip_protocol="tcp", from_port=22, to_port=22, cidr_ip="0.0.0.0/0")])
    assembly = app.synth()
    stage = assembly.get_nested_assembly("assembly-Intruders")
    return Path(stage.get_stack_artifact(stack.artifact_id).template_full_path)


@pytest.fixture(scope="module")
def scanned(synthesized, tmp_path_factory):
    import iac_scan

    insecure = _insecure_template(tmp_path_factory.mktemp("insecure"))
    real = [s.template_path for s in synthesized.values()]
    findings = iac_scan.scan([*real, insecure])
    by_template = {t.name: [f for f in findings if f.template == t.name] for t in (*real, insecure)}
    return iac_scan, [f for t in real for f in by_template[t.name]], by_template[insecure.name]


def test_every_finding_of_every_environment_is_accepted_with_a_reason_and_none_is_stale(scanned):
    iac_scan, real, _ = scanned
    assert real, "checkov reported nothing at all: is it scanning the templates?"
    new, stale = iac_scan.judge(real, iac_scan.load_accepted())
    assert [str(f) for f in new] == [], "fix these, or accept them with a reason in infra/checkov-accepted.toml"
    assert stale == [], "these acceptances match no finding any more: remove them"


def test_a_new_insecure_resource_fails_the_scan(scanned):
    iac_scan, _, insecure = scanned
    new, _ = iac_scan.judge(insecure, iac_scan.load_accepted())
    assert new and {f.path for f in new} == {"OpenSsh"}, new
    assert any(f.check == "CKV_AWS_24" for f in new)  # SSH (22) open to 0.0.0.0/0


def test_an_acceptance_without_a_reason_is_refused(tmp_path):
    import iac_scan

    bad = tmp_path / "accepted.toml"
    bad.write_text('[[accepted]]\ncheck = "CKV_AWS_24"\nresources = ["OpenSsh"]\nreason = "fine"\n')
    with pytest.raises(ValueError, match="CKV_AWS_24.*reason"):
        iac_scan.load_accepted(bad)
