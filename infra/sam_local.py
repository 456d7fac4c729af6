"""The AWS SAM CLI without a container: ``sam validate --lint`` of the synthesized templates,
``sam local generate-event``, and the Lambda Runtime Interface Emulator that the SAM CLI ships
(``samcli/local/rapid/aws-lambda-rie-*``), which runs a function behind the real Lambda runtime
API on this machine.

    python infra/sam_local.py [cdk.out]     # after a synth; exit 1 when a template fails the lint
    python infra/sam_local.py serve ingest [--env-vars local-env.json] [--port 9000] [--timeout S] [--template T]
        # one function of a synthesized template behind the emulator, until Ctrl-C: post events
        # to http://127.0.0.1:9000/2015-03-31/functions/function/invocations

The SAM CLI runs from its own environment, ``.tools/sam`` (``scripts/setup.sh test`` installs it
from ``scripts/sam-requirements.txt``, by hash), offline: telemetry off, and its weekly PyPI
version check marked as done (a configuration directory of its own per call).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAM_ENV = REPO / ".tools" / "sam"
SAM = SAM_ENV / "bin" / "sam"
# CDK puts a DependsOn next to a Ref/GetAtt on purpose: harmless (`make synth`'s cfn-lint skips it too).
IGNORED_LINT_CHECKS = ("W3005",)
INVOCATIONS = "/2015-03-31/functions/function/invocations"  # the emulator's invoke path


class SamError(RuntimeError):
    """The SAM CLI or the emulator is missing or could not run."""


def _require_sam() -> None:
    if not SAM.exists():
        raise SamError(f"{SAM.relative_to(REPO)} is missing: run `bash scripts/setup.sh test` (or `make setup`)")


def run_sam(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``sam ARGS`` from .tools/sam, offline (no telemetry, no version check)."""
    _require_sam()
    with tempfile.TemporaryDirectory(prefix="sam-") as app_dir:
        Path(app_dir, "metadata.json").write_text(json.dumps(
            {"telemetryEnabled": False, "lastVersionCheck": time.time()}))
        env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "__SAM_CLI_APP_DIR": app_dir}
        return subprocess.run([str(SAM), *args], cwd=cwd or app_dir, env=env, capture_output=True, text=True,
                              check=False, timeout=timeout)


def lint(template: Path, region: str | None = None) -> str | None:
    """``sam validate --lint`` of ``template`` (a copy that tells cfn-lint to skip
    :data:`IGNORED_LINT_CHECKS`); None when it passes, else SAM's report."""
    document = json.loads(template.read_text())
    config = document.setdefault("Metadata", {}).setdefault("cfn-lint", {}).setdefault("config", {})
    config["ignore_checks"] = sorted({*config.get("ignore_checks", ()), *IGNORED_LINT_CHECKS})
    with tempfile.TemporaryDirectory(prefix="sam-lint-") as tmp:
        copy = Path(tmp) / template.name
        copy.write_text(json.dumps(document))
        done = run_sam("validate", "--lint", "--template-file", str(copy),
                       *(["--region", region] if region else []), cwd=Path(tmp))
    if done.returncode == 0 and "is a valid SAM Template" in done.stdout:
        return None
    return f"{template.name}: sam validate --lint exit {done.returncode}\n{done.stdout}{done.stderr}".strip()


def lint_all(templates: list[Path], region: str | None = None) -> dict[str, str]:
    """Template name -> SAM's report, for each template that fails (two at a time)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        reports = dict(zip(templates, pool.map(lambda t: lint(t, region), templates), strict=True))
    return {t.name: report for t, report in reports.items() if report is not None}


def generate_event(service: str, event: str, *options: str) -> dict:
    """What ``sam local generate-event SERVICE EVENT [OPTIONS]`` prints, parsed."""
    done = run_sam("local", "generate-event", service, event, *options, timeout=60)
    if done.returncode != 0:
        raise SamError(f"sam local generate-event {service} {event} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def emulator_binary() -> Path:
    """The Runtime Interface Emulator for this machine's architecture, as the SAM CLI ships it."""
    _require_sam()
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    found = sorted(SAM_ENV.glob(f"lib/python3*/site-packages/samcli/local/rapid/aws-lambda-rie-{arch}"))
    if arch is None or not found:
        raise SamError(f"the SAM CLI in {SAM_ENV.relative_to(REPO)} ships no emulator for {platform.machine()}")
    return found[0]


@dataclass(frozen=True)
class TemplateFunction:
    """A function of a synthesized template, as ``sam local`` reads it."""

    logical_id: str
    handler: str  # module.function, relative to the code directory
    timeout_seconds: int
    memory_mb: int
    code: Path  # the bundled asset directory
    environment: dict[str, str]  # the literal variables (intrinsic functions dropped, as SAM does)


