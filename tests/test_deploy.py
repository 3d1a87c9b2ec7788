"""deploy/: the Dockerfile, docker-compose.yml, Kubernetes manifests, systemd unit and Grafana dashboard.

What is validated here, offline, and what is not:

- Every YAML file passes yamllint (`.yamllint.yaml`).
- The Kubernetes manifests validate against the Kubernetes 1.30 OpenAPI schemas in strict mode
  (unknown fields are errors) with `kubernetes-validate`, which ships the schemas: no cluster and
  no network. Kustomization has no schema there; it is checked to list every other manifest.
  Cross-references a schema cannot see are checked by hand: Service selectors, the headless
  Service of the StatefulSet, probe paths and ports, the ConfigMap mount and the `--config` path,
  the Secret reference, the cache volume and `cache.disk`. Nothing is applied to a cluster.
- docker-compose.yml validates against the compose-spec JSON schema vendored by
  `check-jsonschema`, plus structural checks (three gateway nodes built from deploy/Dockerfile,
  each with its own named cache volume, Redis and the origin wired by service name).
  `docker compose config` runs only where the compose plugin is installed; the docker CLI of this
  machine has none (and no daemon), so that part skips with the reason. No image is built or
  pulled here (no registry is reachable), so the Dockerfile is checked as text: base image, the
  one RUN of deploy/install.sh, a non-root USER, EXPOSE and CMD. What install.sh does is run for
  real: it installs the package into a fresh virtualenv (about 20 s) and the installed `gateway`
  checks the image's configuration.
- Every setting a manifest sets (TOML in the ConfigMap and the image, GATEWAY_* variables in the
  compose file, the StatefulSet and the Secret) exists in gateway/config.py: the variables are
  compared with the names gateway.configdoc derives from the Settings dataclasses (load() ignores
  variables of unknown sections, so loading alone would not catch a misspelt section), and the
  whole set is loaded through gateway.config.load.
- The systemd unit passes `systemd-analyze verify` (with ExecStart pointed at this virtualenv's
  `gateway`, as verify needs the binary to exist) and `systemd-analyze security --offline` rates
  it OK; both skip where systemd-analyze is missing. The unit is not started (no systemd here).
- The Grafana dashboard parses, each query parses as PromQL (promql-parser, Grafana's variables
  substituted) and every metric it selects is one the gateway exports. It is not rendered in a
  Grafana, and the queries do not run against a Prometheus.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway import config, configdoc
from tests.test_constraints import pinned_versions

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "docker-compose.yml"
DASHBOARD = DEPLOY / "grafana" / "gateway-dashboard.json"
UNIT = DEPLOY / "systemd" / "s3-cache-gateway.service"
IMAGE_CONFIG = DEPLOY / "gateway.container.toml"
IMAGE_CONFIG_PATH = "/etc/gateway/gateway.toml"  # where the image keeps it and its CMD reads it
KUBERNETES_VERSION = "1.30.0"

# The metric names the gateway exports (gateway/admin/metrics.py), the only ones the dashboard may query.
METRICS = {
    "gateway_requests_total", "gateway_request_duration_seconds", "gateway_cache_hits_total",
    "gateway_cache_misses_total", "gateway_served_bytes_total", "gateway_origin_requests_total",
    "gateway_origin_errors_total", "gateway_cache_evictions_total", "gateway_cache_tier_used_bytes",
    "gateway_cache_tier_quota_bytes", "gateway_singleflight_waits_total", "gateway_redis_errors_total",
    "gateway_replication_actions_total",
    "gateway_shadow_hit_ratio",
}
HISTOGRAMS = {"gateway_request_duration_seconds"}


def _yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml"))


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _manifests() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p in sorted(K8S.glob("*.yaml")) if p.name != "kustomization.yaml" for d in _documents(p)]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for _, d in _manifests() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _check_env_names(env: dict[str, str], where: str) -> None:
    """Every GATEWAY_* variable names a setting of gateway/config.py (load() would ignore a bad section)."""
    known = configdoc.env_vars()
    unknown = sorted(v for v in env if v.startswith("GATEWAY_") and v not in known)
    assert not unknown, f"{where}: not settings of gateway/config.py: {unknown} (see docs/configuration.md)"


def _load(toml_text: str | None, env: dict[str, str], tmp_path: Path, where: str) -> config.Settings:
    _check_env_names(env, where)
    path = None
    if toml_text is not None:
        path = tmp_path / "gateway.toml"
        path.write_text(toml_text)
    try:
        return config.load(path, environ=env)
    except config.ConfigError as exc:
        raise AssertionError(f"{where}: {exc}") from None


# ------------------------------------------------------------------------------------------ YAML

def test_yamllint_passes_on_every_yaml_file():
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    lint_config = YamlLintConfig(file=str(ROOT / ".yamllint.yaml"))
    files = _yaml_files()
    assert len(files) >= 8, files
    problems = [f"{path.relative_to(ROOT)}:{p.line}:{p.column}: {p.message} ({p.rule})"
                for path in files for p in linter.run(path.read_text(), lint_config, str(path))]
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------------------ Kubernetes

def test_kubernetes_manifests_validate_against_the_schemas():
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    from kubernetes_validate import utils

    manifests = _manifests()
    kinds = sorted(d["kind"] for _, d in manifests)
    assert kinds == ["ConfigMap", "Deployment", "Secret", "Service", "Service", "Service", "StatefulSet"]
    for path, doc in manifests:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except utils.ValidationError as exc:
            where = ".".join(str(p) for p in exc.caught.path)
            raise AssertionError(f"{path.name} {doc['kind']}/{doc['metadata']['name']}: {where}: "
                                 f"{exc.caught.message}") from None


def test_the_schema_validation_is_not_vacuous():
    """A misspelt field and a wrong type are refused: strict mode and the bundled schemas work offline."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    from kubernetes_validate import utils

    statefulset = _one("StatefulSet")
    misspelt = json.loads(json.dumps(statefulset))
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    wrong_type = json.loads(json.dumps(statefulset))
    wrong_type["spec"]["replicas"] = "three"
    for bad in (misspelt, wrong_type):
        with pytest.raises(utils.ValidationError):
            kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest():
    kustomization = _documents(K8S / "kustomization.yaml")[0]
    assert kustomization["kind"] == "Kustomization"
    listed = sorted(kustomization["resources"])
    assert listed == sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def _kubernetes_settings(tmp_path: Path) -> tuple[config.Settings, dict[str, Any]]:
    """The Settings a gateway pod runs with: the ConfigMap's TOML, the Secret's and the container's env."""
    statefulset = _one("StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            secret = _one("Secret", source["secretRef"]["name"])
            env.update(secret.get("stringData", {}))
        if "configMapRef" in source:
            env.update(_one("ConfigMap", source["configMapRef"]["name"])["data"])
    for item in container.get("env", []):
        if item.get("valueFrom") == {"fieldRef": {"fieldPath": "metadata.name"}}:
            env[item["name"]] = f"{statefulset['metadata']['name']}-0"  # the first pod's name
            continue
        assert "value" in item, f"env {item['name']}: only literal values and the pod name are checked"
        # $(NAME) refers to a variable defined above, as Kubernetes expands it.
        env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], item["value"])

    # The --config file is the ConfigMap key mounted at that path.
    args = container.get("command", []) + container.get("args", [])
    assert args[:2] == ["gateway", "serve"] and "--config" in args
    config_path = args[args.index("--config") + 1]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    folder, _, key = config_path.rpartition("/")
    assert folder in mounts, f"{config_path} is not on a mounted volume"
    configmap = _one("ConfigMap", volumes[mounts[folder]]["configMap"]["name"])
    toml_text = configmap["data"][key]
    tomllib.loads(toml_text)
    return _load(toml_text, env, tmp_path, "kubernetes"), container


