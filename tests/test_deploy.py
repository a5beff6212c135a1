"""deploy/kubernetes: every file valid on its own, the kustomize tree whole, and what the
manifests say checked against genbot itself — its command-line parser, its settings, the
route its probes ask for, and the KEDA scale query run on a real PostgreSQL database.

Core objects are checked against the Kubernetes schema (kubernetes-validate, strict: an
unknown field is an error); KEDA's and kustomize's kinds, which it has no schema for,
against the small schemas below, which encode the fields genbot uses from their CRDs.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import shlex
import shutil
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import aiohttp
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from storage import config as cfg
from tests.conftest import ROOT, drop_pg_database, make_migrated_pg_database, migrated_sqlite

DEPLOY = ROOT / "deploy" / "kubernetes"
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())  # oldest we claim, and newest
SECRET = "genbot-secrets"  # the Secret an operator creates (docs/deploy.md)
Doc = dict[str, Any]


# --- loading ---------------------------------------------------------------------------

@cache
def files() -> dict[Path, tuple[Doc, ...]]:
    """Every YAML file under deploy/kubernetes -> its documents."""
    found = {}
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            assert path.suffix == ".yaml", f"{path}: only .yaml files belong here"
            found[path] = tuple(d for d in yaml.safe_load_all(path.read_text()) if d is not None)
    assert found, "deploy/kubernetes is empty"
    return found


def objects() -> list[tuple[Path, Doc]]:
    return [(path, doc) for path, docs in files().items() for doc in docs]


def of_kind(docs, kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def kustomize(folder: Path) -> list[Doc]:
    """The objects `kubectl apply -k folder` applies, as kustomize gathers them (its
    resources, folders among them, and components), before its transformers run."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[Doc] = []
    for entry in spec.get("resources", []):
        path = (folder / entry).resolve()
        docs += kustomize(path) if path.is_dir() else files()[path]
    for entry in spec.get("components", []):
        docs += kustomize((folder / entry).resolve())
    return docs