def function_logical_id(template: Path, name: str) -> str:
    """The logical id of function ``name`` (``ingest``) of the stack: ``.../Functions/Ingest/Resource``."""
    suffix = f"/Functions/{name.capitalize()}/Resource"
    found = [key for key, resource in json.loads(template.read_text())["Resources"].items()
             if resource["Type"] == "AWS::Lambda::Function"
             and resource.get("Metadata", {}).get("aws:cdk:path", "").endswith(suffix)]
    if len(found) != 1:
        raise SamError(f"{template.name} has no function {name!r} (a construct path ending in {suffix})")
    return found[0]


def template_function(template: Path, logical_id: str) -> TemplateFunction:
    resource = json.loads(template.read_text())["Resources"][logical_id]
    properties, metadata = resource["Properties"], resource.get("Metadata", {})
    if metadata.get("aws:asset:property") != "Code":
        raise SamError(f"{logical_id} in {template.name} has no asset metadata: synthesize with infra/app.py")
    variables = properties.get("Environment", {}).get("Variables", {})
    return TemplateFunction(
        logical_id=logical_id, handler=properties["Handler"], timeout_seconds=int(properties.get("Timeout", 3)),
        memory_mb=int(properties.get("MemorySize", 128)),
        code=(template.parent / metadata["aws:asset:path"]).resolve(),
        environment={k: v for k, v in variables.items() if isinstance(v, str)})


