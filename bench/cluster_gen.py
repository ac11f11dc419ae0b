"""Synthetic but realistic clusters for the benchmark.

Nodes look like what a managed cloud puts on them: well-known topology and instance
labels, node-pool labels, and the taints operators really use (gVisor/Kata sandbox
pools, GPU and Windows pools with NoSchedule taints, spot pools with
PreferNoSchedule, cordoned-by-controller NoExecute taints). Full Node objects carry
managedFields, conditions, addresses and an image list, so a 5,000-node full-nodes
request is tens of MB, as it is from a real kube-scheduler.

Everything is derived from a seeded ``random.Random``: the same size and seed give
byte-identical files, so numbers compare across commits.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

REGION = "us-east-1"
# The region in the EKS-style names of ``pool_nodes`` (its labels keep REGION: only
# the names' length and shape matter there).
EKS_REGION = "eu-west-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")
TS = "2026-11-20T08:14:03Z"


@dataclass(frozen=True)
class Pool:
    name: str
    share: float
    instance_types: tuple[str, ...]
    arch: str = "amd64"
    os: str = "linux"
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = ()  # key, value, effect


POOLS: tuple[Pool, ...] = (
    Pool("general", 0.50, ("m6i.2xlarge", "m6i.4xlarge", "m5.2xlarge")),
    Pool("general-arm", 0.10, ("m7g.2xlarge", "m7g.4xlarge"), arch="arm64"),
    Pool(
        "spot",
        0.06,
        ("c6i.2xlarge", "c5.2xlarge"),
        labels=(("karpenter.sh/capacity-type", "spot"),),
        taints=(("spot", "true", "PreferNoSchedule"),),
    ),
    Pool(
        "gvisor",
        0.10,
        ("n2-standard-8",),
        labels=(("sandbox.gke.io/runtime", "gvisor"),),
        taints=(("sandbox.gke.io/runtime", "gvisor", "NoSchedule"),),
    ),
    Pool(
        "kata",
        0.07,
        ("m5.metal", "c5.metal"),
        labels=(("katacontainers.io/kata-runtime", "true"),),
        taints=(("kata", "true", "NoSchedule"),),
    ),
    Pool(
        "gpu",
        0.07,
        ("p4d.24xlarge", "g5.12xlarge"),
        labels=(("nvidia.com/gpu.present", "true"), ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB")),
        taints=(("nvidia.com/gpu", "present", "NoSchedule"),),
    ),
    Pool(
        "windows",
        0.05,
        ("m6i.2xlarge",),
        os="windows",
        labels=(("node.kubernetes.io/windows-build", "10.0.20348"),),
        taints=(("os", "windows", "NoSchedule"),),
    ),
    Pool(
        "dedicated",
        0.05,
        ("r6i.4xlarge",),
        labels=(("dedicated", "team-data"),),
        taints=(("dedicated", "team-data", "NoExecute"),),
    ),
)

RUNTIME_CLASSES: tuple[dict[str, Any], ...] = (
    {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "runc"}, "handler": "runc"},
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "gvisor"},
        "handler": "runsc",
        "scheduling": {
            "nodeSelector": {"sandbox.gke.io/runtime": "gvisor"},
            "tolerations": [
                {
                    "key": "sandbox.gke.io/runtime",
                    "operator": "Equal",
                    "value": "gvisor",
                    "effect": "NoSchedule",
                }
            ],
        },
    },
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "kata-containers"},
        "handler": "kata",
        "scheduling": {
            "nodeSelector": {"katacontainers.io/kata-runtime": "true", "kubernetes.io/arch": "amd64"},
            "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}],
        },
    },
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
        "scheduling": {
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    },
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "windows-hyperv"},
        "handler": "runhcs-wcow-hypervisor",
        "scheduling": {
            "nodeSelector": {"kubernetes.io/os": "windows"},
            "tolerations": [{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}],
        },
    },
)

# What kube-scheduler's pods carry after admission (DefaultTolerationSeconds).
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]

# (pod name, runtimeClassName, extra tolerations): the mix of pods the benchmark rotates.
POD_MIX: tuple[tuple[str, str | None, tuple[dict[str, Any], ...]], ...] = (
    ("web", None, ()),
    ("api", "runc", ()),
    ("sandboxed", "gvisor", ()),
    ("kata-batch", "kata-containers", ({"key": "dedicated", "operator": "Equal", "value": "team-data"},)),
    ("trainer", "nvidia", ()),
    ("iis", "windows-hyperv", ()),
    (
        "spot-worker",
        None,
        ({"key": "spot", "operator": "Exists"}, {"operator": "Exists", "effect": "NoSchedule"}),
    ),
    ("wasm", "wasmtime", ()),  # names a RuntimeClass that does not exist
)


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _digest(rng: random.Random) -> str:
    return f"sha256:{rng.getrandbits(256):064x}"


_IMAGES = (
    "registry.k8s.io/kube-proxy:v1.36.2",
    "registry.k8s.io/pause:3.10",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni:v1.19.2",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-ebs-csi-driver:v1.37.0",
    "quay.io/prometheus/node-exporter:v1.8.2",
    "docker.io/grafana/promtail:3.2.1",
    "ghcr.io/example/payments-api:2026.11.3",
    "ghcr.io/example/checkout-web:2026.11.7",
    "ghcr.io/example/search-indexer:4.2.0",
    "docker.io/library/nginx:1.27.3",
    "docker.io/library/redis:7.4.1",
    "quay.io/jetstack/cert-manager-controller:v1.16.2",
    "registry.k8s.io/ingress-nginx/controller:v1.12.0",
    "docker.io/bitnami/postgresql:17.2.0",
    "public.ecr.aws/aws-observability/aws-otel-collector:v0.41.1",
    "docker.io/istio/proxyv2:1.24.1",
    "ghcr.io/example/ml-feature-store:1.8.0",
    "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    "docker.io/fluent/fluent-bit:3.2.2",
    "ghcr.io/example/ledger-worker:2026.10.28",
)


def _pick_pool(rng: random.Random) -> Pool:
    x = rng.random()
    for pool in POOLS:
        x -= pool.share
        if x < 0:
            return pool
    return POOLS[0]


def node_object(
    index: int,
    rng: random.Random,
    *,
    managed_fields: bool = True,
    pool: Pool | None = None,
    address: str | None = None,
    taint_free: bool = False,
) -> dict[str, Any]:
    """One Node as the API server serves it. ``pool``, ``address`` (the node's IPv4
    address, which then names it as EKS does) and ``taint_free`` shape the clusters of
    ``pool_nodes``; without them the pool is drawn and the name made unique by index."""
    pool = pool or _pick_pool(rng)
    zone = rng.choice(ZONES)
    itype = rng.choice(pool.instance_types)
    octets = f"10.{rng.randrange(16, 32)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    name = f"ip-{octets.replace('.', '-')}.ec2.internal-{index:05d}"
    if address is not None:
        octets = address
        name = f"ip-{octets.replace('.', '-')}.{EKS_REGION}.compute.internal"
    labels = {
        "beta.kubernetes.io/arch": pool.arch,
        "beta.kubernetes.io/instance-type": itype,
        "beta.kubernetes.io/os": pool.os,
        "eks.amazonaws.com/capacityType": "SPOT" if pool.name == "spot" else "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": f"{pool.name}-{zone[-1]}",
        "eks.amazonaws.com/nodegroup-image": "ami-0c2b9f7d4e5a61b03",
        "failure-domain.beta.kubernetes.io/region": REGION,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "k8s.io/cloud-provider-aws": "b1f6d3c2a0e4",
        "kubernetes.io/arch": pool.arch,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": pool.os,
        "node-pool": pool.name,
        "node.kubernetes.io/instance-type": itype,
        "topology.ebs.csi.aws.com/zone": zone,
        "topology.kubernetes.io/region": REGION,
        "topology.kubernetes.io/zone": zone,
        **dict(pool.labels),
    }
    taints: list[dict[str, str]] = [{"key": k, "value": v, "effect": e} for k, v, e in pool.taints]
    roll = rng.random()
    if taint_free:
        taints = []
    elif roll < 0.01:  # lost contact: the node lifecycle controller taints it
        taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})
    elif roll < 0.02:
        taints.append({"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"})
    elif roll < 0.05:
        taints.append({"key": "example.com/draining", "value": "true", "effect": "PreferNoSchedule"})
    elif roll < 0.06:
        taints.append(
            {"key": "example.com/maintenance", "value": str(rng.randrange(1, 9)), "effect": "NoExecute"}
        )
    for taint in taints:
        if taint["effect"] == "NoExecute":
            taint["timeAdded"] = TS

    cpu = {"2xlarge": "8", "4xlarge": "16", "metal": "96", "24xlarge": "96", "12xlarge": "48"}
    cores = next((v for k, v in cpu.items() if itype.endswith(k)), "8")
    capacity = {
        "cpu": cores,
        "ephemeral-storage": "104845292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{int(cores) * 4 * 1024 * 1024}Ki",
        "pods": "110",
    }
    if pool.name == "gpu":
        capacity["nvidia.com/gpu"] = "8"
    allocatable = {**capacity, "cpu": f"{int(cores) * 1000 - 90}m", "ephemeral-storage": "95551679124"}
    conditions = [
        {
            "type": ctype,
            "status": "False",
            "lastHeartbeatTime": TS,
            "lastTransitionTime": TS,
            "reason": reason,
            "message": message,
        }
        for ctype, reason, message in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": TS,
            "lastTransitionTime": TS,
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    )
    images = [
        {"names": [f"{image.split(':')[0]}@{_digest(rng)}", image], "sizeBytes": rng.randrange(10**6, 10**9)}
        for image in rng.sample(_IMAGES, k=rng.randrange(8, len(_IMAGES)))
    ]
    handlers = [{"name": "runc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}]
    if pool.name == "gvisor":
        handlers.append(
            {"name": "runsc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}}
        )
    if pool.name == "kata":
        handlers.append(
            {"name": "kata", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}}
        )
    metadata: dict[str, Any] = {
        "name": name,
        "uid": _uid(rng),
        "resourceVersion": str(100000 + index * 7),
        "creationTimestamp": TS,
        "labels": labels,
        "annotations": {
            "alpha.kubernetes.io/provided-node-ip": octets,
            "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-{rng.getrandbits(64):017x}"}}',
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        },
    }
    if managed_fields:
        metadata["managedFields"] = [
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": TS,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:annotations": {
                            ".": {},
                            "f:alpha.kubernetes.io/provided-node-ip": {},
                            "f:volumes.kubernetes.io/controller-managed-attach-detach": {},
                        },
                        "f:labels": {".": {}, **{f"f:{key}": {} for key in labels}},
                    },
                    "f:spec": {"f:providerID": {}},
                },
            },
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": TS,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                    "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, f'v:"{octets}/24"': {}}},
                },
            },
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": TS,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:status": {
                        "f:allocatable": {f"f:{key}": {} for key in allocatable},
                        "f:capacity": {f"f:{key}": {} for key in capacity},
                        "f:conditions": {
                            f'k:{{"type":"{c["type"]}"}}': {
                                "f:lastHeartbeatTime": {},
                                "f:lastTransitionTime": {},
                                "f:message": {},
                                "f:reason": {},
                                "f:status": {},
                            }
                            for c in conditions
                        },
                        "f:images": {},
                        "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}, "f:osImage": {}},
                        "f:runtimeHandlers": {},
                    }
                },
                "subresource": "status",
            },
        ]
    spec: dict[str, Any] = {
        "podCIDR": f"{octets}/24",
        "podCIDRs": [f"{octets}/24"],
        "providerID": f"aws:///{zone}/i-{rng.getrandbits(64):017x}",
    }
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": octets},
                {"type": "InternalDNS", "address": f"ip-{octets.replace('.', '-')}.ec2.internal"},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {
                "architecture": pool.arch,
                "bootID": _uid(rng),
                "containerRuntimeVersion": "containerd://2.0.1",
                "kernelVersion": "6.1.119-129.201.amzn2023.x86_64",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.36.2-eks-1e2c3f4",
                "machineID": f"{rng.getrandbits(128):032x}",
                "operatingSystem": pool.os,
                "osImage": "Amazon Linux 2023.6.20241212",
                "systemUUID": _uid(rng),
            },
            "runtimeHandlers": handlers,
        },
    }


def nodes(count: int, seed: int = 585, *, managed_fields: bool = True) -> list[dict[str, Any]]:
    rng = random.Random(f"{seed}:{count}")
    return [node_object(i, rng, managed_fields=managed_fields) for i in range(count)]


def pool_nodes(count: int, seed: int = 585) -> list[dict[str, Any]]:
    """The cluster of the call-shape rows: no taint anywhere, every other node in the
    gVisor class's pool (its label, not its taint), named as EKS names nodes
    (``ip-10-0-12-34.eu-west-1.compute.internal``, 40 characters or so), without
    managedFields (a cluster file's nodes)."""
    rng = random.Random(f"pools:{seed}:{count}")
    general = next(pool for pool in POOLS if pool.name == "general")
    gvisor = next(pool for pool in POOLS if pool.name == "gvisor")
    # Distinct addresses in 10.0.0.0/12 (a VPC's range), so distinct names.
    addresses = rng.sample(range(1 << 20), count)
    return [
        node_object(
            index,
            rng,
            managed_fields=False,
            pool=gvisor if index % 2 else general,
            address=f"10.{address >> 16}.{(address >> 8) & 255}.{address & 255}",
            taint_free=True,
        )
        for index, address in enumerate(addresses)
    ]


def in_gvisor_pool(node: dict[str, Any]) -> bool:
    """Whether the gVisor class's selector picks ``node``."""
    return bool(node["metadata"]["labels"].get("sandbox.gke.io/runtime") == "gvisor")


def cluster_list(node_objects: list[dict[str, Any]]) -> dict[str, Any]:
    """A cluster file: ``kubectl get nodes,runtimeclasses -o json`` (which omits managedFields)."""
    items = []
    for node in node_objects:
        meta = {k: v for k, v in node["metadata"].items() if k != "managedFields"}
        items.append({**node, "metadata": meta})
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items + list(RUNTIME_CLASSES),
    }


def pod_object(
    name: str, runtime_class: str | None, tolerations: tuple[dict[str, Any], ...]
) -> dict[str, Any]:
    """A pending Pod as kube-scheduler embeds it in ExtenderArgs (no kind/apiVersion)."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": f"ghcr.io/example/{name}:2026.11.1",
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [*tolerations, *DEFAULT_TOLERATIONS],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return {
        "metadata": {
            "name": f"{name}-7d9f8b6c5-x2k4q",
            "generateName": f"{name}-7d9f8b6c5-",
            "namespace": "default",
            "uid": "6f1c2a9e-3b7d-4e0f-9a61-2c8d5e4b7f10",
            "resourceVersion": "812345",
            "creationTimestamp": TS,
            "labels": {"app": name, "pod-template-hash": "7d9f8b6c5"},
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def pods() -> list[dict[str, Any]]:
    return [pod_object(name, rc, tol) for name, rc, tol in POD_MIX]
