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

kubeconfig files are read, merged and checked here, before kubernetes-asyncio sees
them, so that a broken file is one line naming the file and the entry (``kubeconfig
bad.yaml: not valid YAML (line 2)``) instead of a parser trace, and so that several
``KUBECONFIG`` files merge as kubectl merges them, which kubernetes-asyncio does not
(it lets the last file's current-context win). kubernetes-asyncio then gets the one
chosen context as a dict, with its file paths already absolute, and does the
authentication (tokens, client certificates, exec plugins).

The configuration goes into a private ``Configuration`` object, never the library's
process-wide default, so tests (and a second client) cannot interfere.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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

from extender.documents import DocumentError, load_document

NO_CLUSTER_HELP = (
    "no Kubernetes API server configured: not running in a pod with a service account, "
    "no --kubeconfig given, KUBECONFIG is not set and ~/.kube/config does not exist. "
    "Pass --kubeconfig PATH (or set KUBECONFIG) and optionally --context NAME, "
    "or read the cluster from a file with --cluster-file PATH"
)


class KubeConfigError(ValueError):
    """No usable API server configuration; the message says what to pass."""


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
) -> tuple[str, str | None]:
    """Which configuration applies: ("kubeconfig", paths) or ("in-cluster", None).

    Pure apart from checking that files exist. Raises KubeConfigError.
    """
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
        raise KubeConfigError(f"--context {context}: no kubeconfig file to take it from. " + NO_CLUSTER_HELP)
    raise KubeConfigError(NO_CLUSTER_HELP)


# ----- reading, merging and checking kubeconfig files --------------------------------

# The three named lists of a kubeconfig and the key each entry keeps its body under.
_NAMED_LISTS = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))
# File references kubectl resolves against the directory of the file that defines the
# entry (client-go clientcmd GetClusterFileReferences / GetAuthInfoFileReferences),
# each with the inline field that makes the file unnecessary.
_CLUSTER_FILES = (("certificate-authority", "certificate-authority-data"),)
_USER_FILES = (
    ("client-certificate", "client-certificate-data"),
    ("client-key", "client-key-data"),
    ("tokenFile", "token"),
)


@dataclass(frozen=True)
class _Entry:
    """One named cluster, context or user, and the file that defined it."""

    body: dict[str, Any]
    origin: str


@dataclass
class _Merged:
    """Several kubeconfig files merged by kubectl's rules."""

    paths: list[str]
    current_context: str | None = None
    entries: dict[str, dict[str, _Entry]] = field(
        default_factory=lambda: {plural: {} for plural, _ in _NAMED_LISTS}
    )

    @property
    def where(self) -> str:
        return "kubeconfig " + os.pathsep.join(self.paths)


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else type(value).__name__


def _yaml_problem(exc: DocumentError) -> str:
    # kubectl users know this form; the column adds little to a short file.
    if exc.line is None:
        return str(exc)
    return f"not valid YAML (line {exc.line}): {exc.problem}"