def code_layout(asset: Path, dependencies: Path, into: Path) -> Path:
    """``into`` holding (as symbolic links) every entry of the bundled ``asset`` that is not one
    of its locked dependencies: the handler and the ``consolidator`` package exactly as bundled,
    without the bundle's arm64 wheels, which the caller replaces by this machine's."""
    into.mkdir(parents=True, exist_ok=True)
    bundled_dependencies = {p.name for p in dependencies.iterdir()}
    for entry in sorted(asset.iterdir()):
        if entry.name not in bundled_dependencies and not entry.name.startswith("."):
            (into / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return into


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmulatedFunction:
    """One function behind the emulator: ``invoke`` posts an event to its HTTP endpoint."""

    name: str
    url: str
    process: subprocess.Popen
    log: Path
    _log_file: object = field(repr=False, default=None)

    def invoke(self, event: object, timeout: float = 120) -> object:
        """The function's response (a Lambda error comes back as ``{"errorType": ...}``)."""
        request = urllib.request.Request(self.url + INVOCATIONS, data=json.dumps(event).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")

    def output(self) -> str:
        """What the emulator and the function printed so far (logs, EMF metrics, REPORT lines)."""
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log_file is not None:
            self._log_file.close()


def emulate(task_root: Path, handler: str, *, name: str, environment: dict[str, str], timeout_seconds: int,
            memory_mb: int, log: Path, python: str = sys.executable, path: tuple[str, ...] = (),
            port: int | None = None) -> EmulatedFunction:
    """Start the emulator on loopback ``port`` (default: a free one) with ``python -S -m
    awslambdaric HANDLER`` as the runtime, in ``task_root`` as Lambda's /var/task: the module
    search path is the task root, then ``path`` (the dependencies), and nothing of ``python``'s
    own site-packages."""
    if port is not None:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as error:
                raise SamError(f"port {port} on 127.0.0.1 is taken ({error.strerror}): choose another") from error
    api_port, http_port = _free_port(), port or _free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
        **environment,
        "AWS_LAMBDA_FUNCTION_NAME": name, "AWS_LAMBDA_FUNCTION_TIMEOUT": str(timeout_seconds),
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb), "LAMBDA_TASK_ROOT": str(task_root),
        "PYTHONPATH": os.pathsep.join([str(task_root), *path]), "PYTHONDONTWRITEBYTECODE": "1",
    }
    log_file = log.open("ab")
    process = subprocess.Popen(
        [str(emulator_binary()), "--log-level", "error",
         "--runtime-interface-emulator-address", f"127.0.0.1:{http_port}",
         "--runtime-api-address", f"127.0.0.1:{api_port}",
         python, "-S", "-m", "awslambdaric", handler],
        cwd=task_root, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    function = EmulatedFunction(name, f"http://127.0.0.1:{http_port}", process, log, log_file)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", http_port), timeout=0.5).close()
            return function
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                function.stop()
                raise SamError(f"the emulator for {name} did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)


def start_function(template: Path, name: str, work: Path, overrides: dict[str, str] | None = None, *,
                   timeout_seconds: int | None = None, port: int | None = None) -> EmulatedFunction:
    """Function ``name`` of ``template`` behind the emulator, as ``sam local invoke`` runs it:
    its ``Handler``, ``Timeout`` (unless ``timeout_seconds``) and ``MemorySize``, its bundled
    code laid out in ``work/name`` (without the bundle's wheels: this interpreter's packages
    instead), its literal environment variables and then ``overrides``. Output in ``work/name.log``."""
    from bundle import dependencies

    function = template_function(template, function_logical_id(template, name))
    task_root = code_layout(function.code, dependencies(), work / name)
    return emulate(task_root, function.handler, name=function.logical_id,
                   environment={**function.environment, **(overrides or {})},
                   timeout_seconds=timeout_seconds or function.timeout_seconds, memory_mb=function.memory_mb,
                   log=work / f"{name}.log", path=project_site_packages(), port=port)


def project_site_packages() -> tuple[str, ...]:
    """Where this interpreter's packages are (the project's .venv: x86_64 or arm64, this machine's)."""
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def local_environment(env_vars: Path | None, logical_id: str) -> dict[str, str]:
    """``sam local invoke --env-vars`` semantics: ``Parameters`` for every function, then the
    section named by the function's logical id."""
    if env_vars is None:
        return {}
    document = json.loads(env_vars.read_text())
    merged = {**document.get("Parameters", {}), **document.get(logical_id, {})}
    return {key: str(value) for key, value in merged.items()}


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def serve(argv: list[str]) -> int:
    import argparse
    import signal

    from bundle import BundleError

    parser = argparse.ArgumentParser(prog="python infra/sam_local.py serve",
                                     description="One function behind the Lambda Runtime Interface Emulator.")
    parser.add_argument("function", help="ingest, flush, cleanup, acks or migrate")
    parser.add_argument("--template", type=Path, help="synthesized template (default: the Dev stage's in cdk.out)")
    parser.add_argument("--env-vars", type=Path, help="JSON like sam local invoke's: Parameters and/or <LogicalId>")
    parser.add_argument("--port", type=int, default=9000, help="loopback HTTP port of the emulator (default 9000)")
    parser.add_argument("--timeout", type=int, help="seconds per invocation (default: the template's Timeout)")
    args = parser.parse_args(argv)
    template = args.template or next(iter(sorted((REPO / "cdk.out").glob("assembly-Dev/*.template.json"))), None)
    if template is None:
        print("no synthesized Dev template in cdk.out: run `make synth` first", file=sys.stderr)
        return 2
    try:
        logical_id = function_logical_id(template, args.function)
        with tempfile.TemporaryDirectory(prefix=f"sam-{args.function}-") as tmp:
            emulated = start_function(template, args.function, Path(tmp),
                                      local_environment(args.env_vars, logical_id), port=args.port,
                                      timeout_seconds=args.timeout)
            print(f"{logical_id} on {emulated.url}{INVOCATIONS}; its output follows; Ctrl-C stops it", flush=True)
            signal.signal(signal.SIGINT, _interrupt)  # Ctrl-C, and a kill, stop the emulator too
            signal.signal(signal.SIGTERM, _interrupt)
            shown = 0
            try:
                while emulated.process.poll() is None:
                    text = emulated.output()
                    sys.stdout.write(text[shown:])
                    sys.stdout.flush()
                    shown = len(text)
                    time.sleep(0.2)
            except KeyboardInterrupt:
                pass
            finally:
                emulated.stop()
                sys.stdout.write(emulated.output()[shown:])
    except (SamError, BundleError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    import argparse

    from iac_scan import templates_in  # the same synthesized templates the IaC scan reads

    parser = argparse.ArgumentParser(
        prog="python infra/sam_local.py", description="sam validate --lint of every synthesized template (exit 1"
        " when one fails).", epilog="python infra/sam_local.py serve --help: one function behind the Lambda Runtime"
        " Interface Emulator, without a container.")
    parser.add_argument("outdir", nargs="?", type=Path, default=REPO / "cdk.out", metavar="CDK_OUT",
                        help="the synthesized cloud assembly (default: cdk.out, after `make synth`)")
    outdir = parser.parse_args(argv).outdir
    if not outdir.is_dir():
        parser.error(f"{outdir} is not a directory: give the cloud assembly `make synth` wrote (cdk.out)")
    templates = templates_in(outdir)
    if not templates:
        print(f"no synthesized templates in {outdir}: run `make synth` first", file=sys.stderr)
        return 2
    failed = lint_all(templates)
    for report in failed.values():
        print(report)
    print(f"sam validate --lint: {len(templates)} templates, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
