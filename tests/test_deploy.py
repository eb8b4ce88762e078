"""Deployment artefacts: kustomize renders, offline schema validation, agreement with the server.

Every kustomization under deploy/ is rendered with a pinned kubectl (installed into .tools/ by
scripts/deploy_tools.sh) and each object is validated against the Kubernetes JSON schemas that
the kubernetes-validate package bundles, so nothing here needs a cluster or the network once the
tools are installed. The remaining tests check that the manifests and the Dockerfile agree with
the server's own settings: ports, health service, drain period, policy path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from npu_resolver_server import settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
TOOLS_SCRIPT = ROOT / "scripts" / "deploy_tools.sh"

# Kustomizations rendered by the suite, by short name.
TARGETS: dict[str, str] = {
    "base": "deploy/k8s/base",
    "dev": "deploy/k8s/overlays/dev",
    "prod": "deploy/k8s/overlays/prod",
}
# Short paths that must render exactly what the overlay they name renders.
ALIASES: dict[str, str] = {
    "deploy/overlays/dev": "dev",
    "deploy/overlays/prod": "prod",
}
# Oldest Kubernetes the manifests support (gRPC probes and PDB unhealthyPodEvictionPolicy are
# there from 1.27/1.28 on) and the newest whose schemas kubernetes-validate ships.
K8S_VERSIONS: tuple[str, ...] = ("1.28.0", kubernetes_validate.latest_version())

CONTAINER = "npu-resolver"
POLICY_CONFIGMAP = "npu-resolver-policy"
HEADLESS_SERVICE = "npu-resolver-headless"

Obj = dict[str, Any]


# --- tools and rendering


@pytest.fixture(scope="session")
def kubectl() -> Path:
    """The pinned kubectl, installed on first use. Fails, never skips, when it cannot be had."""
    env = {**os.environ, "PYTHON": sys.executable}
    try:
        proc = subprocess.run(
            ["bash", str(TOOLS_SCRIPT)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"{TOOLS_SCRIPT.name} could not run: {exc}")
    if proc.returncode != 0:
        pytest.fail(
            f"{TOOLS_SCRIPT.name} failed (exit {proc.returncode}); the deploy tests need it.\n"
            f"{proc.stderr}{proc.stdout}"
        )
    path = Path(proc.stdout.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        pytest.fail(f"{TOOLS_SCRIPT.name} reported {path}, which is not executable")
    return path


def _render(kubectl: Path, directory: str) -> list[Obj]:
    proc = subprocess.run(
        [str(kubectl), "kustomize", directory],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    objects = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    assert objects, f"kubectl kustomize {directory} rendered nothing"
    assert all(isinstance(obj, dict) for obj in objects)
    return objects


@pytest.fixture(scope="session")
def rendered(kubectl: Path) -> dict[str, list[Obj]]:
    return {name: _render(kubectl, directory) for name, directory in TARGETS.items()}


def _one(objects: Sequence[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _pod_spec(objects: Sequence[Obj]) -> Obj:
    spec: Obj = _one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def _container(objects: Sequence[Obj]) -> Obj:
    containers = _pod_spec(objects)["containers"]
    matches = [c for c in containers if c["name"] == CONTAINER]
    assert len(matches) == 1, f"no container named {CONTAINER}"
    container: Obj = matches[0]
    return container


def _flags(args: Sequence[str]) -> dict[str, str]:
    """`--name value` and `--name=value` pairs of the server's command line."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        assert arg.startswith("--"), f"unexpected positional argument {arg!r} in {args}"
        if "=" in arg:
            name, value = arg.split("=", 1)
            i += 1
        else:
            assert i + 1 < len(args), f"{arg} has no value"
            name, value = arg, args[i + 1]
            i += 2
        assert name not in flags, f"{name} given twice"
        flags[name] = value
    return flags


def _server_flags(objects: Sequence[Obj]) -> dict[str, str]:
    container = _container(objects)
    # The image's entrypoint is `npu-resolve serve`; the manifest only passes arguments.
    assert "command" not in container, "command would bypass the image entrypoint"
    return _flags([str(a) for a in container.get("args", [])])


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}


def _cpu_cores(quantity: str | int | float) -> float:
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