def overlays() -> list[Path]:
    found = sorted(p for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
    assert len(found) >= 2, "expected an overlay per GPU class"
    return found


def pod_specs(docs) -> list[tuple[Doc, Doc]]:
    """(workload, its pod spec) for every object that makes pods."""
    return [(d, d["spec"]["template"]["spec"]) for d in docs
            if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


def containers(docs) -> list[tuple[Doc, Doc, Doc]]:
    """(workload, pod spec, container) for every container."""
    return [(w, spec, c) for w, spec in pod_specs(docs)
            for c in spec.get("initContainers", []) + spec["containers"]]


def is_worker(container: Doc) -> bool:
    return container["args"][:1] == ["worker"]


def configmap_toml() -> dict[str, Any]:
    [configmap] = of_kind([d for _, d in objects()], "ConfigMap")
    return tomllib.loads(configmap["data"]["config.toml"])


# --- KEDA and kustomize: the fields genbot uses, as their CRDs and kustomize take them ---

STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253}
INT32 = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
OBJECT_META = {"type": "object", "required": ["name"], "additionalProperties": False,
               "properties": {"name": NAME, "namespace": NAME, "labels": STRING_MAP,
                              "annotations": STRING_MAP}}

# keda.sh/v1alpha1 ScaledTriggers' `type`: the scalers KEDA 2.x ships.
KEDA_TRIGGERS = [
    "activemq", "apache-kafka", "arangodb", "artemis-queue", "aws-cloudwatch", "aws-dynamodb",
    "aws-dynamodb-streams", "aws-kinesis-stream", "aws-sqs-queue", "azure-app-insights",
    "azure-blob", "azure-data-explorer", "azure-eventhub", "azure-log-analytics",
    "azure-monitor", "azure-pipelines", "azure-queue", "azure-servicebus", "beanstalkd",
    "cassandra", "couchdb", "cpu", "cron", "datadog", "dynatrace", "elasticsearch", "etcd",
    "external", "external-push", "gcp-cloudtasks", "gcp-pubsub", "gcp-stackdriver",
    "gcp-storage", "github-runner", "graphite", "huawei-cloudeye", "ibmmq", "influxdb", "kafka",
    "kubernetes-workload", "liiklus", "loki", "memory", "metrics-api", "mongodb", "mssql",
    "mysql", "nats-jetstream", "new-relic", "openstack-metric", "openstack-swift", "postgresql",
    "predictkube", "prometheus", "pulsar", "rabbitmq", "redis", "redis-cluster",
    "redis-cluster-streams", "redis-sentinel", "redis-sentinel-streams", "redis-streams",
    "selenium-grid", "solace-event-queue", "solr", "splunk", "stan", "temporal"]
# The postgresql scaler's metadata (the connection itself comes by authenticationRef).
POSTGRESQL_METADATA = ["query", "targetQueryValue", "activationTargetQueryValue",
                       "connectionFromEnv", "host", "port", "userName", "dbName", "sslmode",
                       "passwordFromEnv"]

SCALING_RULES = {"type": "object", "additionalProperties": False, "properties": {
    "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
    "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
    "policies": {"type": "array", "minItems": 1, "items": {
        "type": "object", "additionalProperties": False,
        "required": ["type", "value", "periodSeconds"],
        "properties": {"type": {"enum": ["Pods", "Percent"]},
                       "value": {"type": "integer", "minimum": 1},
                       "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800}}}}}}

SCALED_OBJECT = {
    "type": "object", "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "ScaledObject"},
        "metadata": OBJECT_META,
        "spec": {
            "type": "object", "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object", "additionalProperties": False, "required": ["name"],
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "name": NAME, "envSourceContainerName": {"type": "string"}}},
                "pollingInterval": INT32, "initialCooldownPeriod": INT32,
                "cooldownPeriod": INT32, "idleReplicaCount": INT32,
                "minReplicaCount": INT32, "maxReplicaCount": INT32,
                "fallback": {"type": "object"},
                "advanced": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "scalingModifiers": {"type": "object"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"name": {"type": "string"}, "behavior": {
                                "type": "object", "additionalProperties": False,
                                "properties": {"scaleUp": SCALING_RULES,
                                               "scaleDown": SCALING_RULES}}}}}},
                "triggers": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "required": ["type", "metadata"],
                    "properties": {
                        "type": {"enum": KEDA_TRIGGERS},
                        "name": {"type": "string"},
                        "metadata": STRING_MAP,
                        "useCachedMetrics": {"type": "boolean"},
                        "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                        "authenticationRef": {
                            "type": "object", "additionalProperties": False,
                            "required": ["name"],
                            "properties": {"name": NAME, "kind": {
                                "enum": ["TriggerAuthentication",
                                         "ClusterTriggerAuthentication"]}}}},
                    "if": {"properties": {"type": {"const": "postgresql"}}},
                    "then": {"properties": {"metadata": {
                        "required": ["query", "targetQueryValue"],
                        "propertyNames": {"enum": POSTGRESQL_METADATA}}}}}}}}}}

PARAMETER_REF = {"type": "array", "items": {
    "type": "object", "additionalProperties": False, "required": ["parameter", "name", "key"],
    "properties": {"parameter": {"type": "string"}, "name": NAME, "key": {"type": "string"}}}}

TRIGGER_AUTHENTICATION = {
    "type": "object", "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "TriggerAuthentication"},
        "metadata": OBJECT_META,
        "spec": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {
                "secretTargetRef": PARAMETER_REF, "configMapTargetRef": PARAMETER_REF,
                "env": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "required": ["parameter", "name"],
                    "properties": {"parameter": {"type": "string"}, "name": {"type": "string"},
                                   "containerName": {"type": "string"}}}},
                "podIdentity": {"type": "object"}, "hashiCorpVault": {"type": "object"},
                "azureKeyVault": {"type": "object"}, "awsSecretManager": {"type": "object"},
                "gcpSecretManager": {"type": "object"},
                "boundServiceAccountToken": {"type": "array"}}}}}

PATHS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
KUSTOMIZE = {
    "type": "object", "additionalProperties": False, "required": ["apiVersion", "kind"],
    "properties": {
        "apiVersion": {"enum": ["kustomize.config.k8s.io/v1beta1",
                                "kustomize.config.k8s.io/v1alpha1"]},
        "kind": {"enum": ["Kustomization", "Component"]},
        "resources": PATHS, "components": PATHS, "namespace": NAME,
        "patches": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "properties": {"path": {"type": "string"}, "patch": {"type": "string"},
                           "target": {"type": "object"}}}},
        "images": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["name"],
            "properties": {"name": {"type": "string"}, "newName": {"type": "string"},
                           "newTag": {"type": "string"}, "digest": {"type": "string"}}}}},
    "if": {"properties": {"kind": {"const": "Component"}}},
    "then": {"properties": {"apiVersion": {"const": "kustomize.config.k8s.io/v1alpha1"}}},
    "else": {"properties": {"apiVersion": {"const": "kustomize.config.k8s.io/v1beta1"}}}}

