"""Connecting to the API server: which configuration to use, and a clear error if none.

The order is the one controller-runtime documents for ``config.GetConfig``
(pkg/client/config/config.go), which operators already know from other controllers:

1. ``--kubeconfig PATH`` (the setting ``kubeconfig``),
2. the ``KUBECONFIG`` environment variable (a ``:``-separated list, merged as kubectl
   merges it),
3. the in-cluster service account (``KUBERNETES_SERVICE_HOST``/``_PORT`` and the token
   under /var/run/secrets/kubernetes.io/serviceaccount), as client-go's
   rest.InClusterConfig reads it,
4. ``~/.kube/config``.

``--context`` picks a kubeconfig context and therefore skips the in-cluster step.
If nothing applies, ``KubeConfigError`` says what to pass, including ``--cluster-file``
for running without a cluster.

kubeconfig files are read, merged and checked first (``extender.kube.kubeconfig``),
so a broken file is one line naming the file and the entry; kubernetes-asyncio then
gets the one chosen context as a dict, with its file paths already absolute, and does
the authentication (tokens, client certificates, exec plugins).

The configuration goes into a private ``Configuration`` object, never the library's
process-wide default, so tests (and a second client) cannot interfere.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_kube_config_from_dict
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from extender.kube.kubeconfig import KubeConfigError, resolve_kubeconfig

NO_CLUSTER_HELP = (
    "no Kubernetes API server configured: not running in a pod with a service account, "
    "no --kubeconfig given, KUBECONFIG is not set and ~/.kube/config does not exist. "
    "Pass --kubeconfig PATH (or set KUBECONFIG) and optionally --context NAME"
)
# For the commands that can read the cluster from a file instead (not check-pod-admission,
# which creates pods through the API server).
CLUSTER_FILE_HELP = ", or read the cluster from a file with --cluster-file PATH"


@dataclass(frozen=True)
class Connection:
    """A configured API client and a one-line description of where it points."""

    api: Any  # kubernetes_asyncio.client.ApiClient (the library ships no type hints)
    source: str
    host: str


def _in_cluster_available(environ: Mapping[str, str], token_file: str) -> bool:
    return (
        bool(environ.get(SERVICE_HOST_ENV_NAME))
        and bool(environ.get(SERVICE_PORT_ENV_NAME))
        and (Path(token_file).is_file())
    )


def choose_source(
    *,
    kubeconfig: str | None,
    context: str | None,
    environ: Mapping[str, str],
    home: Path,
    token_file: str = SERVICE_TOKEN_FILENAME,
    cluster_file_help: bool = True,
) -> tuple[str, str | None]:
    """Which configuration applies: ("kubeconfig", paths) or ("in-cluster", None).

    Pure apart from checking that files exist. Raises KubeConfigError; without
    ``cluster_file_help`` its message does not suggest --cluster-file.
    """
    help_text = NO_CLUSTER_HELP + (CLUSTER_FILE_HELP if cluster_file_help else "")
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise KubeConfigError(f"--kubeconfig {kubeconfig}: no such file")
        return "kubeconfig", kubeconfig
    env_paths = environ.get("KUBECONFIG", "")
    if env_paths:
        existing = [p for p in env_paths.split(os.pathsep) if p and Path(p).is_file()]
        if not existing:
            raise KubeConfigError(f"KUBECONFIG={env_paths}: none of these files exists")
        return "kubeconfig", os.pathsep.join(existing)
    if context is None and _in_cluster_available(environ, token_file):
        return "in-cluster", None
    default = home / ".kube" / "config"
    if default.is_file():
        return "kubeconfig", str(default)
    if context is not None:
        raise KubeConfigError(f"--context {context}: no kubeconfig file to take it from. " + help_text)
    raise KubeConfigError(help_text)


_SSL_SOURCE_SUFFIX = re.compile(r"\s*\(_ssl\.c:\d+\)$")


def _ssl_reason(exc: Exception) -> str:
    return _SSL_SOURCE_SUFFIX.sub("", " ".join(str(exc).split()))


def _check_tls_files(configuration: Any, config: dict[str, Any], where: str) -> None:
    """Load the CA and client certificate as the API client will, naming the culprit.

    kubernetes-asyncio builds its SSL context when the ApiClient is created; a file that
    exists but holds no certificate, or a key that does not match, would otherwise fail
    there with an OpenSSL code and no file name.
    """
    cluster = config["clusters"][0]
    where_cluster = f'{where}: cluster "{cluster["name"]}"'
    try:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    except (ssl.SSLError, OSError) as exc:
        field_name = (
            "certificate-authority-data"
            if cluster["cluster"].get("certificate-authority-data")
            else f"certificate-authority {configuration.ssl_ca_cert}"
        )
        raise KubeConfigError(
            f"{where_cluster} {field_name}: not a PEM CA certificate ({_ssl_reason(exc)})"
        ) from None
    if configuration.cert_file:
        user = config.get("users", [{"name": "?"}])[0]
        try:
            context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
        except (ssl.SSLError, OSError) as exc:
            raise KubeConfigError(
                f'{where}: user "{user["name"]}": client-certificate and client-key do not load as a PEM '
                f"certificate and its key ({_ssl_reason(exc)})"
            ) from None


async def connect(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    cluster_file_help: bool = True,
) -> Connection:
    """A configured ``ApiClient``; the caller closes it (``serve`` does at shutdown).
    ``cluster_file_help``: whether the error for no configuration at all suggests
    --cluster-file (the caller has one)."""
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    kind, paths = choose_source(
        kubeconfig=kubeconfig,
        context=context,
        environ=environ,
        home=home,
        cluster_file_help=cluster_file_help,
    )
    configuration = Configuration()
    where = "in-cluster configuration" if kind == "in-cluster" else f"kubeconfig {paths}"
    try:
        if kind == "in-cluster":
            InClusterConfigLoader(
                token_filename=SERVICE_TOKEN_FILENAME,
                cert_filename=SERVICE_CERT_FILENAME,
                environ=dict(environ),
            ).load_and_set(configuration)
            source = "in-cluster service account"
        else:
            assert paths is not None
            chosen, config = resolve_kubeconfig(paths.split(os.pathsep), context)
            loader = await load_kube_config_from_dict(
                config_dict=config, context=chosen, client_configuration=configuration
            )
            _check_tls_files(configuration, config, where)
            _refresh_expiring_exec_tokens(loader, configuration)
            source = f"kubeconfig {paths}" + (f" (context {context})" if context else "")
        api = ApiClient(configuration=configuration)
        _trust_the_environment_only_for_a_proxy(api, environ)
    except KubeConfigError:
        raise
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        # One line: exec-plugin failures carry the plugin's (multi-line) stderr.
        raise KubeConfigError(f"{where}: {' '.join(str(exc).split())}") from None
    return Connection(api=api, source=source, host=str(configuration.host))


def _trust_the_environment_only_for_a_proxy(api: Any, environ: Mapping[str, str]) -> None:
    """kubernetes-asyncio's session trusts the environment (for HTTPS_PROXY and the
    like, which client-go honours too); aiohttp then also looks up ~/.netrc for every
    request, in a worker thread (``ClientSession._request``), although these requests
    carry their own Authorization header. That thread hop is paid by every LIST, watch
    and write, and a burst of writes (a relabel) then holds the event loop behind the
    threads. So the session trusts the environment only when it names a proxy."""
    # The variables urllib.request.getproxies_environment (and so aiohttp) reads.
    proxies = [
        k for k, v in environ.items() if v and k.lower().endswith("_proxy") and k.lower() != "no_proxy"
    ]
    if not proxies:
        api.rest_client.pool_manager._trust_env = False


def _refresh_expiring_exec_tokens(loader: Any, configuration: Any) -> None:
    """Keep exec-plugin tokens (EKS, GKE, OIDC helpers) fresh for a long-running watch.

    kubernetes-asyncio runs the plugin once at load time; a token with an
    ``expirationTimestamp`` would then expire under the reflectors. The client calls
    ``refresh_api_key_hook`` before every request; the loader re-runs the plugin only
    once the token has expired, so the hook is cheap otherwise.
    """
    if getattr(loader, "exec_plugin_expiry", None) is None:
        return

    async def refresh(config: Any) -> None:
        try:
            await loader.load_from_exec_plugin()
        except Exception as exc:
            # As a connection failure: the reflectors log one line and back off.
            raise ConnectionError(f"refreshing the exec-plugin credential failed: {exc}") from None
        config.api_key["BearerToken"] = loader.token

    configuration.refresh_api_key_hook = refresh


__all__ = [
    "CLUSTER_FILE_HELP",
    "NO_CLUSTER_HELP",
    "Connection",
    "KubeConfigError",
    "choose_source",
    "connect",
]