def test_kubernetes_settings_all_exist_and_load(tmp_path):
    settings, _ = _kubernetes_settings(tmp_path)
    assert settings.admin.token, "the probes need admin.token: without it the admin API answers nothing"
    assert settings.auth.users and settings.origin.secret_key
    redis = _one("Service", "s3-cache-gateway-redis")
    assert re.fullmatch(rf"redis://{redis['metadata']['name']}:{redis['spec']['ports'][0]['port']}/\d+",
                        settings.redis.url)


def test_statefulset_probes_ports_and_volumes_match_the_settings(tmp_path):
    settings, container = _kubernetes_settings(tmp_path)
    statefulset = _one("StatefulSet")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"s3": settings.server.port}
    assert settings.server.host == "0.0.0.0"
    admin = settings.admin.path
    assert container["readinessProbe"]["httpGet"] == {"path": f"{admin}/readyz", "port": "s3"}
    assert container["livenessProbe"]["httpGet"] == {"path": f"{admin}/healthz", "port": "s3"}
    assert container["startupProbe"]["httpGet"]["path"] == f"{admin}/healthz"

    # Each node's cache.disk folders are on its own volume from the volumeClaimTemplates.
    claims = {t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert settings.cache.disk
    for tier in settings.cache.disk:
        owner = [name for path, name in mounts.items() if (tier.path + "/").startswith(path.rstrip("/") + "/")]
        assert owner and owner[-1] in claims, f"cache.disk {tier.path} is not on a volumeClaimTemplate volume"
    # The memory tier and the read buffer fit in the memory limit.
    limit = config.parse_size(container["resources"]["limits"]["memory"].replace("Gi", "GiB").replace("Mi", "MiB"))
    assert settings.cache.memory_quota + settings.cache.read_buffer < limit

    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
    assert statefulset["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_services_select_the_pods_they_serve():
    statefulset = _one("StatefulSet")
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert statefulset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    peers = _one("Service", statefulset["spec"]["serviceName"])
    assert peers["spec"]["clusterIP"] == "None", "the StatefulSet's service must be headless"
    clients = _one("Service", "s3-cache-gateway")
    assert clients["spec"].get("clusterIP") != "None"
    container_ports = {p["name"] for p in statefulset["spec"]["template"]["spec"]["containers"][0]["ports"]}
    for service in (peers, clients):
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports
    redis = _one("Deployment", "s3-cache-gateway-redis")
    redis_service = _one("Service", "s3-cache-gateway-redis")
    assert redis_service["spec"]["selector"].items() <= redis["spec"]["template"]["metadata"]["labels"].items()
    assert not redis_service["spec"]["selector"].items() <= pod_labels.items()


# ------------------------------------------------------------------------------------------ compose

def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _gateway_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if name.startswith("gateway-")}


def test_compose_file_validates_against_the_compose_spec():
    schema_file = importlib.resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    schema = json.loads(schema_file.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_compose())]
    assert not errors, "\n".join(errors)