# --- render and validate


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("target", TARGETS)
def test_renders_and_validates_offline(
    rendered: dict[str, list[Obj]], target: str, version: str
) -> None:
    errors: list[str] = []
    for obj in rendered[target]:
        label = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{label}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{label}: {exc.message}")
    assert not errors, f"{TARGETS[target]} against Kubernetes {version}:\n" + "\n".join(errors)


@pytest.mark.parametrize("alias", ALIASES)
def test_short_overlay_paths_render_the_same(
    kubectl: Path, rendered: dict[str, list[Obj]], alias: str
) -> None:
    assert _render(kubectl, alias) == rendered[ALIASES[alias]]


@pytest.mark.parametrize("target", TARGETS)
def test_expected_objects(rendered: dict[str, list[Obj]], target: str) -> None:
    objects = rendered[target]
    kinds = sorted(obj["kind"] for obj in objects)
    for kind in ("ConfigMap", "Deployment", "PodDisruptionBudget", "NetworkPolicy"):
        assert kind in kinds, f"{target}: no {kind}"
    assert kinds.count("Service") == 2, f"{target}: expected a Service and a headless Service"
    if target == "base":
        assert not any(obj["metadata"].get("namespace") for obj in objects)
    else:
        namespaces = {
            obj["metadata"].get("namespace") for obj in objects if obj["kind"] != "Namespace"
        }
        assert len(namespaces) == 1 and None not in namespaces, namespaces
        assert _one(objects, "Namespace")["metadata"]["name"] in namespaces


def test_dev_runs_one_replica_without_autoscaler(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["dev"]
    assert _one(objects, "Deployment")["spec"]["replicas"] == 1
    assert not [obj for obj in objects if obj["kind"] == "HorizontalPodAutoscaler"]


@pytest.mark.parametrize("target", ["base", "prod"])
def test_autoscaler_owns_the_replica_count(rendered: dict[str, list[Obj]], target: str) -> None:
    objects = rendered[target]
    deployment = _one(objects, "Deployment")
    hpa = _one(objects, "HorizontalPodAutoscaler")
    assert "replicas" not in deployment["spec"], "the HPA owns replicas; apply would reset them"
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    assert hpa["spec"]["minReplicas"] >= (3 if target == "prod" else 2)
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]


# --- pod security


@pytest.mark.parametrize("target", TARGETS)
def test_pod_runs_as_non_root_with_read_only_root(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    pod = _pod_spec(rendered[target])
    container = _container(rendered[target])
    pod_sc = pod.get("securityContext", {})
    sc = container.get("securityContext", {})

    assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    assert isinstance(uid, int) and uid > 0, "a numeric non-zero UID lets runAsNonRoot be checked"
    assert sc.get("readOnlyRootFilesystem") is True
    assert sc.get("allowPrivilegeEscalation") is False
    assert sc.get("privileged", False) is False
    assert sc.get("capabilities", {}).get("drop") == ["ALL"]
    assert not sc.get("capabilities", {}).get("add")
    seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
    assert seccomp.get("type") == "RuntimeDefault"
    assert pod.get("automountServiceAccountToken") is False

    # With a read-only root, /tmp (temporary files, Prometheus multi-process directory) must be
    # a writable emptyDir.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly", False)
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


@pytest.mark.parametrize("target", TARGETS)
def test_resources_have_requests_and_limits(rendered: dict[str, list[Obj]], target: str) -> None:
    container = _container(rendered[target])
    resources = container["resources"]
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources.get(section, {})), f"{target}: {section}"
    workers = int(_server_flags(rendered[target]).get("--workers", "1"))
    assert _cpu_cores(resources["limits"]["cpu"]) >= workers, "one CPU per worker process"


def test_prod_runs_two_workers_with_two_cpus(rendered: dict[str, list[Obj]]) -> None:
    assert _server_flags(rendered["prod"])["--workers"] == "2"
    assert _cpu_cores(_container(rendered["prod"])["resources"]["limits"]["cpu"]) == 2


# --- agreement with the server


def _health_port(objects: Sequence[Obj]) -> int:
    flags = _server_flags(objects)
    return int(flags.get("--health-port", flags.get("--port", settings.DEFAULT_PORT)))


