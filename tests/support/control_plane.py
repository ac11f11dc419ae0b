"""A real Kubernetes control plane for the tests and benchmarks that need one.

The test API server (tests/support/apiserver) is fast and runs anywhere, but it is an
emulation: its CEL is the Python ``cel`` package, its admission chain what we wrote. Where
Kubernetes' own behaviour is the question (what an admission policy costs, what the
chain does with a pod, what kube-scheduler or cluster-autoscaler decide), the tests run
the real binaries: etcd, kube-apiserver, and where a test needs them kube-scheduler and
cluster-autoscaler, started here as processes of their own on loopback.

**Where the binaries are**, as controller-runtime's envtest finds them
(sigs.k8s.io/controller-runtime/pkg/internal/testing/controlplane): the directory named
by ``KUBEBUILDER_ASSETS``, holding ``kube-apiserver``, ``etcd`` and ``kubectl`` (and here
also ``kube-scheduler`` and ``cluster-autoscaler`` for the tests that use them), else
envtest's default ``/usr/local/kubebuilder/bin``, else the cache directory where .ci/run
unpacks them. ``etcd`` may also come from PATH (Debian's ``etcd-server``). Users get
them with ``setup-envtest`` (docs/development.md); a machine without them skips the tier
with a message naming ``KUBEBUILDER_ASSETS``.

**What is started**: etcd on two free loopback ports; kube-apiserver with a serving
certificate, a client CA (the tests are ``admin`` in ``system:masters``), a
service-account key pair (tokens for the extender's and the scheduler's own
identities), ``--authorization-mode=Node,RBAC``, and a service IP range inside
127.0.0.0/8, so that a Service's ClusterIP is a loopback address: ``forward_service``
binds a small TCP forwarder there, and the API server reaches a webhook served by a
local process through its Service reference, as on a real cluster. No
kube-controller-manager: nothing creates ServiceAccounts, removes the not-ready taint
of new nodes or finishes a namespace's deletion, so ``ensure_namespace`` creates the
``default`` ServiceAccount and tests use namespaces of their own rather than delete
them.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from tests.support.ports import free_port

# The binaries' version the project was measured with (.ci/run unpacks this one).
KUBERNETES_VERSION = "v1.36.2"
ENVTEST_DEFAULT = Path("/usr/local/kubebuilder/bin")
CI_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "runtimeclass-extender"
    / f"kube-{KUBERNETES_VERSION}"
)
REQUIRED = ("kube-apiserver", "etcd", "kubectl")
# The range kube-apiserver takes Service ClusterIPs from: loopback, so a forwarder can
# bind them (127.100.0.1 is the "kubernetes" Service's).
SERVICE_RANGE = "127.100.0.0/24"
# What predicate mode asks of the API server (docs/install.md).
PREDICATE_MODE = {"--disable-admission-plugins": "RuntimeClass"}
MISSING = (
    "no Kubernetes control plane binaries: set KUBEBUILDER_ASSETS to a directory holding "
    "kube-apiserver, etcd and kubectl (docs/development.md, 'The real control plane')"
)

Json = dict[str, Any]


@dataclass(frozen=True)
class Assets:
    """The directory of the binaries, and etcd (which may come from PATH)."""

    directory: Path
    etcd: Path

    def binary(self, name: str) -> Path | None:
        path = self.directory / name
        return path if path.is_file() and os.access(path, os.X_OK) else None

    @property
    def kubectl(self) -> Path:
        path = self.binary("kubectl")
        assert path is not None
        return path


def find_assets() -> Assets | None:
    """The binaries, looked for as envtest does (see the module doc); None if missing."""
    candidates: list[Path] = []
    if os.environ.get("KUBEBUILDER_ASSETS"):
        candidates.append(Path(os.environ["KUBEBUILDER_ASSETS"]))
    candidates += [ENVTEST_DEFAULT, CI_CACHE]
    for directory in candidates:
        if not all((directory / name).exists() or name == "etcd" for name in REQUIRED):
            continue
        etcd = directory / "etcd"
        if not etcd.exists():
            found = shutil.which("etcd")
            if found is None:
                continue
            etcd = Path(found)
        return Assets(directory, etcd)
    return None


# ----- certificates --------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Authority:
    """A throwaway CA issuing the API server's serving certificate and client
    certificates (cryptography, as the extender's own certificate code uses)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)
        self.cert_path = directory / f"{name}-ca.crt"
        self.cert_path.write_bytes(self.cert_pem)

    def issue(
        self,
        file_name: str,
        *,
        common_name: str,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = False,
    ) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(
                x509.ExtendedKeyUsage(
                    [
                        x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
                        if server
                        else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
                    ]
                ),
                critical=False,
            )
        )
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(self.directory / f"{file_name}.crt", self.directory / f"{file_name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return pair


# ----- answers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: Json
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


class ApiError(AssertionError):
    """A request a test expected to succeed did not."""


class Client:
    """Plain HTTPS to the API server, one keep-alive connection per thread, as one
    identity (the admin's client certificate, or a bearer token). Synchronous, so that
    benchmark threads and plain tests use it alike."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, *, token: str | None = None) -> None:
        self.host, self.port, self._context, self._token = host, port, context, token
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(self.host, self.port, context=self._context, timeout=60)
            self._local.connection = connection
        return connection

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Answer:
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                raw = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError, http.client.CannotSendRequest):
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
        answer_headers = {k.lower(): v for k, v in response.getheaders()}
        if "warning" in answer_headers:
            answer_headers["warning"] = ", ".join(
                v for k, v in response.getheaders() if k.lower() == "warning"
            )
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"message": raw.decode(errors="replace")}
        return Answer(
            response.status, parsed if isinstance(parsed, dict) else {"items": parsed}, answer_headers
        )

    def get(self, path: str, **query: str) -> Json:
        answer = self.request("GET", path, query=query or None)
        if not answer.ok:
            raise ApiError(f"GET {path}: {answer.status} {answer.message}")
        return answer.body

    def create(self, path: str, body: Json, **query: str) -> Json:
        answer = self.request("POST", path, body, query=query or None)
        if not answer.ok:
            raise ApiError(f"POST {path}: {answer.status} {answer.message}")
        return answer.body

    def patch(self, path: str, body: Any, *, merge: bool = True) -> Json:
        kind = "application/merge-patch+json" if merge else "application/json-patch+json"
        answer = self.request("PATCH", path, body, content_type=kind)
        if not answer.ok:
            raise ApiError(f"PATCH {path}: {answer.status} {answer.message}")
        return answer.body

    def delete(self, path: str) -> Answer:
        return self.request("DELETE", path)


# ----- paths of the objects the tests use ----------------------------------------------

_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "Node": "/api/v1/nodes",
    "RuntimeClass": "/apis/node.k8s.io/v1/runtimeclasses",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "MutatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "PodAdmissionTable": "/apis/runtimeclass-extender.dev/v1alpha1/podadmissiontables",
}
_NAMESPACED = {
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "Service": "/api/v1/namespaces/{ns}/services",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "Event": "/apis/events.k8s.io/v1/namespaces/{ns}/events",
}


def collection_path(kind: str, namespace: str | None = None) -> str:
    if kind in _PATHS:
        return _PATHS[kind]
    if kind in _NAMESPACED:
        if not namespace:
            raise ValueError(f"{kind} is namespaced: give its namespace")
        return _NAMESPACED[kind].format(ns=namespace)
    raise KeyError(f"no API path known for kind {kind}")


def object_path(obj: Json) -> str:
    meta = obj.get("metadata", {})
    return f"{collection_path(obj['kind'], meta.get('namespace'))}/{meta['name']}"


# ----- the processes -------------------------------------------------------------------


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ControlPlane:
    """etcd and kube-apiserver (see the module doc); a context manager.

    ``apiserver_flags`` are added to (or replace, by flag name) the defaults, e.g.
    ``{"--disable-admission-plugins": "RuntimeClass"}`` for predicate mode."""

    def __init__(self, assets: Assets, *, apiserver_flags: Mapping[str, str] | None = None) -> None:
        self.assets = assets
        self._flags = dict(apiserver_flags or {})
        self._temp = tempfile.TemporaryDirectory(prefix="control-plane-")
        self.directory = Path(self._temp.name)
        self.processes: list[Process] = []
        self._forwarders: dict[tuple[str, int], _Forwarder] = {}
        self.port = 0
        self._namespaces: set[str] = set()

    # -- life --------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        d = self.directory
        self.ca = Authority(d, "cluster")
        self.serving = self.ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            ips=["127.0.0.1", "127.100.0.1"],
            server=True,
        )
        self.admin = self.ca.issue("admin", common_name="admin", organizations=["system:masters"])
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (d / "sa.key").write_bytes(
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        (d / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        etcd_port, peer_port = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(self.assets.etcd),
                "--data-dir",
                str(d / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
            ],
            env={"ETCD_UNSUPPORTED_ARCH": os.environ.get("ETCD_UNSUPPORTED_ARCH", "")},
        )
        self.port = free_port()
        flags = {
            "--etcd-servers": f"http://127.0.0.1:{etcd_port}",
            "--secure-port": str(self.port),
            "--bind-address": "127.0.0.1",
            "--advertise-address": "127.0.0.1",
            "--tls-cert-file": str(self.serving.cert),
            "--tls-private-key-file": str(self.serving.key),
            "--client-ca-file": str(self.ca.cert_path),
            "--service-account-key-file": str(d / "sa.pub"),
            "--service-account-signing-key-file": str(d / "sa.key"),
            "--service-account-issuer": "https://kubernetes.default.svc",
            "--service-cluster-ip-range": SERVICE_RANGE,
            "--authorization-mode": "Node,RBAC",
            "--allow-privileged": "true",
            "--cert-dir": str(d / "certs"),
            "--profiling": "false",
            "--endpoint-reconciler-type": "none",
        }
        flags.update(self._flags)
        self._spawn(
            "kube-apiserver", [str(self._binary("kube-apiserver")), *(f"{k}={v}" for k, v in flags.items())]
        )
        context = ssl.create_default_context(cafile=str(self.ca.cert_path))
        context.load_cert_chain(str(self.admin.cert), str(self.admin.key))
        self.context = context
        self.client = Client("127.0.0.1", self.port, context)
        self._wait_ready()
        self.kubeconfig = self.write_kubeconfig(d / "admin.kubeconfig", client_pair=self.admin)

    def stop(self) -> None:
        for forwarder in self._forwarders.values():
            forwarder.close()
        self._forwarders.clear()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        self._temp.cleanup()

    def _binary(self, name: str) -> Path:
        path = self.assets.binary(name)
        if path is None:
            raise FileNotFoundError(f"{name} is not in {self.assets.directory} (KUBEBUILDER_ASSETS)")
        return path

    def _spawn(self, name: str, argv: list[str], *, env: Mapping[str, str] | None = None) -> Process:
        log = self.directory / f"{name}.log"
        handle = log.open("wb")
        popen = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        handle.close()
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def spawn(self, name: str, argv: list[str], *, env: Mapping[str, str] | None = None) -> Process:
        """Start another process beside the control plane (kube-scheduler, the
        autoscaler, an extender), stopped with it."""
        return self._spawn(name, argv, env=env)

    def _wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.popen.poll() is not None:
                    raise RuntimeError(
                        f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}"
                    )
            try:
                answer = self.client.request("GET", "/readyz")
                if answer.status == 200:
                    return
                last = f"{answer.status} {answer.body}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RuntimeError(
            f"kube-apiserver not ready after {timeout:.0f} s: {last}\n{self.processes[-1].tail()}"
        )

    # -- identities --------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def write_kubeconfig(
        self, path: Path, *, client_pair: Pair | None = None, token: str | None = None
    ) -> Path:
        user: Json = {}
        if client_pair is not None:
            user = {"client-certificate": str(client_pair.cert), "client-key": str(client_pair.key)}
        if token is not None:
            user = {"token": token}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "real",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca.cert_path)},
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": "user"}}],
            "current-context": "real",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def token(self, namespace: str, service_account: str, *, seconds: int = 86400) -> str:
        """A token of a ServiceAccount (created if missing), from the TokenRequest API."""
        self.ensure_namespace(namespace)
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": service_account, "namespace": namespace},
            }
        )
        answer = self.client.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return str(answer["status"]["token"])

    def service_account_kubeconfig(self, namespace: str, service_account: str) -> Path:
        token = self.token(namespace, service_account)
        return self.write_kubeconfig(
            self.directory / f"{namespace}.{service_account}.kubeconfig", token=token
        )

    def client_as(self, namespace: str, service_account: str) -> Client:
        return Client(
            "127.0.0.1",
            self.port,
            ssl.create_default_context(cafile=str(self.ca.cert_path)),
            token=self.token(namespace, service_account),
        )

    # -- objects -----------------------------------------------------------------------

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """The namespace and its ``default`` ServiceAccount (no controller-manager makes it)."""
        if name in self._namespaces and not labels:
            return
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": dict(labels or {})},
            }
        )

    def apply(self, obj: Json) -> Json:
        """Create the object, or replace it (keeping its resourceVersion) if it exists. A
        Namespace gets its ``default`` ServiceAccount too, and is then known: an object
        applied in it later does not make it again (which would replace its labels)."""
        meta = obj.get("metadata", {})
        if obj["kind"] != "Namespace" and meta.get("namespace") and meta["namespace"] not in self._namespaces:
            self.ensure_namespace(meta["namespace"])
        collection = collection_path(obj["kind"], meta.get("namespace"))
        answer = self.client.request("POST", collection, obj)
        if answer.status == 409:
            current = self.client.get(object_path(obj))
            replacement = json.loads(json.dumps(obj))
            replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            answer = self.client.request("PUT", object_path(obj), replacement)
        if not answer.ok:
            raise ApiError(f"apply {obj['kind']} {meta.get('name')}: {answer.status} {answer.message}")
        if obj["kind"] == "Namespace" and meta["name"] not in self._namespaces:
            self._namespaces.add(meta["name"])
            self.apply(
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": meta["name"]}}
            )
        return answer.body

    def apply_all(self, objects: Sequence[Json]) -> None:
        for obj in _ordered(objects):
            self.apply(obj)
            if obj["kind"] == "CustomResourceDefinition":
                self.wait_established(obj["metadata"]["name"])

    def wait_established(self, name: str, timeout: float = 30.0) -> None:
        """Until the CRD serves its kind (objects of it can be created)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            crd = self.client.get(f"{_PATHS['CustomResourceDefinition']}/{name}")
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                return
            time.sleep(0.1)
        raise RuntimeError(f"CustomResourceDefinition {name} not established after {timeout:.0f} s")

    def delete(self, obj: Json) -> None:
        answer = self.client.delete(object_path(obj))
        if answer.status not in (200, 202, 404):
            raise ApiError(
                f"delete {obj['kind']} {obj['metadata']['name']}: {answer.status} {answer.message}"
            )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.assets.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and result.returncode != 0:
            raise ApiError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result

    def add_ready_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Json] = (),
        cpu: str = "8",
        memory: str = "32Gi",
        pods: str = "110",
        ready_since: datetime.datetime | None = None,
    ) -> Json:
        """A Node object with the status a kubelet would report: Ready (since
        ``ready_since``, default now), with capacity. The not-ready taint the API server
        gives every new node is removed (no controller-manager does it here)."""
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            }
        )
        resources = {"cpu": cpu, "memory": memory, "pods": pods}
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "ready",
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": _now(ready_since),
                    }
                ],
            }
        }
        self.client.patch(f"/api/v1/nodes/{name}/status", status)
        return self.client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": list(taints) or None}})

    # -- Services reachable on loopback ------------------------------------------------

    def forward_service(self, namespace: str, name: str, target: tuple[str, int]) -> list[tuple[str, int]]:
        """Make the Service's ClusterIP:port reach ``target`` (a local listener); the
        addresses forwarded, for ``stop_forwarding``."""
        service = self.client.get(f"/api/v1/namespaces/{namespace}/services/{name}")
        cluster_ip = service["spec"]["clusterIP"]
        addresses = []
        for port in service["spec"]["ports"]:
            listen = (cluster_ip, int(port["port"]))
            self.stop_forwarding([listen])
            self._forwarders[listen] = _Forwarder(listen, target)
            addresses.append(listen)
        return addresses

    def stop_forwarding(self, addresses: Sequence[tuple[str, int]]) -> None:
        """Close the forwarders on ``addresses`` (the Service is gone with its install)."""
        for listen in addresses:
            previous = self._forwarders.pop(listen, None)
            if previous is not None:
                previous.close()


def _now(at: datetime.datetime | None = None) -> str:
    return (at or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


# Objects others depend on first: namespaces, then what RBAC and policies name.
_ORDER = (
    "CustomResourceDefinition",
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ValidatingAdmissionPolicy",
    "MutatingAdmissionPolicy",
)


def _ordered(objects: Sequence[Json]) -> list[Json]:
    def rank(obj: Json) -> int:
        kind = obj.get("kind", "")
        return _ORDER.index(kind) if kind in _ORDER else len(_ORDER)

    return sorted(objects, key=rank)


class _Forwarder:
    """A TCP forwarder from ``listen`` to ``target``, in threads (kube-proxy's job)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self._target = target
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(listen)
        self._sock.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._closed = True
        # shutdown() first: close() alone leaves a socket another thread is accept()ing
        # on listening (Linux), and a later Service given the same ClusterIP could not
        # be forwarded.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

