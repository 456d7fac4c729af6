"""The Kubernetes manifests of deploy/kubernetes/: valid against the Kubernetes API schemas
(offline, with the schemas kubernetes-validate bundles; strict, so a misspelt field fails), in
agreement with the settings declarations (every CONSOLIDATOR_* name they set is a setting, and
the ConfigMap loads as the worker's settings) and with the Containerfile (user, port, probes)."""

from __future__ import annotations

import copy

import pytest

from consolidator.settings import WorkerSettings, known_variables, load_settings
from tests.deploy.manifests import (
    CONTAINERFILE,
    by_kind,
    documents,
    env_of,
    final_stage,
    manifest_files,
)

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="dev extra not installed")

# The oldest Kubernetes the manifests are written for (docs/guide/container.md) and the newest the
# validator knows.
OLDEST_KUBERNETES = "1.25"


def _validate(document: dict, version: str) -> None:
    kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize("version", [OLDEST_KUBERNETES, kubernetes_validate.utils.latest_version()])
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_every_manifest_is_valid_for_kubernetes(path, version):
    problems = []
    for document in documents(path):
        try:
            _validate(document, version)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            problems.append(f"{path.name}: {document['kind']} at {where}: {exc.message} (Kubernetes {version})")
    assert problems == []


@pytest.mark.parametrize(("breakage", "reason"), [
    (lambda spec: spec.__setitem__("livenessProbes", spec.pop("livenessProbe")), "livenessProbes"),
    (lambda spec: spec["ports"][0].__setitem__("containerPort", "http"), "'http' is not of type 'integer'"),
    (lambda spec: spec["securityContext"].__setitem__("runAsNonRoot", "yes"), "'yes' is not of type 'boolean'"),
])
def test_a_broken_deployment_is_refused(breakage, reason):
    deployment = copy.deepcopy(by_kind()["Deployment"])
    breakage(deployment["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(kubernetes_validate.ValidationError) as caught:
        _validate(deployment, OLDEST_KUBERNETES)
    assert reason in caught.value.message


def _set_variables() -> dict[str, str]:
    """Every CONSOLIDATOR_* variable the manifests set, with the value they give (the Secret's
    keys with an empty value)."""
    kinds = by_kind()
    values = dict(kinds["ConfigMap"]["data"])
    values |= dict.fromkeys(kinds["Secret"].get("stringData", {}), "")
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    values |= {e["name"]: e.get("value", "") for e in container.get("env", [])}
    return values


def test_every_variable_the_manifests_set_is_a_setting():
    unknown = {name for name in _set_variables() if name.startswith("CONSOLIDATOR_")} - known_variables()
    assert unknown == set()


def _worker_settings() -> WorkerSettings:
    """The ConfigMap with the Secret's keys filled in, loaded as the worker's settings (every
    value checked as the worker checks it at start)."""
    environ = _set_variables() | {
        "CONSOLIDATOR_DATABASE_URL": "mysql://consolidator:pw@mysql:3306/consolidator",
        "CONSOLIDATOR_REDIS_URL": "redis://redis:6379/0",
        "CONSOLIDATOR_KAFKA_SASL_USERNAME": "consolidator",
        "CONSOLIDATOR_KAFKA_SASL_PASSWORD": "pw",
    }
    return load_settings(WorkerSettings, environ=environ)


def test_the_configmap_loads_as_the_worker_settings_with_credentials_filled_in():
    settings = _worker_settings()
    assert settings.debounce_seconds == float(by_kind()["ConfigMap"]["data"]["CONSOLIDATOR_DEBOUNCE_SECONDS"])
    assert settings.kafka_sasl_password.get_secret_value() == "pw"


def test_the_secret_example_holds_no_value_and_matches_what_the_deployment_reads():
    kinds = by_kind()
    secret = kinds["Secret"]
    filled = sorted(key for key, value in secret["stringData"].items() if value)  # names only: never a value
    assert filled == [], "the example Secret must not carry values"
    assert "data" not in secret
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    refs = [e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert {r["name"] for r in refs} == {secret["metadata"]["name"]}
    assert {r["key"] for r in refs} == set(secret["stringData"])
    # credentials come from the Secret only: never a literal value, never the ConfigMap
    assert not {e["name"] for e in container["env"] if "value" in e} & {r["key"] for r in refs}
    assert not set(kinds["ConfigMap"]["data"]) & {r["key"] for r in refs}


def test_the_deployment_agrees_with_the_containerfile():
    kinds = by_kind()
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    image = final_stage(CONTAINERFILE.read_text())
    user = next(rest for keyword, rest in image if keyword == "USER")
    uid, gid = (int(part) for part in user.split(":"))
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    assert pod["securityContext"]["runAsNonRoot"] is True and uid != 0

    exposed = {int(rest) for keyword, rest in image if keyword == "EXPOSE"}
    port = int(env_of(image)["CONSOLIDATOR_WORKER_HTTP_PORT"])
    assert exposed == {port} == {int(kinds["ConfigMap"]["data"]["CONSOLIDATOR_WORKER_HTTP_PORT"])}
    (named,) = container["ports"]
    assert named["containerPort"] == port
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": named["name"]}, probe
    healthcheck = next(rest for keyword, rest in image if keyword == "HEALTHCHECK")
    assert "/healthz" in healthcheck and "CONSOLIDATOR_WORKER_HTTP_PORT" in healthcheck
    assert "command" not in container, "the image's ENTRYPOINT (consolidator worker) must stay"


def test_the_pod_is_locked_down_and_stops_within_its_grace_period():
    pod = by_kind()["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["enableServiceLinks"] is False  # else a Service named consolidator-* injects unknown settings
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert {"requests", "limits"} <= set(container["resources"])
    # the worker exits within its shutdown bound; Kubernetes sends SIGKILL after the grace period
    assert pod["terminationGracePeriodSeconds"] > _worker_settings().worker_shutdown_seconds


def test_the_budget_and_the_service_select_the_workers():
    kinds = by_kind()
    labels = kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert kinds["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert kinds["PodDisruptionBudget"]["spec"]["maxUnavailable"] < kinds["Deployment"]["spec"]["replicas"]
    service = kinds["Service"]["spec"]
    assert service["selector"].items() <= labels.items()
    port_names = {p["name"] for p in kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {p["targetPort"] for p in service["ports"]} <= port_names
