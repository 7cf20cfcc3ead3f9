"""The Kubernetes manifests in deploy/kubernetes (a kustomize base, and an example overlay with a
fleet file): valid against the Kubernetes schemas (offline, kubernetes-validate ships them), CRDs
checked structurally, references between objects resolved against what is applied and what the
documented commands make, and every flag a container passes known to the CLI."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clockfabric.topology import load
from tests.unit.cli_flags import unknown_options

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
BASE, EXAMPLES = K8S / "base", K8S / "examples"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
KUBERNETES_VERSION = "1.30"
CRDS = {"ServiceMonitor", "PrometheusRule"}


def render(directory: Path) -> list[dict]:
    """What `kubectl apply -k DIRECTORY` applies, for the part of kustomize the manifests use
    (resources, files or folders; ConfigMaps generated from files under a fixed name): a
    kustomization using anything else fails here, so this never silently differs from kustomize."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(k) <= {"apiVersion", "kind", "resources", "configMapGenerator"}, f"{directory}: {sorted(k)}"
    docs: list[dict] = []
    for resource in k.get("resources", []):
        path = directory / resource
        docs += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        assert set(gen) <= {"name", "namespace", "files", "options"} and gen["options"]["disableNameSuffixHash"]
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": gen["name"], "namespace": gen["namespace"],
                                  "labels": gen["options"].get("labels", {})},
                     "data": {Path(f).name: (directory / f).read_text() for f in gen["files"]}})
    return docs


def documents() -> list[dict]:
    """The example overlay: the base and the example fleet's ConfigMap."""
    docs = render(EXAMPLES)
    assert docs, f"no manifests in {EXAMPLES}"
    return docs


def documented_objects() -> dict[tuple[str, str], set[str]]:
    """(kind, name) -> keys of every Secret and ConfigMap docs/deploy.md's commands make
    (`kubectl -n clockfabric create secret generic NAME --from-file=...`, and configmap)."""
    made: dict[tuple[str, str], set[str]] = {}
    for line in DEPLOY_DOC.read_text().replace("\\\n", " ").splitlines():
        m = re.match(r"kubectl -n clockfabric create (secret generic|configmap) (\S+) (.*)", line.strip())
        if not m:
            continue
        keys = set()
        for word in shlex.split(m.group(3), comments=True):
            if word.startswith(("--from-file=", "--from-literal=")):
                source = word.split("=", 1)[1]
                keys.add(source.split("=", 1)[0] if "=" in source or word.startswith("--from-literal")
                         else Path(source).name)
        made[("Secret" if m.group(1) == "secret generic" else "ConfigMap", m.group(2))] = keys
    return made


def defined(docs: list[dict]) -> dict[tuple[str, str], set[str]]:
    """(kind, name) -> keys of what is there once DOCS are applied after the documented commands."""
    objects = documented_objects()
    for d in docs:
        keys = {*d.get("data", {}), *d.get("stringData", {})}
        objects[(d["kind"], d["metadata"]["name"])] = objects.get((d["kind"], d["metadata"]["name"]), set()) | keys
    return objects


def by_kind(kind: str) -> list[dict]:
    return [d for d in documents() if d["kind"] == kind]


def one(kind: str, name: str) -> dict:
    (doc,) = [d for d in by_kind(kind) if d["metadata"]["name"] == name]
    return doc


def workloads() -> list[dict]:
    return by_kind("DaemonSet") + by_kind("Deployment") + by_kind("StatefulSet")


def test_manifests_validate_against_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the test extras)")
    for doc in documents():
        if doc["kind"] in CRDS:
            continue
        try:
            kv.validate(doc, KUBERNETES_VERSION, strict=True)
        except kv.ValidationError as e:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {str(e).splitlines()[0]}")