OWN_SCHEMAS = {("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
               ("keda.sh/v1alpha1", "TriggerAuthentication"): TRIGGER_AUTHENTICATION,
               ("kustomize.config.k8s.io/v1beta1", "Kustomization"): KUSTOMIZE,
               ("kustomize.config.k8s.io/v1alpha1", "Component"): KUSTOMIZE}


def validate(doc: Doc) -> None:
    schema = OWN_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    if schema is not None:
        jsonschema.Draft202012Validator(schema).validate(doc)
        return
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


# --- every file on its own --------------------------------------------------------------

def test_every_object_validates_against_its_schema_strictly():
    kinds = set()
    for path, doc in objects():
        try:
            validate(doc)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
            where = ".".join(str(p) for p in e.path)
            pytest.fail(f"{path.relative_to(ROOT)}: {doc['kind']} {where}: {e.message}")
        kinds.add(doc["kind"])
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "ScaledObject",
            "TriggerAuthentication", "Kustomization", "Component"} <= kinds


def test_the_schemas_refuse_a_misspelled_field():
    """The checks are not vacuous: strict means an unknown field fails, for Kubernetes'
    kinds as for KEDA's."""
    docs = [d for _, d in objects()]
    deployment = copy.deepcopy(of_kind(docs, "Deployment")[0])
    deployment["spec"]["template"]["spec"]["enableServiceLink"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    scaled = copy.deepcopy(of_kind(docs, "ScaledObject")[0])
    scaled["spec"]["minReplicas"] = 0
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)
    scaled = copy.deepcopy(of_kind(docs, "ScaledObject")[0])
    scaled["spec"]["triggers"][0]["type"] = "postgres"
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)


# --- the kustomize tree -----------------------------------------------------------------

def test_every_path_a_kustomization_names_exists_and_every_file_is_named():
    named: set[Path] = set()
    for path, docs in files().items():
        if path.name != "kustomization.yaml":
            continue
        [spec] = docs
        folder = path.parent
        for entry in spec.get("resources", []) + spec.get("components", []) + \
                [p["path"] for p in spec.get("patches", []) if "path" in p]:
            target = (folder / entry).resolve()
            assert target.exists(), f"{path.relative_to(ROOT)} names {entry}, which is missing"
            if target.is_dir():
                assert (target / "kustomization.yaml").is_file(), f"{entry}: no kustomization"
                named.add(target / "kustomization.yaml")
            else:
                assert target.is_relative_to(folder), f"{entry}: outside its kustomization"
                named.add(target)
        for entry in spec.get("components", []):
            component = yaml.safe_load(((folder / entry) / "kustomization.yaml").read_text())
            assert component["kind"] == "Component", f"{entry} is not a Component"
    tops = {p / "kustomization.yaml" for p in overlays()}
    unnamed = sorted(str(p.relative_to(ROOT)) for p in set(files()) - named - tops)
    assert not unnamed, f"files no kustomization names: {unnamed}"


def test_each_overlay_holds_together():
    """What each overlay applies: no object twice, the ScaledObject scales a Deployment of
    the overlay, its authentication and every ConfigMap a pod mounts are there too, and
    each Service and PodDisruptionBudget selects that overlay's pods."""
    for overlay in overlays():
        docs = kustomize(overlay)
        ids = [(d["kind"], d["metadata"]["name"]) for d in docs]
        assert len(ids) == len(set(ids)), f"{overlay.name}: an object twice: {ids}"
        names = {kind: {n for k, n in ids if k == kind} for kind, _ in ids}
        scaled = of_kind(docs, "ScaledObject")
        assert scaled, f"{overlay.name}: no ScaledObject"
        for so in scaled:
            ref = so["spec"]["scaleTargetRef"]
            assert ref.get("kind", "Deployment") == "Deployment"
            assert ref["name"] in names["Deployment"], f"{overlay.name}: {ref['name']}?"
            assert so["spec"]["minReplicaCount"] == 0  # scale to zero
            assert so["spec"]["maxReplicaCount"] >= 1
            for trigger in so["spec"]["triggers"]:
                assert trigger["authenticationRef"]["name"] in names["TriggerAuthentication"]
        for _, spec in pod_specs(docs):
            for volume in spec.get("volumes", []):
                if "configMap" in volume:
                    assert volume["configMap"]["name"] in names["ConfigMap"]
        pod_labels = [d["spec"]["template"]["metadata"]["labels"]
                      for d in of_kind(docs, "Deployment")]
        for d in of_kind(docs, "Deployment"):
            selector = d["spec"]["selector"]["matchLabels"]
            assert selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        for d in of_kind(docs, "Service"):
            assert sum(d["spec"]["selector"].items() <= p.items() for p in pod_labels) == 1
        for d in of_kind(docs, "PodDisruptionBudget"):
            selector = d["spec"]["selector"]["matchLabels"]
            assert sum(selector.items() <= p.items() for p in pod_labels) == 1, d
        # Every Deployment's pods have a budget.
        budgets = [d["spec"]["selector"]["matchLabels"]
                   for d in of_kind(docs, "PodDisruptionBudget")]
        assert all(any(b.items() <= p.items() for b in budgets) for p in pod_labels)