def _read_kubeconfig(path: str) -> dict[str, Any]:
    """One kubeconfig file as a mapping. An empty file is an empty config, as for kubectl."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise KubeConfigError(f"kubeconfig {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        document = load_document(text)
    except DocumentError as exc:
        raise KubeConfigError(f"kubeconfig {path}: {_yaml_problem(exc)}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise KubeConfigError(
            f"kubeconfig {path}: not a kubeconfig: expected a mapping with clusters, contexts "
            f"and users, got {_type_name(document)}"
        )
    kind = document.get("kind")
    if kind is not None and kind != "Config":
        # Typically a cluster file (kind List) handed to --kubeconfig by mistake.
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig: kind is {kind!r}, expected 'Config'")
    return document


def _named_entries(path: str, document: dict[str, Any], plural: str, singular: str) -> dict[str, _Entry]:
    items = document.get(plural)
    if items is None:
        return {}
    if not isinstance(items, list):
        raise KubeConfigError(f"kubeconfig {path}: {plural} must be a list, got {_type_name(items)}")
    found: dict[str, _Entry] = {}
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise KubeConfigError(f"kubeconfig {path}: {plural}[{index}] has no name")
        body = item.get(singular)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise KubeConfigError(
                f'kubeconfig {path}: {singular} "{name}": {singular} must be a mapping, got {_type_name(body)}'
            )
        if name in found:
            # client-go's v1 conversion refuses this too ("duplicate name ... in list").
            raise KubeConfigError(f'kubeconfig {path}: {singular} "{name}" is defined twice')
        found[name] = _Entry(body, path)
    return found


def _merge_kubeconfigs(paths: Sequence[str]) -> _Merged:
    """Read and merge kubeconfig files as kubectl does. Raises KubeConfigError.

    client-go's ClientConfigLoadingRules.Load (staging/src/k8s.io/client-go/tools/
    clientcmd/loader.go): a file that does not parse is an error even if nothing from it
    is used; the first file to define a named cluster, context or user wins and later
    definitions of that name are ignored whole; the first file that sets
    current-context wins.
    """
    merged = _Merged(paths=list(dict.fromkeys(paths)))  # loader.go deduplicates KUBECONFIG
    for path in merged.paths:
        document = _read_kubeconfig(path)
        current = document.get("current-context")
        if current is not None and not isinstance(current, str):
            raise KubeConfigError(
                f"kubeconfig {path}: current-context must be a string, got {_type_name(current)}"
            )
        if current and merged.current_context is None:
            merged.current_context = current
        for plural, singular in _NAMED_LISTS:
            defined = merged.entries[plural]
            for name, entry in _named_entries(path, document, plural, singular).items():
                defined.setdefault(name, entry)
    return merged


def _known(names: Mapping[str, Any], what: str) -> str:
    return f"{what}: {', '.join(sorted(names))}" if names else f"no {what} defined"


def _lookup(
    merged: _Merged, context: str | None
) -> tuple[str, _Entry, tuple[str, _Entry], tuple[str, _Entry] | None]:
    """The chosen context, its cluster and its user (if it names one)."""
    contexts = merged.entries["contexts"]
    if context is None:
        context = merged.current_context
        if context is None:
            raise KubeConfigError(
                f"{merged.where}: no current-context is set; pass --context NAME "
                f"({_known(contexts, 'contexts')})"
            )
        if context not in contexts:
            raise KubeConfigError(
                f'{merged.where}: current-context "{context}" is not defined ({_known(contexts, "contexts")})'
            )
    elif context not in contexts:
        raise KubeConfigError(
            f"--context {context}: no such context in {merged.where} ({_known(contexts, 'contexts')})"
        )
    entry = contexts[context]
    cluster_name = entry.body.get("cluster")
    if not isinstance(cluster_name, str) or not cluster_name:
        raise KubeConfigError(f'kubeconfig {entry.origin}: context "{context}" names no cluster')
    clusters = merged.entries["clusters"]
    if cluster_name not in clusters:
        raise KubeConfigError(
            f'{merged.where}: context "{context}" names cluster "{cluster_name}", which is not defined '
            f"({_known(clusters, 'clusters')})"
        )
    user: tuple[str, _Entry] | None = None
    user_name = entry.body.get("user")
    if user_name not in (None, ""):
        users = merged.entries["users"]
        if not isinstance(user_name, str) or user_name not in users:
            raise KubeConfigError(
                f'{merged.where}: context "{context}" names user "{user_name}", which is not defined '
                f"({_known(users, 'users')})"
            )
        user = (user_name, users[user_name])
    return context, entry, (cluster_name, clusters[cluster_name]), user


def _check_readable(path: str, what: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        raise KubeConfigError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise KubeConfigError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None


def _with_local_files(
    body: dict[str, Any], origin: str, references: Sequence[tuple[str, str]], what: str
) -> dict[str, Any]:
    """``body`` with its file references made absolute and checked to be readable.

    Relative paths are relative to the directory of the file that defined the entry
    (client-go ResolveLocalPaths), not to the working directory.
    """
    body = dict(body)
    base = os.path.dirname(os.path.abspath(origin))
    for file_key, data_key in references:
        if body.get(data_key):
            continue  # inline data is used and the file, if named too, is not
        # An empty inline field would make kubernetes-asyncio ignore the file beside it;
        # kubectl uses the file.
        body.pop(data_key, None)
        path = body.get(file_key)
        if path in (None, ""):
            continue
        if not isinstance(path, str):
            raise KubeConfigError(f"{what}: {file_key} must be a path, got {_type_name(path)}")
        path = os.path.join(base, path)
        _check_readable(path, f"{what} {file_key}")
        body[file_key] = path
    return body


def _resolved_exec(user: dict[str, Any], origin: str, what: str) -> dict[str, Any]:
    """kubectl resolves an exec plugin's command against the kubeconfig's directory only
    when it is a path (contains a separator); a bare name is looked up on PATH."""
    plugin = user.get("exec")
    if plugin is None:
        return user
    if not isinstance(plugin, dict):
        raise KubeConfigError(f"{what}: exec must be a mapping, got {_type_name(plugin)}")
    command = plugin.get("command")
    if not isinstance(command, str) or not command:
        raise KubeConfigError(f"{what}: exec has no command")
    if os.sep in command and not os.path.isabs(command):
        plugin = {**plugin, "command": os.path.join(os.path.dirname(os.path.abspath(origin)), command)}
    return {**user, "exec": plugin}


def resolve_kubeconfig(paths: Sequence[str], context: str | None) -> tuple[str, dict[str, Any]]:
    """The context to use and a one-context kubeconfig dict for kubernetes-asyncio.

    Every check kubectl would fail on later (a missing context, cluster, user or server,
    a certificate file that is not there) fails here, as one line naming the file and
    the entry. Raises KubeConfigError.
    """
    merged = _merge_kubeconfigs(paths)
    context, context_entry, (cluster_name, cluster_entry), user = _lookup(merged, context)
    where_cluster = f'kubeconfig {cluster_entry.origin}: cluster "{cluster_name}"'
    server = cluster_entry.body.get("server")
    if not isinstance(server, str) or not server.strip():
        raise KubeConfigError(f"{where_cluster} has no server")
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": context,
        "contexts": [{"name": context, "context": context_entry.body}],
        "clusters": [
            {
                "name": cluster_name,
                "cluster": _with_local_files(
                    cluster_entry.body, cluster_entry.origin, _CLUSTER_FILES, where_cluster
                ),
            }
        ],
    }
    if user is not None:
        user_name, user_entry = user
        where_user = f'kubeconfig {user_entry.origin}: user "{user_name}"'
        body = _with_local_files(user_entry.body, user_entry.origin, _USER_FILES, where_user)
        has_cert = bool(body.get("client-certificate") or body.get("client-certificate-data"))
        has_key = bool(body.get("client-key") or body.get("client-key-data"))
        # client-go's validateAuthInfo: one without the other cannot authenticate.
        if has_cert and not has_key:
            raise KubeConfigError(f"{where_user} has a client-certificate but no client-key")
        if has_key and not has_cert:
            raise KubeConfigError(f"{where_user} has a client-key but no client-certificate")
        config["users"] = [{"name": user_name, "user": _resolved_exec(body, user_entry.origin, where_user)}]
    return context, config


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
) -> Connection:
    """A configured ``ApiClient``; the caller closes it (``serve`` does at shutdown)."""
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    kind, paths = choose_source(kubeconfig=kubeconfig, context=context, environ=environ, home=home)
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
    except KubeConfigError:
        raise
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        # One line: exec-plugin failures carry the plugin's (multi-line) stderr.
        raise KubeConfigError(f"{where}: {' '.join(str(exc).split())}") from None
    return Connection(api=api, source=source, host=str(configuration.host))


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
    "NO_CLUSTER_HELP",
    "Connection",
    "KubeConfigError",
    "choose_source",
    "connect",
    "resolve_kubeconfig",
]
