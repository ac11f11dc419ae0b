"""kubeconfig files: read, merged and checked as kubectl does, before any client sees them.

A broken file is one line naming the file and the entry (``kubeconfig bad.yaml: not
valid YAML (line 2)``) instead of a parser trace, and several ``KUBECONFIG`` files merge
as kubectl merges them (the first file to set a value wins, also ``current-context``),
which kubernetes-asyncio does not do on its own. ``resolve_kubeconfig`` hands back the
one chosen context as a kubeconfig dict with its file paths made absolute;
``extender.kube.connect`` gives that to kubernetes-asyncio.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extender.documents import DocumentError, load_document


class KubeConfigError(ValueError):
    """No usable API server configuration; the message says what to pass."""


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