def test_kubectl_builds_each_overlay_to_the_same_objects():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    for overlay in overlays():
        built = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True,
                               text=True, timeout=30)
        assert built.returncode == 0, built.stderr
        docs = [d for d in yaml.safe_load_all(built.stdout) if d]
        ids = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
        assert ids == sorted((d["kind"], d["metadata"]["name"]) for d in kustomize(overlay))
        for _, _, container in containers(docs):
            assert "/" in container["image"] and ":" in container["image"], container["image"]


# --- the pods ---------------------------------------------------------------------------

def test_every_pod_is_non_root_without_service_links_and_with_resources():
    docs = [d for _, d in objects()]
    assert pod_specs(docs)
    for workload, spec in pod_specs(docs):
        name = workload["metadata"]["name"]
        assert spec.get("enableServiceLinks") is False, f"{name}: enableServiceLinks"
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"].get("runAsUser", 1) != 0, name
    for workload, _, container in containers(docs):
        name = f"{workload['metadata']['name']}/{container['name']}"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], name
        resources = container["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"], name
        assert resources["limits"]["memory"], name


@cache
def parser():
    from bot.cli.genbot import build_parser
    return build_parser()


def parsed(container: Doc):
    """The container's command line as `genbot` reads it (its own parser)."""
    assert container["command"] == ["genbot"], container["command"]
    try:
        return parser().parse_args(container["args"])
    except SystemExit:
        pytest.fail(f"genbot refuses: {shlex.join(container['command'] + container['args'])}")


def test_every_command_line_is_one_genbot_takes():
    docs = [d for _, d in objects()]
    seen = set()
    for workload, _, container in containers(docs):
        args = parsed(container)
        seen.add(args.command)
        if args.command == "serve":
            assert args.no_executor, "the service must not run an executor (GPU workers do)"
            assert workload["spec"]["replicas"] == 1
        else:
            assert args.command == "worker", args.command
            assert args.device == "cuda:0"  # the pod's one GPU; never a silent fall back to CPU
            assert args.comfyui is None and args.exit_when_idle is None  # KEDA scales down
        assert getattr(args, "config", None) == "/etc/genbot/config.toml"
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/etc/genbot" in mounts
    assert seen == {"serve", "worker"}


def test_gpu_workers_get_a_gpu_a_node_for_it_and_time_to_drain():
    from executor.settings import ExecutorConfig
    docs = [d for _, d in objects()]
    workers = [(w, spec, c) for w, spec, c in containers(docs) if is_worker(c)]
    assert len(workers) >= 2, "a worker per GPU class"
    products = set()
    for workload, spec, container in workers:
        name = workload["metadata"]["name"]
        assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1", name
        products.add(spec["nodeSelector"]["nvidia.com/gpu.product"])
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
            spec["tolerations"], name
        assert "replicas" not in workload["spec"], f"{name}: KEDA sets replicas"
        # As `genbot worker` reads it: the flag, else the environment, else the file.
        args, env = parsed(container), literal_env(container)
        if args.drain_seconds is not None:
            env["GENBOT_EXECUTOR_DRAIN_SECONDS"] = str(args.drain_seconds)
        drain = loaded(env)[ExecutorConfig].drain_seconds
        assert drain > 0, f"{name}: a scaled-down worker should let its job finish"
        assert spec["terminationGracePeriodSeconds"] > drain, \
            f"{name}: killed before it hands back its job (drain {drain:g} s)"
        # No probe: a worker has no port and genbot no command that asks a running one.
        assert not {"livenessProbe", "readinessProbe", "startupProbe"} & container.keys()
    assert len(products) == len(workers), "each class on nodes of its own GPU"


# --- the environment and the config file ------------------------------------------------