def test_compose_has_redis_origin_and_three_nodes_with_their_own_volumes():
    compose = _compose()
    services = compose["services"]
    assert {"redis", "origin"} <= set(services)
    nodes = _gateway_services(compose)
    assert len(nodes) == 3
    dockerfiles, volumes, ports = set(), [], []
    for name, node in nodes.items():
        build = node["build"]
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT and (context / build["dockerfile"]).is_file(), name
        dockerfiles.add(build["dockerfile"])
        assert node["image"]
        assert set(node["depends_on"]) == {"redis", "origin"}
        (volume,) = node["volumes"]
        source, target = volume.split(":")
        assert source in compose["volumes"], f"{name}: {source} is not a named volume"
        volumes.append(source)
        ports += [p.rsplit(":", 1)[0] for p in node["ports"]]
    assert dockerfiles == {"deploy/Dockerfile"}
    assert len(set(volumes)) == 3, "every node needs its own cache volume"
    assert len(set(ports)) == 3
    for service in services.values():
        assert "image" in service or "build" in service


def test_compose_settings_all_exist_and_match_the_services(tmp_path):
    compose = _compose()
    for name, node in _gateway_services(compose).items():
        env = {k: str(v) for k, v in node["environment"].items()}
        settings = _load(IMAGE_CONFIG.read_text(), env, tmp_path, f"docker-compose.yml {name}")
        assert re.fullmatch(r"http://origin:\d+", settings.origin.endpoint)
        assert settings.redis.url.startswith("redis://redis:")
        assert settings.admin.token and settings.auth.users
        # The cache folder is the node's volume.
        target = node["volumes"][0].split(":")[1]
        assert [t.path for t in settings.cache.disk] == [target]
        assert all(p.endswith(f":{settings.server.port}") for p in node["ports"])
        health = " ".join(node["healthcheck"]["test"])
        assert f"127.0.0.1:{settings.server.port}{settings.admin.path}/healthz" in health


def test_compose_monitoring_profile_scrapes_the_nodes(tmp_path):
    compose = _compose()
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    nodes = _gateway_services(compose)
    any_env = {k: str(v) for k, v in next(iter(nodes.values()))["environment"].items()}
    settings = _load(IMAGE_CONFIG.read_text(), any_env, tmp_path, "docker-compose.yml")
    assert job["metrics_path"] == f"{settings.admin.path}/metrics"
    assert job["authorization"]["credentials"] == settings.admin.token
    assert sorted(job["static_configs"][0]["targets"]) == sorted(f"{n}:{settings.server.port}" for n in nodes)
    # Grafana gets the dashboard where its provisioning looks.
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "gateway.yaml").read_text())
    folder = provider["providers"][0]["options"]["path"]
    mounted = [v.split(":") for v in compose["services"]["grafana"]["volumes"]]
    assert any(src == "./grafana/gateway-dashboard.json" and dst.startswith(folder + "/") for src, dst, *_ in mounted)


