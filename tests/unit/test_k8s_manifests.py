"""The Kubernetes manifests in launchers/k8s/: valid against the official Kubernetes schemas
(offline, with kubernetes-validate), each Job's bench command composes into a config as
`python -m bench` would build it, and no credential is written into a manifest: every one comes
from the Secret through secretKeyRef."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

import kubernetes_validate
import pytest
import yaml

from bench.secrets import looks_secret_env
from bench.tools.radix import hydra_overrides, parse

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "launchers" / "k8s"
MANIFESTS = sorted(K8S.glob("*.yaml"))
KUBERNETES = "1.30.0"  # the oldest version the manifests promise (validated strictly: no unknown field)
ENTRYPOINT = "/usr/local/bin/bench-entrypoint"
SECRET = "bench-secrets"
# values the kubelet would put in for $(VAR) (fieldRef variables), to compose a command offline
SAMPLE_VALUES = {"POD_NAME": "bench-radix-x7k2p", "NODE_RANK": "1", "JOB_UID": "3f0c9a4e-0000-4000-8000-000000000000"}
CREDENTIAL_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def documents(name: str) -> List[dict]:
    return [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def one(name: str, kind: str) -> dict:
    (doc,) = [doc for doc in documents(name) if doc["kind"] == kind]
    return doc


def pod_spec(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def main_container(job: dict) -> dict:
    (container,) = pod_spec(job)["containers"]
    return container


def all_containers() -> Iterator[Tuple[str, dict]]:
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "Job":
                for container in pod_spec(doc).get("initContainers", []) + pod_spec(doc)["containers"]:
                    yield f"{path.name}:{container['name']}", container


def bench_args(container: dict) -> List[str]:
    """The container's arguments as bench receives them: $(VAR) expanded from its env (the
    kubelet leaves an undefined $(VAR) as it is, so every one must be defined)."""
    defined = {env["name"] for env in container.get("env", [])}
    expanded = []
    for arg in container["args"]:
        for var in re.findall(r"\$\((\w+)\)", arg):
            assert var in defined, f"{arg}: $({var}) is not in the container's env"
            arg = arg.replace(f"$({var})", SAMPLE_VALUES[var])
        expanded.append(arg)
    return expanded


def override(args: List[str], key: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{key}=")]
    return value


# ---- valid Kubernetes objects ----------------------------------------------------------------------


def test_the_manifests_are_all_there():
    assert {path.name for path in MANIFESTS} == {
        "radix-job.yaml",
        "ddp-job.yaml",
        "storage-job.yaml",
        "secret.example.yaml",
        "results-pvc.yaml",
    }


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_is_valid_against_the_kubernetes_schema(path):
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert docs
    for doc in docs:
        assert kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_schema_check_has_teeth():
    """A misspelled field and a number where Kubernetes wants a string are refused."""
    job = one("radix-job.yaml", "Job")
    pod_spec(job)["restartPolicyy"] = "Never"
    with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicyy"):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)
    job = one("radix-job.yaml", "Job")
    main_container(job)["args"][1] = 0.1
    with pytest.raises(kubernetes_validate.ValidationError, match="not of type"):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)


@pytest.mark.parametrize("name", ["radix-job.yaml", "ddp-job.yaml", "storage-job.yaml"])
def test_each_job_runs_the_image_entrypoint_once_as_its_non_root_user_with_results_in_a_volume(name):
    job = one(name, "Job")
    spec, container = pod_spec(job), main_container(job)
    assert spec["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert container["command"] == [ENTRYPOINT] and container["image"]
    dockerfile_user = re.search(r"^USER (\d+):(\d+)$", (REPO / "docker" / "Dockerfile").read_text(), re.M)
    security = spec["securityContext"]
    assert security["runAsNonRoot"] is True
    assert (str(security["runAsUser"]), str(security["runAsGroup"])) == dockerfile_user.groups()
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert "/results" in mounts and mounts["/results"] in volumes
    assert container["workingDir"] == "/results"  # mlflow.db (no tracking server) lands there too
    assert override(bench_args(container), "hydra.run.dir").startswith("/results/")
    env = {e["name"]: e for e in container["env"]}
    assert env["BENCH_STDOUT_LAST"]["value"] == "1"  # the final line is the pod log's last line


def test_the_results_claim_is_the_one_the_jobs_mount():
    claim = one("results-pvc.yaml", "PersistentVolumeClaim")["metadata"]["name"]
    for name in ("radix-job.yaml", "storage-job.yaml"):
        (volume,) = [v for v in pod_spec(one(name, "Job"))["volumes"] if v["name"] == "results"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim


# ---- the bench command of each Job -----------------------------------------------------------------


def test_radix_job_runs_the_radix_cli_on_one_gpu(compose):
    container = main_container(one("radix-job.yaml", "Job"))
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    args = bench_args(container)
    flags, extra = parse(args)  # bench.radix's own parser: these are the Radix flags (exit 2 otherwise)
    assert (flags.lr, flags.batch_size, flags.epochs, flags.steps_per_epoch, flags.allow_cpu) == (
        0.1,
        128,
        1,
        200,
        False,
    )
    assert args[:8] == ["--lr", "0.1", "--batch-size", "128", "--epochs", "1", "--steps-per-epoch", "200"]
    assert all("=" in arg and not arg.startswith("-") for arg in extra)
    config = compose(*hydra_overrides(flags, extra))
    assert (config.model.arch, config.data.name, config.optimizer.lr) == ("resnet50", "synthetic", 0.1)
    assert (config.data.batch_size, config.train.epochs, config.train.steps_per_epoch) == (128, 1, 200)
    assert config.allow_cpu is False  # a GPU job: no silent CPU run


def test_ddp_job_is_an_indexed_job_whose_pod_0_is_the_rendezvous(compose):
    service, job = one("ddp-job.yaml", "Service"), one("ddp-job.yaml", "Job")
    spec, container = pod_spec(job), main_container(job)
    args = bench_args(container)
    nnodes, nproc = int(override(args, "distributed.nnodes")), int(override(args, "distributed.nproc_per_node"))
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == nnodes > 1
    assert container["resources"]["limits"]["nvidia.com/gpu"] == nproc  # one rank per GPU
    # the node rank is the completion index
    env = {e["name"]: e for e in container["env"]}
    assert "distributed.node_rank=$(NODE_RANK)" in container["args"]
    assert (
        env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    # pod 0 answers at <job>-0.<service> through the headless Service the pods are a subdomain of
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert spec["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    host, port = override(args, "distributed.rdzv_endpoint").rsplit(":", 1)
    assert host == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    assert int(port) in {p["containerPort"] for p in container["ports"]}
    (wait,) = spec["initContainers"]
    assert wait["command"][-1] == host  # waits for the name the rendezvous needs
    # bench launches its node's ranks itself: no RANK/WORLD_SIZE/LOCAL_RANK (those mean "joined")
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK"} & set(env)
    for node_rank in range(nnodes):
        node_args = [a.replace("$(NODE_RANK)", str(node_rank)) for a in container["args"]]
        node_args = [a.replace("$(JOB_UID)", SAMPLE_VALUES["JOB_UID"]) for a in node_args]
        config = compose(*node_args)
        assert config.distributed.name.value == "ddp"
        assert (config.distributed.node_rank, config.distributed.world_size) == (node_rank, nnodes * nproc)


def test_storage_job_runs_the_storage_benchmark_on_s3(compose):
    container = main_container(one("storage-job.yaml", "Job"))
    args = bench_args(container)
    assert args[0] == "+experiment=storage_resnet50_h100"
    config = compose(*args)
    assert config.mode == "storage"  # a scenario's name (an option of conf/scenario/), a str
    assert config.storage.name == "s3" and config.storage.bucket and config.storage.endpoint
    env = {e["name"]: e for e in container["env"]}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # required: the run cannot work without them
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == SECRET and ref["key"] == name and not ref.get("optional", False)
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})  # accelerators are emulated


@pytest.mark.parametrize(
    "name,module", [("radix-job.yaml", "bench.radix"), ("ddp-job.yaml", "bench"), ("storage-job.yaml", "bench")]
)
def test_the_image_entrypoint_hands_each_job_to_the_right_module(name, module, tmp_path):
    """docker/entrypoint.sh with these args starts `python -m <module> <args>` (a stand-in python
    that prints what it was given)."""
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint(*sys.argv[1:], sep='\\n')\n")
    fake.chmod(0o755)
    args = bench_args(main_container(one(name, "Job")))
    proc = subprocess.run(
        ["bash", str(REPO / "docker" / "entrypoint.sh"), *args],
        env={"BENCH_PYTHON": str(fake)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["-m", module, *args]


# ---- credentials -----------------------------------------------------------------------------------


def test_tracking_comes_from_the_secret_in_every_job():
    for name in ("radix-job.yaml", "ddp-job.yaml", "storage-job.yaml"):
        env = {e["name"]: e for e in main_container(one(name, "Job"))["env"]}
        ref = env["MLFLOW_TRACKING_URI"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == SECRET and ref["key"] == "MLFLOW_TRACKING_URI"


def test_every_secret_reference_names_a_key_of_the_example_secret():
    secret = one("secret.example.yaml", "Secret")
    assert secret["metadata"]["name"] == SECRET
    keys = set(secret["stringData"])
    for where, container in all_containers():
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == SECRET and ref["key"] in keys, where
        for source in container.get("envFrom", []):
            assert source.get("secretRef", {}).get("name") == SECRET, where


def test_no_manifest_holds_a_credential_value():
    """A credential-looking variable (*KEY*, *SECRET*, *TOKEN*, *PASSWORD*, and whatever bench
    itself counts as secret) is never given a `value:`, only a secretKeyRef."""
    checked = 0
    for where, container in all_containers():
        for env in container.get("env", []):
            if CREDENTIAL_NAME.search(env["name"]) or looks_secret_env(env["name"]):
                assert "value" not in env, f"{where}: {env['name']} has a literal value"
                assert "secretKeyRef" in env["valueFrom"], f"{where}: {env['name']} does not come from a Secret"
                checked += 1
    assert checked >= 5  # the AWS and MLflow credentials are there, and were looked at
    # the same, on the text: no `value:` line right under a credential-looking name anywhere
    for path in MANIFESTS:
        if path.name != "secret.example.yaml":
            text = path.read_text()
            assert not re.search(r"name:\s*\S*(KEY|SECRET|TOKEN|PASSWORD)\S*\s*\n\s*value:", text, re.I), path.name
            assert not re.search(r"AKIA[0-9A-Z]{16}", text), path.name  # an AWS access key id


def test_the_example_secret_holds_only_placeholders():
    secret = one("secret.example.yaml", "Secret")
    assert "data" not in secret  # base64 would hide what is in it
    for key, value in secret["stringData"].items():
        assert "REPLACE-ME" in value, f"{key} does not look like a placeholder"