def settings() -> dict[str, dataclasses.Field]:
    """Every variable that sets a [section] key (both spellings) -> that key."""
    return {cfg.env_name(name, f.name, spelling): f
            for name, cls in cfg.sections().items() for f in dataclasses.fields(cls)
            for spelling in ("_", "__")}


def literal_env(container: Doc) -> dict[str, str]:
    """The container's environment as genbot would see it: literal values, and a
    placeholder for the database URL the Secret holds."""
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    env["GENBOT_DATABASE_URL"] = "postgres://genbot:secret@postgres:5432/genbot"
    return env


def loaded(env: dict[str, str]) -> cfg.Config:
    return cfg.from_dict(configmap_toml(), source="configmap.yaml", base_dir="/etc/genbot",
                         env=env)


def test_every_genbot_variable_is_a_setting_and_secrets_come_from_the_secret():
    known = settings()
    tables = tuple(cls.env_prefix() for cls in cfg.tables().values())
    docs = [d for _, d in objects()]
    for workload, _, container in containers(docs):
        assert "envFrom" not in container, "each variable named, so each is checked here"
        for var in container.get("env", []):
            name = var["name"]
            if not name.startswith(cfg.ENV_PREFIX):
                continue
            assert name in known or name in cfg.OTHER_ENV or name.startswith(tables), \
                f"{workload['metadata']['name']}: {name} is not a genbot setting"
            field = known.get(name)
            if field is not None and field.metadata["secret"]:
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                assert ref and ref["name"] == SECRET, f"{name}: a secret, in plain sight"
                assert ref["key"] == name  # one Secret, keys named as the variables
        assert "GENBOT_DATABASE_URL" in {v["name"] for v in container.get("env", [])}
    # KEDA reads the database URL from the Secret key the pods read it from.
    [auth] = of_kind(docs, "TriggerAuthentication")
    assert {"parameter": "connection", "name": SECRET, "key": "GENBOT_DATABASE_URL"} in \
        auth["spec"]["secretTargetRef"]


def test_each_container_loads_the_configmap_and_workers_take_known_models():
    """genbot's own loader reads the ConfigMap with each container's environment: it
    refuses any unknown key or variable and any bad value, as it would at start."""
    from executor.settings import ExecutorConfig
    from templates.settings import models
    docs = [d for _, d in objects()]
    for workload, _, container in containers(docs):
        config = loaded(literal_env(container))
        assert config.database_url.startswith("postgres://")  # shared by every process
        assert config.storage.backend == "s3"
        assert config.service.host == "0.0.0.0"
        chosen = config[ExecutorConfig].models
        if is_worker(container):
            assert chosen, f"{workload['metadata']['name']}: [executor] models per class"
            assert set(chosen) <= set(models(config)), chosen


def class_models(docs, deployment: str) -> set[str]:
    from executor.settings import ExecutorConfig
    [worker] = [c for w, _, c in containers(docs) if w["metadata"]["name"] == deployment]
    return set(loaded(literal_env(worker))[ExecutorConfig].models)


QUERY = re.compile(r"SELECT COALESCE\(SUM\(ready \+ ahead \+ running\), 0\) "
                   r"FROM genbot_placement WHERE engine = 'diffusers' "
                   r"AND affinity IN \(((?:'[^']*'(?:, )?)+)\)")


def scale_queries() -> dict[str, str]:
    """ScaledObject's target Deployment -> its postgresql query."""
    docs = [d for _, d in objects()]
    return {so["spec"]["scaleTargetRef"]["name"]: t["metadata"]["query"]
            for so in of_kind(docs, "ScaledObject") for t in so["spec"]["triggers"]
            if t["type"] == "postgresql"}


def test_each_scale_query_counts_the_models_its_workers_take():
    docs = [d for _, d in objects()]
    queries = scale_queries()
    assert len(queries) == len(of_kind(docs, "ScaledObject")) >= 2
    for deployment, query in queries.items():
        match = QUERY.fullmatch(query.strip())
        assert match, query
        affinities = set(re.findall(r"'([^']*)'", match.group(1)))
        assert affinities == {""} | class_models(docs, deployment), deployment


# --- the probes -------------------------------------------------------------------------