@pytest.mark.parametrize("target", TARGETS)
def test_ports_match_server_settings(rendered: dict[str, list[Obj]], target: str) -> None:
    objects = rendered[target]
    flags = _server_flags(objects)
    container = _container(objects)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    assert int(flags["--port"]) == settings.DEFAULT_PORT == ports["grpc"] == 50051
    assert int(flags["--metrics-port"]) == settings.DEFAULT_METRICS_PORT == ports["metrics"] == 9464
    assert flags.get("--host") == "0.0.0.0", "the server must listen on the pod IP"
    assert _health_port(objects) in ports.values()
    assert len(set(ports.values())) == len(ports)

    annotations = _one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == settings.DEFAULT_METRICS_PORT
    assert annotations["prometheus.io/path"] == "/metrics"


@pytest.mark.parametrize("target", TARGETS)
def test_probes_are_grpc_on_the_health_port(rendered: dict[str, list[Obj]], target: str) -> None:
    objects = rendered[target]
    container = _container(objects)
    health_port = _health_port(objects)
    for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe_name == "startupProbe" and probe_name not in container:
            continue
        probe = container[probe_name]
        assert set(probe) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, probe_name
        assert probe["grpc"]["port"] == health_port, f"{target}: {probe_name} port"
    # Readiness follows the resolver service (NOT_SERVING while draining); liveness the
    # overall server status.
    readiness = container["readinessProbe"]["grpc"]
    assert readiness.get("service") == settings.HEALTH_SERVICE == "npu.resolver.v1.Resolver"
    assert container["livenessProbe"]["grpc"].get("service", "") == ""