def test_docker_compose_config_accepts_the_file():
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI: `docker compose config` not run (the compose-spec schema check still ran)")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("the docker CLI has no compose plugin here: `docker compose config` not run "
                    "(the compose-spec schema check still ran)")
    result = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr.decode()


# ------------------------------------------------------------------------------------------ Dockerfile, install

def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines, current = [], ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            lines.append(current)
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def test_dockerfile_installs_with_install_sh_and_runs_as_non_root():
    steps = _dockerfile()
    assert steps[0] == ("FROM", "python:3.11-slim")
    runs = [args for op, args in steps if op == "RUN"]
    install_runs = [r for r in runs if "install.sh" in r or "pip" in r]
    assert install_runs == ["sh deploy/install.sh /src && rm -rf /src"], "the one install step is deploy/install.sh"
    # What the install needs is copied: the build metadata, the readme it names, the tested versions, the package.
    copies = [args.split() for op, args in steps if op == "COPY"]
    copied = {src for *srcs, _ in copies for src in srcs}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {"pyproject.toml", pyproject["project"]["readme"], "constraints.txt", "gateway", "deploy/install.sh"} <= copied
    assert ["deploy/gateway.container.toml", IMAGE_CONFIG_PATH] in copies
    users = [args for op, args in steps if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    cmd = json.loads(dict(steps)["CMD"])
    assert cmd == ["gateway", "serve", "--config", IMAGE_CONFIG_PATH]
    settings = config.load(IMAGE_CONFIG, environ={})
    assert dict(steps)["EXPOSE"] == str(settings.server.port)
    assert settings.server.host == "0.0.0.0"
    assert dict(steps)["VOLUME"] == json.dumps([settings.cache.disk[0].path])


def test_install_script_installs_the_package_as_pyproject_names_it():
    script = (DEPLOY / "install.sh").read_text()
    pips = [line.strip() for line in script.splitlines() if "pip install" in line and not line.lstrip().startswith("#")]
    # The source tree itself with the tables extra alone: the [project] dependencies of pyproject.toml and
    # what a node's table loads read with, at the versions the suite passed with.
    assert pips == ['python3 -m pip install --no-cache-dir --disable-pip-version-check -c "$src/constraints.txt" '
                    '"$src[tables]"']
    assert "gateway --help" in script
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["gateway"] == "gateway.cli:main"


def test_install_script_into_a_fresh_virtualenv(tmp_path):
    """What the image's RUN does, done for real: deploy/install.sh into a new venv from a copy of what the
    Dockerfile COPYs; then the installed `gateway` validates the image's config with the compose env."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "gateway", source / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    (source / "deploy").mkdir()
    shutil.copy(DEPLOY / "install.sh", source / "deploy" / "install.sh")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {"PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(["sh", "deploy/install.sh", str(source)], cwd=source, env=env, capture_output=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout.decode()[-3000:] + result.stderr.decode()[-3000:]

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    meta = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import importlib.metadata as m, json; d = m.distribution('s3-cache-gateway');"
                           "print(json.dumps([d.version, d.requires or []]))"],
                          cwd=tmp_path, capture_output=True, check=True, timeout=60)  # not the checkout's egg-info
    version, requires = json.loads(meta.stdout)
    assert version == pyproject["version"]
    assert sorted(r for r in requires if "extra ==" not in r) == sorted(pyproject["dependencies"])
    # Each runtime dependency is installed at the version constraints.txt pins.
    pinned = pinned_versions()
    names = [Requirement(r).name for r in pyproject["dependencies"] + pyproject["optional-dependencies"]["tables"]]
    installed = subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import importlib.metadata as m, json, sys; print(json.dumps([m.version(n) for n in sys.argv[1:]]))",
                                *names], cwd=tmp_path, capture_output=True, check=True, timeout=60)
    assert dict(zip(names, json.loads(installed.stdout))) == {name: pinned[canonicalize_name(name)] for name in names}

    node = _gateway_services(_compose())["gateway-1"]
    check_env = dict(env, **{k: str(v) for k, v in node["environment"].items()})
    out = subprocess.run([str(venv / "bin" / "gateway"), "config", "check", "--config", str(IMAGE_CONFIG)],
                         env=check_env, cwd=tmp_path, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    effective = json.loads(out.stdout)
    assert effective["origin"]["endpoint"] == "http://origin:5000" and effective["admin"]["token"] == "***"


# ------------------------------------------------------------------------------------------ systemd

def _verifiable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointed at this virtualenv's `gateway`: verify checks the binary exists."""
    gateway = Path(sys.executable).parent / "gateway"
    if not gateway.exists():
        pytest.skip(f"no gateway script next to {sys.executable}")
    text = UNIT.read_text()
    assert "ExecStart=/opt/s3-cache-gateway/bin/gateway " in text
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace("/opt/s3-cache-gateway/bin/gateway", str(gateway)))
    return unit