def test_the_validator_rejects_a_misspelt_field():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the test extras)")
    broken = one("DaemonSet", "clockfabric-agent")
    broken["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, KUBERNETES_VERSION, strict=True)


def test_every_object_is_in_the_clockfabric_namespace():
    for doc in documents():
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "clockfabric", doc["metadata"]["name"]


def test_the_workloads_run_the_image_the_build_script_tags():
    """scripts/build-image.sh tags the image clockfabric:VERSION, pyproject.toml's version (as
    docker.io/library/clockfabric, the name containerd gives it): a manifest naming another tag
    waits for an image nothing builds."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert "name=docker.io/library/clockfabric:$version" in (ROOT / "scripts" / "build-image.sh").read_text()
    for workload in by_kind("DaemonSet") + by_kind("Deployment"):
        pod = workload["spec"]["template"]["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert (c["image"], c["imagePullPolicy"]) == (f"clockfabric:{version}", "IfNotPresent"), c["name"]


@pytest.mark.parametrize("kind", ["DaemonSet", "Deployment"])
def test_every_flag_a_container_passes_exists_in_the_cli(kind):
    for workload in by_kind(kind):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert container["command"] == ["clockfabric"]
            assert unknown_options(container["args"]) == [], workload["metadata"]["name"]


def test_containers_have_requests_limits_and_both_probes():
    for workload in workloads():
        for c in workload["spec"]["template"]["spec"]["containers"]:
            assert set(c["resources"]) == {"requests", "limits"}, c["name"]
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), c["name"]
            assert "memory" in c["resources"]["limits"], c["name"]
            assert "livenessProbe" in c and "readinessProbe" in c, c["name"]


def test_exec_probes_are_valid_python():
    for workload in by_kind("DaemonSet") + by_kind("Deployment"):
        for c in workload["spec"]["template"]["spec"]["containers"]:
            for probe in (c["livenessProbe"], c["readinessProbe"]):
                if "exec" in probe:
                    argv = probe["exec"]["command"]
                    assert argv[:2] == ["python3", "-c"]
                    compile(argv[2], f"{c['name']} probe", "exec")


def test_the_agent_runs_on_gpu_nodes_in_the_host_network_with_only_the_capabilities_it_needs():
    pod = one("DaemonSet", "clockfabric-agent")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    (agent,) = pod["containers"]
    ctx = agent["securityContext"]
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW", "SYS_NICE"]}
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert "privileged" not in ctx
    node = {e["name"]: e for e in agent["env"]}["CLOCKFABRIC_NODE"]  # the agent's default --host
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_the_controller_runs_unprivileged():
    pod = one("Deployment", "clockfabric-controller")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (controller,) = pod["containers"]
    assert controller["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert controller["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert controller["readinessProbe"]["httpGet"]["path"] == "/readyz"  # fails while storage does


def test_the_controller_runs_three_replicas_on_postgresql_with_the_password_from_a_secret():
    deployment = one("Deployment", "clockfabric-controller")
    assert deployment["spec"]["replicas"] == 3  # a lease in the database picks the one that runs detectors
    (controller,) = deployment["spec"]["template"]["spec"]["containers"]
    (db,) = [a for a in controller["args"] if a.startswith("--db=")]
    assert db.startswith("--db=postgresql://") and "@" in db and ":" not in db.split("//")[1].split("@")[0]
    host = db.split("@")[1].split(":")[0]
    assert host.split(".")[0] == one("Service", "clockfabric-postgres")["metadata"]["name"]
    password = {e["name"]: e for e in controller["env"]}["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    postgres = one("StatefulSet", "clockfabric-postgres")["spec"]["template"]["spec"]["containers"][0]
    served = {e["name"]: e for e in postgres["env"]}["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == served  # both sides read the same Secret key


@pytest.mark.parametrize("layout", [BASE, EXAMPLES], ids=["base", "examples"])
def test_files_the_containers_read_are_mounted_from_objects_that_exist(layout):
    names = set(defined(render(layout)))
    for workload in [d for d in render(layout) if d["kind"] in ("DaemonSet", "Deployment", "StatefulSet")]:
        pod = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        volumes |= {t["metadata"]["name"]: t for t in workload["spec"].get("volumeClaimTemplates", [])}
        for v in volumes.values():
            if "secret" in v:
                assert ("Secret", v["secret"]["secretName"]) in names
            if "configMap" in v:
                assert ("ConfigMap", v["configMap"]["name"]) in names
            if "persistentVolumeClaim" in v:
                assert ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) in names
        for c in pod["containers"]:
            mounts = [m["mountPath"] for m in c["volumeMounts"]]
            assert {m["name"] for m in c["volumeMounts"]} <= set(volumes)
            for arg in c.get("args", []):
                if arg.startswith(("--topology=", "--token-file=", "--key-file=", "--state-dir=", "--db=/")):
                    path = arg.split("=", 1)[1]
                    assert any(path.startswith(m + "/") for m in mounts), f"{arg}: not on a mounted volume"


def test_the_example_fleet_loads(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(one("ConfigMap", "clockfabric-fleet")["data"]["fleet.yaml"])
    assert len(load(fleet).hosts) == 4


def test_no_example_data_is_applied():
    # Secrets come from the documented commands only; the base needs the fleet's ConfigMap made too
    for layout in (BASE, EXAMPLES):
        assert [d["metadata"]["name"] for d in render(layout) if d["kind"] == "Secret"] == []
    assert "ConfigMap" not in {d["kind"] for d in render(BASE)}
    assert set(documented_objects()) == {("Secret", "clockfabric-token"), ("Secret", "clockfabric-key"),
                                         ("Secret", "clockfabric-postgres"), ("Secret", "clockfabric-tls"),
                                         ("Secret", "clockfabric-ca"), ("ConfigMap", "clockfabric-fleet")}


def test_the_documented_key_and_token_commands_are_the_clis():
    text = DEPLOY_DOC.read_text()
    assert "clockfabric key new fleet.key" in text  # what --from-file=fleet.key=fleet.key reads
    assert documented_objects()[("Secret", "clockfabric-key")] == {"fleet.key"}


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_the_operator_objects_carry_a_release_label(kind):
    for doc in by_kind(kind):
        assert doc["metadata"]["labels"].get("release"), doc["metadata"]["name"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (its kustomize renders here)")
@pytest.mark.parametrize("layout", [BASE, EXAMPLES], ids=["base", "examples"])
def test_the_render_here_is_what_kustomize_applies(layout):
    done = subprocess.run(["kubectl", "kustomize", str(layout)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    def key(d: dict) -> tuple[str, str]:
        return d["kind"], d["metadata"]["name"]

    assert sorted(render(layout), key=key) == sorted((d for d in yaml.safe_load_all(done.stdout) if d), key=key)


def test_services_select_their_pods_and_name_their_ports():
    for service in by_kind("Service"):
        pods = [w for w in workloads() if service["spec"]["selector"].items()
                <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(pods) == 1, service["metadata"]["name"]
        ports = {p["name"] for c in pods[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    agent_url = next(a for a in one("DaemonSet", "clockfabric-agent")["spec"]["template"]["spec"]["containers"][0]
                     ["args"] if a.startswith("--controller="))
    assert agent_url == "--controller=https://clockfabric-controller.clockfabric.svc:7400"
    # the certificate the documented command makes is for the name the agents reach the controller by
    names = re.findall(r"--name (\S+)", next(line for line in DEPLOY_DOC.read_text().splitlines()
                                              if line.startswith("clockfabric tls new pki")))
    assert "clockfabric-controller.clockfabric.svc" in names
    assert one("Service", "clockfabric-controller")["spec"]["ports"][0]["port"] == 7400


def test_the_servicemonitor_scrapes_the_agents_under_the_job_the_rules_select():
    monitor = one("ServiceMonitor", "clockfabric-agent")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one("Service", "clockfabric-agent")  # its name is the scrape's job label
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
        assert endpoint["port"] in port_names
    rules = yaml.safe_dump(one("PrometheusRule", "clockfabric")["spec"])
    assert 'job="clockfabric-agent"' in rules


def test_the_controller_servicemonitor_scrapes_its_metrics_with_the_fleet_token():
    monitor = one("ServiceMonitor", "clockfabric-controller")
    service = one("Service", "clockfabric-controller")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    credentials = endpoint["authorization"]["credentials"]
    assert endpoint["authorization"]["type"] == "Bearer"
    assert credentials["key"] in documented_objects()[("Secret", credentials["name"])]


def test_the_prometheusrule_is_well_formed():
    rule = one("PrometheusRule", "clockfabric")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"]
        for r in group["rules"]:
            assert ("record" in r) != ("alert" in r), r
            assert isinstance(r["expr"], str) and r["expr"]
            assert set(r) <= {"record", "alert", "expr", "for", "labels", "annotations"}, r


def secret_references(node, under: str = "") -> list[tuple[str, str | None]]:
    """Every (Secret name, key or None for the whole Secret) a manifest refers to, wherever it does:
    volumes (also projected), env secretKeyRef, envFrom secretRef, imagePullSecrets, and the
    prometheus-operator's SecretKeySelectors (credentials, bearerTokenSecret, basicAuth)."""
    found: list[tuple[str, str | None]] = []
    if isinstance(node, list):
        for item in node:
            found += (([(item["name"], None)] if under == "imagePullSecrets" and isinstance(item, dict) else [])
                      + secret_references(item, under))
        return found
    if not isinstance(node, dict):
        return found
    if under == "secret":  # a volume's secretName, or a projected source's name
        name = node.get("secretName", node.get("name"))
        found += [(name, item["key"]) for item in node.get("items", [])] or [(name, None)]
    elif under in ("secretKeyRef", "credentials", "bearerTokenSecret", "username", "password") and "name" in node:
        found.append((node["name"], node.get("key")))
    elif under == "secretRef" and "name" in node:
        found.append((node["name"], None))
    for key, value in node.items():
        found += secret_references(value, key)
    return found


@pytest.mark.parametrize("layout", [BASE, EXAMPLES], ids=["base", "examples"])
def test_every_secret_a_manifest_refers_to_is_made_with_its_keys(layout):
    """A manifest applied with a Secret missing leaves its pods waiting (ContainerCreating with
    FailedMount for a volume, CreateContainerConfigError for an env reference): every Secret and key
    referred to must be one docs/deploy.md's commands make (its "A missing Secret")."""
    docs = render(layout)
    secrets = {name: keys for (kind, name), keys in defined(docs).items() if kind == "Secret"}
    refs = [(d["kind"], d["metadata"]["name"], ref) for d in docs if d["kind"] != "Secret"
            for ref in secret_references(d)]
    assert {kind for kind, _, _ in refs} >= {"DaemonSet", "Deployment", "ServiceMonitor"}  # the walk finds them
    for kind, name, (secret, key) in refs:
        assert secret in secrets, f"{kind} {name} refers to Secret {secret!r}, which no documented command makes"
        assert key is None or key in secrets[secret], f"{kind} {name} wants key {key!r} of Secret {secret!r}"
    agent = {secret for d in docs if d["kind"] == "DaemonSet" for secret, _ in secret_references(d)}
    controller = {secret for d in docs if d["kind"] == "Deployment" for secret, _ in secret_references(d)}
    # the agents get the CA, never the controller's key; the controller never the fleet key
    assert agent == {"clockfabric-token", "clockfabric-key", "clockfabric-ca"} and "clockfabric-key" not in controller
    assert "clockfabric-tls" in controller


def test_the_secret_walk_finds_env_and_image_pull_references():
    pod = {"imagePullSecrets": [{"name": "pull"}],
           "containers": [{"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                           "envFrom": [{"secretRef": {"name": "all"}}]}],
           "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "p", "items": [{"key": "a"}]}}]}}]}
    assert sorted(secret_references(pod), key=str) == sorted(
        [("pull", None), ("s", "k"), ("all", None), ("p", "a")], key=str)
