"""Offline checks of the deployment files (no Docker engine or cluster runs here): the
Kubernetes manifests validate against the API schemas, the compose file and Dockerfile parse,
and every laneway command they run uses flags the binary really has."""

import json
import os
import pathlib
import re
import subprocess

import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("LANEWAY_BIN", str(ROOT / "target" / "debug" / "laneway"))
K8S = ROOT / "deploy" / "kubernetes"


def laneway_help(subcommand):
    return subprocess.run([BIN, subcommand, "--help"], capture_output=True, text=True, check=True).stdout


def assert_flags_exist(args):
    """Every `--flag` in a laneway command line appears in that subcommand's --help."""
    subcommand = args[0]
    help_text = laneway_help(subcommand) + laneway_help("serve")  # global flags show on every subcommand
    for arg in args[1:]:
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            assert re.search(re.escape(flag) + r"\b", help_text), f"`laneway {subcommand}` has no {flag}"


def k8s_documents():
    # Beside the base, the optional shared quota store in redis/.
    for path in sorted([*K8S.glob("*.yaml"), *K8S.glob("redis/*.yaml")]):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            yield str(path.relative_to(K8S)), document


@pytest.mark.parametrize("name,document", list(k8s_documents()), ids=lambda v: v if isinstance(v, str) else "")
def test_kubernetes_manifest_validates(name, document):
    if document["kind"] == "ServiceMonitor":
        # A CRD the API schemas do not include: check the fields the operator needs.
        assert document["apiVersion"] == "monitoring.coreos.com/v1"
        endpoint = document["spec"]["endpoints"][0]
        assert endpoint["port"] == "admin" and endpoint["path"] == "/metrics"
        return
    kubernetes_validate.validate(document, "1.30.0", strict=True)


def test_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    redis = yaml.safe_load((K8S / "redis" / "kustomization.yaml").read_text())["resources"]
    assert redis == ["redis.yaml"]


def test_deployment_runs_real_flags_and_drains_within_grace_period():
    deployment = yaml.safe_load((K8S / "deployment.yaml").read_text())
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert_flags_exist(container["args"])
    config = yaml.safe_load((K8S / "configmap.yaml").read_text())["data"]["laneway.toml"]
    drain_ms = int(re.search(r"drain_deadline_ms\s*=\s*(\d+)", config).group(1))
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert spec["terminationGracePeriodSeconds"] > drain_ms / 1000 + pre_stop
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_configs_shipped_for_deployment_pass_laneway_check(tmp_path):
    config = yaml.safe_load((K8S / "configmap.yaml").read_text())["data"]["laneway.toml"]
    k8s_config = tmp_path / "k8s.toml"
    k8s_config.write_text(config)
    for path in [k8s_config, ROOT / "docker" / "laneway.toml"]:
        result = subprocess.run([BIN, "serve", "--config", str(path), "--check"], capture_output=True, text=True)
        assert result.returncode == 0, f"{path}: {result.stderr}"


def test_compose_services_run_real_commands():
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"laneway", "redis", "prometheus", "grafana", "sim-0", "sim-1", "sim-2", "sim-3"} <= set(services)
    for name, service in services.items():
        if service.get("image", "").startswith("laneway"):
            assert_flags_exist(service["command"])
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    for volume in services["laneway"]["volumes"] + services["prometheus"]["volumes"]:
        source = volume.split(":", 1)[0]
        assert (ROOT / "docker" / source).exists(), f"missing {source}"


def test_dockerfile_builds_the_binary_and_runs_as_non_root():
    parser = DockerfileParser(path=str(ROOT / "docker" / "Dockerfile"))
    instructions = [(i["instruction"], i["value"]) for i in parser.structure]
    froms = [value for kind, value in instructions if kind == "FROM"]
    assert len(froms) == 2, "multi-stage: a build stage and a runtime stage"
    assert any(kind == "RUN" and "cargo build --release --locked --bin laneway" in value for kind, value in instructions)
    users = [value for kind, value in instructions if kind == "USER"]
    assert users and not users[-1].startswith("0") and users[-1] != "root"
    cmd = json.loads(next(value for kind, value in instructions if kind == "CMD"))
    assert_flags_exist(cmd)