def _unit_settings() -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_systemd_unit_runs_gateway_serve_as_its_own_hardened_user():
    unit = _unit_settings()
    (exec_start,) = unit["ExecStart"]
    args = shlex.split(exec_start)
    assert args[0].endswith("/gateway") and args[1:3] == ["serve", "--config"]
    assert unit["DynamicUser"] == ["yes"] and unit["User"] == ["s3-cache-gateway"]
    for option in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices", "RestrictNamespaces"):
        assert unit[option] == ["yes"], option
    assert unit["ProtectSystem"] == ["strict"] and unit["CapabilityBoundingSet"] == [""]
    assert unit["CacheDirectory"] == ["s3-cache-gateway"]


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit was not verified (apt-get install systemd)")
    unit = _verifiable_unit(tmp_path)
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, timeout=60)
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 0 and unit.name not in output, output


def test_systemd_analyze_security_rates_the_unit_ok(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit's exposure was not rated")
    unit = _verifiable_unit(tmp_path)
    result = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(unit)], capture_output=True,
                            timeout=60)
    output = (result.stdout + result.stderr).decode()
    if "--offline" in output and "unrecognized" in output:
        pytest.skip("this systemd-analyze has no --offline (systemd < 250): exposure not rated")
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", output)
    assert match, output[-2000:]
    assert float(match.group(1)) <= 2.0, output


# ------------------------------------------------------------------------------------------ Grafana

def _selected_metrics(expr: str) -> set[str]:
    """Metric names a PromQL expression selects, from promql-parser's syntax tree."""
    import promql_parser

    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr}"
            names.add(node.name)
        elif isinstance(node, promql_parser.MatrixSelector):
            walk(node.vector_selector)
        elif isinstance(node, promql_parser.BinaryExpr):
            walk(node.lhs)
            walk(node.rhs)
        elif isinstance(node, promql_parser.Call):
            for arg in node.args:
                walk(arg)
        elif isinstance(node, promql_parser.AggregateExpr):
            walk(node.expr)
            if node.param is not None:
                walk(node.param)
        elif isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr, promql_parser.SubqueryExpr)):
            walk(node.expr)

    # Grafana's variables, replaced by values of the kind they stand for.
    concrete = expr.replace("$__rate_interval", "5m").replace("$instance", ".*")
    walk(promql_parser.parse(concrete))
    return names


def _targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_dashboard_queries_parse_and_use_only_exported_metrics():
    pytest.importorskip("promql_parser", reason="pip install promql-parser")
    dashboard = json.loads(DASHBOARD.read_text())
    used: set[str] = set()
    for title, expr in _targets(dashboard):
        for name in _selected_metrics(expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)  # a histogram's series
            if base in HISTOGRAMS:
                name = base
            assert name in METRICS, f"panel {title!r} queries {name}, which the gateway does not export"
            used.add(name)
    assert used == METRICS, f"metrics with no panel: {sorted(METRICS - used)}"


def test_dashboard_has_the_panels_operators_need():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    titles = {p["title"] for p in panels}
    for wanted in ("Block hit ratio", "Request rate by operation", "Latency p50 by operation",
                   "Latency p99 by operation", "Bytes served by source", "Tier usage vs quota",
                   "Origin requests by method", "Origin errors", "Evictions by tier"):
        assert wanted in titles, wanted
    exprs = dict((title, expr) for title, expr in _targets(dashboard))
    assert "histogram_quantile(0.99" in exprs["Latency p99 by operation"]
    assert "histogram_quantile(0.5" in exprs["Latency p50 by operation"]
    # Every panel reads the dashboard's data source variable, and ids and grid cells do not collide.
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