@pytest.mark.parametrize("target", TARGETS)
def test_tls_keeps_probes_on_a_plaintext_health_port(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    objects = rendered[target]
    flags = _server_flags(objects)
    if "--tls-cert" not in flags:
        assert "--tls-key" not in flags
        return
    # Native gRPC probes cannot speak TLS: they must target --health-port, not --port.
    assert "--tls-key" in flags
    assert "--health-port" in flags and flags["--health-port"] != flags["--port"]
    container = _container(objects)
    pod = _pod_spec(objects)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    for flag in ("--tls-cert", "--tls-key"):
        path = PurePosixPath(flags[flag])
        (volume,) = [n for n in secrets if PurePosixPath(mounts[n]["mountPath"]) == path.parent]
        assert mounts[volume].get("readOnly") is True
        assert "subPath" not in mounts[volume]
        items = secrets[volume].get("items")
        assert items is None or path.name in {i["path"] for i in items}


def _pre_stop_sleep(container: Mapping[str, Any]) -> float:
    pre_stop = container["lifecycle"]["preStop"]
    if "sleep" in pre_stop:
        return float(pre_stop["sleep"]["seconds"])
    command = [str(part) for part in pre_stop["exec"]["command"]]
    if len(command) == 3 and command[1] == "-c":
        command = command[2].split()
    assert len(command) == 2 and PurePosixPath(command[0]).name == "sleep", command
    return float(command[1])


@pytest.mark.parametrize("target", TARGETS)
def test_grace_period_covers_pre_stop_and_drain(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    objects = rendered[target]
    container = _container(objects)
    pod = _pod_spec(objects)
    env = _env(container)
    drain = float(env.get("NPU_RESOLVER_GRACE_SECONDS", settings.DEFAULT_GRACE_SECONDS))
    delay = float(env.get("NPU_RESOLVER_DRAIN_DELAY_SECONDS", settings.DEFAULT_DRAIN_DELAY_SECONDS))
    pre_stop = _pre_stop_sleep(container)
    assert pre_stop > 0, "a preStop pause lets endpoints and DNS drop the pod before SIGTERM"
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > pre_stop + delay + drain, (
        f"{target}: terminationGracePeriodSeconds {grace} must exceed "
        f"preStop {pre_stop} s + NOT_SERVING delay {delay} s + drain {drain} s"
    )


@pytest.mark.parametrize("target", TARGETS)
def test_policy_configmap_is_mounted_where_the_server_reads_it(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    objects = rendered[target]
    policy = PurePosixPath(_server_flags(objects)["--policy"])
    assert policy == PurePosixPath("/etc/npu-resolver/policy.toml")
    container = _container(objects)
    pod = _pod_spec(objects)

    (mount,) = [
        m for m in container["volumeMounts"] if PurePosixPath(m["mountPath"]) == policy.parent
    ]
    assert "subPath" not in mount, "subPath mounts never see ConfigMap updates: no hot reload"
    assert mount.get("readOnly") is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    source = volume["configMap"]
    items = source.get("items")
    key = policy.name
    if items is not None:
        (item,) = [i for i in items if i["path"] == policy.name]
        key = item["key"]

    # A stable name (no hash suffix): edits update the mounted files instead of rolling pods.
    assert source["name"] == POLICY_CONFIGMAP
    configmap = _one(objects, "ConfigMap", source["name"])
    document = tomllib.loads(configmap["data"][key])
    assert "profiles" in document and "default" in document["profiles"]


@pytest.mark.parametrize("target", TARGETS)
def test_services_select_the_pods(rendered: dict[str, list[Obj]], target: str) -> None:
    objects = rendered[target]
    deployment = _one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    pdb = _one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"].get("maxUnavailable") == 1 or "minAvailable" in pdb["spec"]

    ports = {p["name"]: p["containerPort"] for p in _container(objects)["ports"]}
    for service in (obj for obj in objects if obj["kind"] == "Service"):
        assert service["spec"]["selector"].items() <= pod_labels.items()
        grpc = [p for p in service["spec"]["ports"] if p["name"] == "grpc"]
        assert len(grpc) == 1
        assert grpc[0]["port"] == settings.DEFAULT_PORT
        assert ports[str(grpc[0]["targetPort"])] == settings.DEFAULT_PORT

    headless = _one(objects, "Service", HEADLESS_SERVICE)
    assert headless["spec"]["clusterIP"] == "None"
    assert not headless["spec"].get("publishNotReadyAddresses", False)
    regular = [s for s in objects if s["kind"] == "Service" and s is not headless]
    assert [s["spec"].get("type", "ClusterIP") for s in regular] == ["ClusterIP"]
    assert regular[0]["spec"].get("clusterIP") != "None"


@pytest.mark.parametrize("target", TARGETS)
def test_network_policy_admits_what_the_services_serve_and_nothing_leaves(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    objects = rendered[target]
    policy = _one(objects, "NetworkPolicy")["spec"]
    pod_labels = _one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    assert policy.get("egress", []) == [], "the server opens no connection of its own"

    # One rule, open to any source, on named ports the container has: every port a Service
    # sends traffic to is admitted, and no other (the health port is reached from the node).
    [rule] = policy["ingress"]
    assert "from" not in rule
    admitted = {(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]}
    container_ports = {p["name"] for p in _container(objects)["ports"]}
    assert {name for name, _ in admitted} <= container_ports
    served = {
        (str(p["targetPort"]), p.get("protocol", "TCP"))
        for service in objects
        if service["kind"] == "Service"
        for p in service["spec"]["ports"]
    }
    assert admitted == served


# --- container image


def _dockerfile_final_stage() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """ARG defaults and the (instruction, arguments) lines of the last stage."""
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    args: dict[str, str] = {}
    stage: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stage = []
        if instruction == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name.strip()] = value.strip()
        stage.append((instruction, rest.strip()))
    return args, stage


def _expand(value: str, args: Mapping[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], value)


def test_dockerfile_runtime_stage(rendered: dict[str, list[Obj]]) -> None:
    args, stage = _dockerfile_final_stage()
    instructions = [name for name, _ in stage]
    values: dict[str, list[str]] = {}
    for name, rest in stage:
        values.setdefault(name, []).append(rest)

    base = _expand(values["FROM"][0].split()[0], args)
    assert base.startswith("python:3.11-slim"), base
    assert "HEALTHCHECK" not in instructions, "Kubernetes probes do the health checking"
    assert not any("build-essential" in rest or "gcc" in rest for rest in values.get("RUN", []))

    (user,) = values["USER"]
    uid = _expand(user, args).split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "a numeric non-root user"
    pod = _pod_spec(rendered["base"])
    assert int(uid) == pod["securityContext"]["runAsUser"]

    assert yaml.safe_load(values["ENTRYPOINT"][-1]) == ["npu-resolve", "serve"]
    cmd = _flags(yaml.safe_load(values["CMD"][-1]))
    assert int(cmd["--port"]) == settings.DEFAULT_PORT
    assert int(cmd["--metrics-port"]) == settings.DEFAULT_METRICS_PORT
    exposed = {int(p.split("/")[0]) for rest in values["EXPOSE"] for p in rest.split()}
    assert {settings.DEFAULT_PORT, settings.DEFAULT_METRICS_PORT} <= exposed
    assert any("PYTHONDONTWRITEBYTECODE=1" in rest for rest in values["ENV"])
    assert any("--no-index" in rest for rest in values["RUN"]), "runtime installs wheels only"

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "npu-resolve" in pyproject["project"]["scripts"]


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for required in (".git", ".venv", "tests", "benchmarks", "node_modules", ".tools"):
        assert required in patterns, f".dockerignore must exclude {required}"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    named = [pyproject["project"]["readme"], *pyproject["project"]["license-files"]]
    for needed in ("pyproject.toml", *named, "resolver", "server", "client"):
        assert needed not in patterns, f".dockerignore must keep {needed}"
    # The package build reads the files pyproject.toml names: the image's build stage copies
    # them (a license file it lacked would fail `pip wheel` there).
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    copies = [line.split() for line in dockerfile.splitlines() if line.startswith("COPY ")]
    (copied,) = [words[1:-1] for words in copies if "pyproject.toml" in words]
    assert set(named) <= set(copied), copied


def test_the_image_builds_with_pinned_versions_that_satisfy_the_project() -> None:
    """deploy/constraints.txt pins every runtime dependency, and theirs, so that two builds
    of one commit hold the same packages; each pin must satisfy pyproject.toml, and none may be
    missing (an unpinned package would float again)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in (ROOT / "deploy" / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # The tracing extra too: an image built with EXTRAS=tracing serves --tracing.
    extra = pyproject["project"]["optional-dependencies"]["tracing"]
    for text in [*pyproject["project"]["dependencies"], *extra]:
        wanted = Requirement(text)
        pinned = pins.get(canonicalize_name(wanted.name))
        assert pinned is not None, f"{wanted.name} is not pinned in deploy/constraints.txt"
        assert wanted.specifier.contains(pinned), f"{wanted.name}=={pinned} is not {wanted}"
    # Their own dependencies too, as the installed versions of those pins declare them.
    from importlib import metadata

    for name, version in pins.items():
        if metadata.version(name) != version:
            continue  # this environment has another version; its requirements may differ
        for text in metadata.requires(name) or ():
            needed = Requirement(text)
            if needed.marker is not None and not needed.marker.evaluate({"extra": ""}):
                continue
            pinned = pins.get(canonicalize_name(needed.name))
            assert pinned is not None, f"{needed.name} ({name} needs it) is not pinned"
            assert needed.specifier.contains(pinned), f"{name} needs {needed}, pinned {pinned}"
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    assert "--constraint constraints.txt" in dockerfile
    # The extras named at build time reach both the wheels built and the package installed.
    assert dockerfile.count('${EXTRAS:+[$EXTRAS]}"') == 2, "EXTRAS must reach both stages"
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert "!deploy/constraints.txt" in ignore  # in the build context though deploy/ is not


def test_a_flag_added_to_base_reaches_every_overlay(kubectl: Path, tmp_path: Path) -> None:
    """Overlays append their server arguments to base's instead of replacing the list, so a
    flag a platform adds to base is not silently missing from prod."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    deployment = tmp_path / "deploy" / "k8s" / "base" / "deployment.yaml"
    text = deployment.read_text(encoding="utf-8")
    last = '            - "1048576"\n'
    assert text.count(last) == 1, "base's last argument moved: update this test"
    added = last + '            - --cache-entries\n            - "1234"\n'
    deployment.write_text(text.replace(last, added), encoding="utf-8")
    for name, directory in TARGETS.items():
        flags = _server_flags(_render(kubectl, str(tmp_path / directory)))
        assert flags.get("--cache-entries") == "1234", f"{name} lost a flag of base"