async def test_probes_ask_the_service_for_a_route_it_serves():
    """The service Deployment's probes, against `genbot serve --no-executor` started from
    the ConfigMap (SQLite and local files in place of PostgreSQL and the bucket)."""
    import tempfile

    from bot.service import Service
    docs = [d for _, d in objects()]
    [(_, _, container)] = [x for x in containers(docs) if not is_worker(x[2])]
    probes = [container[p] for p in ("startupProbe", "readinessProbe", "livenessProbe")
              if p in container]
    assert {"readinessProbe", "livenessProbe"} <= container.keys()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    data = configmap_toml()
    for probe in probes:
        port = (probe.get("httpGet") or probe["tcpSocket"])["port"]
        assert ports.get(port, port) == data["service"]["port"]
    # An unreachable database must not restart the pod: liveness only asks for the port.
    assert "tcpSocket" in container["livenessProbe"]
    [service] = of_kind(docs, "Service")
    assert {ports.get(p["targetPort"], p["targetPort"]) for p in service["spec"]["ports"]} == \
        {data["service"]["port"]}
    with tempfile.TemporaryDirectory() as folder:
        data["service"].update(host="127.0.0.1", port=0, data_dir=folder)
        data["storage"] = {"backend": "local"}
        data["database"]["url"] = migrated_sqlite(f"sqlite:///{folder}/genbot.sqlite3")
        service_process = Service(cfg.from_dict(data), executor=False, platforms=[])
        await service_process.start()
        try:
            async with aiohttp.ClientSession() as http:
                for path in {p["httpGet"]["path"] for p in probes if "httpGet" in p}:
                    async with http.get(f"http://127.0.0.1:{service_process.port}{path}") as r:
                        assert r.status == 200, path
                        assert (await r.json())["status"] == "ok"
        finally:
            await service_process.stop()
        assert service_process.supervisor is None  # no executor in the service


# --- the scale query, for real ----------------------------------------------------------

@pytest.fixture
def migrated_pg():
    url, name = make_migrated_pg_database()
    yield url
    drop_pg_database(name)


@pytest.mark.postgres
async def test_the_scale_queries_count_the_jobs_each_class_could_take(migrated_pg):
    """Each ScaledObject's query, as KEDA sends it, on a migrated database with jobs for
    each class, for any model, for a model no class takes and for ComfyUI: it counts the
    jobs the class could take, running ones included, and nothing once they are done."""
    import asyncpg

    from storage.db import Database
    from storage.queue import NewJob, Queue, Submission
    from tests.conftest import queue_settings

    docs = [d for _, d in objects()]
    queries = scale_queries()
    l4, a100 = (next(n for n in queries if n.endswith(c)) for c in ("-l4", "-a100"))
    assert "sd15" in class_models(docs, l4) and "sdxl" in class_models(docs, a100)
    assert "sdxl" not in class_models(docs, l4) and "sd15" not in class_models(docs, a100)

    parts = urlsplit(migrated_pg)
    schema = parse_qs(parts.query)["schema"][0]
    plain = urlunsplit(parts._replace(scheme="postgresql", query=""))
    db = await Database(migrated_pg).open()
    queue = Queue(db, queue_settings())
    # As KEDA connects: a plain URL, the schema as search_path (docs/deploy.md).
    conn = await asyncpg.connect(plain, server_settings={"search_path": schema})

    async def counts() -> dict[str, int]:
        return {name: int(await conn.fetchval(query)) for name, query in queries.items()}

    try:
        assert await counts() == {l4: 0, a100: 0}
        affinities = (["sd15"] * 2 + ["canny_sd15"] + ["sdxl"] * 4 + [None] +
                      ["flux"] * 3 + ["comfyui:poster"] * 2)
        await queue.enqueue(Submission("t", "alice", [
            NewJob(row=i + 2, workflow={"prompt": str(i)}, affinity=a)
            for i, a in enumerate(affinities)]))
        # sd15: 2, canny_sd15: 1, any model: 1 / sdxl: 4, any: 1; flux and ComfyUI: neither.
        assert await counts() == {l4: 4, a100: 5}
        running = await queue.claim("gpu-l4-0", only=["sd15"])
        ahead = await queue.claim("gpu-a100-0", only=["sdxl"], ahead=True)
        assert running and running.affinity == "sd15" and ahead and ahead.affinity == "sdxl"
        assert await counts() == {l4: 4, a100: 5}  # busy workers are not scaled away
        await queue.complete(running, ["out.png"])
        assert await counts() == {l4: 3, a100: 5}
        busy = await queue.claim("gpu-a100-1", only=["sdxl"])
        assert busy
        await queue.pause()  # nothing ready; running jobs still hold their workers
        assert await counts() == {l4: 0, a100: 1}
    finally:
        await conn.close()
        await queue.close()
