"""The fake API server itself; see the package docstring for what it serves and the controls.

Faithfulness notes (what a real kube-apiserver does, and where this one is simpler):

- One global resourceVersion counter for every resource (etcd's revision). Objects are
  never mutated in place: each change stores a new dict, so events and snapshots can
  share references safely.
- A watch registers itself and computes its replay in one synchronous step (no await
  in between), so no event can fall between the replay and the live stream.
- A field-selector watch sees an object that stops matching as DELETED and one that
  starts matching as ADDED, as the watch cache does (storage/cacher: watchCacheEvent
  carries PrevObject for exactly this).
- LIST pages after the first are read from the snapshot taken at the first page, as
  etcd serves continue tokens at the list's revision; once compaction passes that
  revision the token gets 410 Expired.
- Watch bookmarks carry only kind, apiVersion and metadata.resourceVersion, and are
  written only when no event is queued for that watcher, so a bookmark never claims a
  resourceVersion whose events have not been sent yet.
- A request goes through the steps of kube-apiserver's handler chain in its order
  (staging/src/k8s.io/apiserver/pkg/server/config.go ``DefaultBuildHandlerChain``):
  authentication (401), then an injected failure (where priority and fairness would
  answer 429), then authorization (403, ``rbac.py``), then the handler. Paths the fake
  does not serve are 404 before all of that (a real server authorizes them first).
- A write goes through mutating admission (``_mutate``: MutatingAdmissionPolicies,
  ``mutating_policy.py``, then, with ``call_webhooks``, mutating webhooks,
  ``webhooks.py``; the chain run a second time when a plugin asks for it,
  admission/reinvocation.go), then validating admission (ValidatingAdmissionPolicies,
  ``admission_policy.py``; validating webhooks are never called), in the places
  kube-apiserver's handlers and store put them:
  - create (endpoints/handlers/create.go, registry/generic/registry/store.go
    ``create``): system fields wiped, the object defaulted (``defaults.py``: a pod's
    schedulerName), mutating admission (no uid, creationTimestamp nor, for a
    ``generateName`` create, name yet), then uid, creationTimestamp and the generated
    name, then validating admission, then the 409 AlreadyExists;
  - update (PUT, and PATCH as an UPDATE of the patched object; handlers/update.go and
    patch.go, store.go ``Update``): 404 for a missing object and 409 for a uid
    precondition first, then mutating admission of the object as sent, then the 409 of
    a stale resourceVersion, then the status strategy (a status write keeps the old
    object but its status, ``PrepareForUpdate``), then validating admission of the object
    as it will be stored;
  - delete (registry/rest/delete.go ``AdmissionToValidateObjectDeleteFunc``): 404 and
    the 409 of failed preconditions first, then mutating (webhooks only: policies do not
    handle DELETE) and validating admission with the stored object as ``oldObject``.
  Objects are never defaulted on update (a stored object already is).
- Writes of ``pods/eviction`` and ``pods/binding`` are served just enough to be
  authorized and admitted as real ones are (CREATE of that subresource, with the posted
  Eviction or Binding as ``object``): eviction deletes the pod (no disruption budgets),
  binding sets ``spec.nodeName``. DELETE is immediate (no graceful deletion, no
  finalizers) for every resource, pods included.
- A dry run (``dryRun=All``) is authorized and admitted with ``request.dryRun`` true,
  and answered as the write would be, mutations included (a create without a
  resourceVersion, an update with the old one); nothing is stored and no
  resourceVersion is used.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import random
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import orjson
import yaml
from aiohttp import web

from tests.support.apiserver import (
    admission_policy,
    json_patch,
    mutating_policy,
    rbac,
    runtimeclass_plugin,
    webhooks,
)
from tests.support.apiserver.defaults import apply_defaults
from tests.support.apiserver.objects import resource_details, status_object

JsonObj = dict[str, Any]

# Every object the fake creates was created at this instant.
CREATION_TIMESTAMP = "2026-01-01T00:00:00Z"


@dataclass(frozen=True)
class ResourceType:
    """A resource the server serves: ``group`` "" is the core API (``/api/v1``)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = False
    # Top-level lists a strategic merge patch merges item by item, by this key (the
    # Go type's ``patchMergeKey``); every other list is replaced whole.
    merge_keys: tuple[tuple[str, str], ...] = ()
    # Subresources served under ``<collection>/<name>/<subresource>``: "status" (GET,
    # PUT, PATCH: changes the status only), and for pods "eviction" and "binding" (POST).
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    def collection_path(self, namespace: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"


NODES = ResourceType("", "v1", "nodes", "Node", subresources=("status",))
RUNTIME_CLASSES = ResourceType("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass")
PODS = ResourceType("", "v1", "pods", "Pod", namespaced=True, subresources=("status", "eviction", "binding"))
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", namespaced=True)
ENDPOINT_SLICES = ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", namespaced=True)
EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event", namespaced=True)
# staging/src/k8s.io/api/admissionregistration/v1/types.go: ``Webhooks`` of both kinds
# carries ``+patchMergeKey=name``, ``+patchStrategy=merge``, ``+listType=map`` and
# ``+listMapKey=name``: a strategic merge patch changes the named webhook only.
VALIDATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    merge_keys=(("webhooks", "name"),),
)
MUTATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    merge_keys=(("webhooks", "name"),),
)


class RecordedRequest(NamedTuple):
    verb: str  # list, watch, get, patch (or the HTTP method for anything else)
    path: str
    query: dict[str, str]
    # Who sent it: the user of its bearer token (``FakeApiServer.users``), "" for the
    # default token.
    user: str = ""


@dataclass
class _Failure:
    remaining: int
    status: int
    retry_after: float | None
    verbs: frozenset[str] | None
    resource: str | None
    message: str
    only_if: Callable[[RecordedRequest], bool] | None = None


class _HistoryEvent(NamedTuple):
    rv: int
    resource: str
    type: str
    obj: JsonObj
    prev: JsonObj | None


class _Selector(NamedTuple):
    fields: tuple[tuple[str, str, bool], ...]  # (path, value, equal)
    labels: tuple[tuple[str, str, bool], ...]

    def matches(self, obj: JsonObj | None) -> bool:
        if obj is None:
            return False
        for path, value, equal in self.fields:
            if (_field_value(obj, path) == value) != equal:
                return False
        labels = obj.get("metadata", {}).get("labels") or {}
        return all((labels.get(key) == value) == equal for key, value, equal in self.labels)


def _field_value(obj: JsonObj, path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        current = current.get(part) if isinstance(current, dict) else None
    return "" if current is None else str(current)


_SUPPORTED_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")


def _parse_terms(text: str, *, fields: bool) -> tuple[tuple[str, str, bool], ...]:
    terms = []
    for raw in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in raw:
            key, value = raw.split("!=", 1)
            equal = False
        elif "==" in raw:
            key, value = raw.split("==", 1)
            equal = True
        elif "=" in raw:
            key, value = raw.split("=", 1)
            equal = True
        else:
            raise ValueError(f"unsupported selector term {raw!r}")
        if fields and key not in _SUPPORTED_FIELDS:
            raise ValueError(f'field label not supported: "{key}"')
        terms.append((key, value, equal))
    return tuple(terms)


class _Drop:
    """Queue sentinel: end the stream without a clean chunked terminator."""


class _End:
    """Queue sentinel: end the stream cleanly (as a server-side timeout does)."""


class _Bookmark(NamedTuple):
    rv: int


_DROP = _Drop()
_END = _End()


@dataclass(eq=False)
class _Watcher:
    resource: ResourceType
    namespace: str | None
    selector: _Selector
    bookmarks: bool
    queue: asyncio.Queue[bytes | _Bookmark | _Drop | _End] = field(default_factory=asyncio.Queue)
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    transport: asyncio.Transport | None = None
    dropped: bool = False

    def wants(self, obj: JsonObj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.selector.matches(obj)

    def translate(self, event_type: str, obj: JsonObj, prev: JsonObj | None) -> str | None:
        """The event this watcher sees for a change, given its filters (None: nothing)."""
        now, before = self.wants(obj), self.wants(prev)
        if event_type == "DELETED":
            return "DELETED" if before or now else None
        if now and before:
            return "MODIFIED"
        if now:
            return "ADDED"
        if before:
            return "DELETED"
        return None


class _Snapshot(NamedTuple):
    rv: int
    items: list[JsonObj]


def _event_line(event_type: str, obj: JsonObj) -> bytes:
    return orjson.dumps({"type": event_type, "object": obj}) + b"\n"


def _strategic_merge_patch(target: Any, patch: Any, merge_keys: Mapping[str, str]) -> Any:
    """A strategic merge patch (apimachinery/pkg/util/strategicpatch/patch.go), as far as
    the tests need it: maps merge as in a JSON merge patch; a top-level list named in
    ``merge_keys`` merges item by item on that key (an item whose key is not present is
    appended, each matched item is merged recursively); every other list is replaced.
    Directives (``$patch``, ``$retainKeys``...) are not supported."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _merge_patch(target, patch)
    result = dict(target)
    for key, value in patch.items():
        merge_key = merge_keys.get(key)
        if merge_key is None or not isinstance(value, list) or not isinstance(result.get(key), list):
            if value is None:
                result.pop(key, None)
            else:
                result[key] = _merge_patch(result.get(key), value)
            continue
        items = [copy.deepcopy(item) for item in result[key]]
        for item in value:
            if not isinstance(item, dict) or merge_key not in item:
                raise _BadRequest(f"map: {item!r} does not contain declared merge key: {merge_key}")
            index = next(
                (
                    i
                    for i, old in enumerate(items)
                    if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
                ),
                None,
            )
            if index is None:
                items.append(copy.deepcopy(item))
            else:
                items[index] = _merge_patch(items[index], item)
        result[key] = items
    return result


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


class FakeApiServer:
    """A Kubernetes API server in this process. See the package docstring."""

    def __init__(
        self,
        *,
        resources: Iterable[ResourceType] = (
            NODES,
            RUNTIME_CLASSES,
            PODS,
            LEASES,
            SECRETS,
            VALIDATING_WEBHOOKS,
            MUTATING_WEBHOOKS,
            EVENTS,
            CONFIGMAPS,
            ENDPOINT_SLICES,
        ),
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = "fake-token",
        gone_as: Literal["event", "http"] = "event",
        bookmark_interval: float | None = None,
        history_limit: int | None = None,
        default_watch_timeout: float = 1800.0,
        call_webhooks: bool = False,
        runtimeclass_plugin: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.gone_as = gone_as
        self.bookmark_interval = bookmark_interval
        self.history_limit = history_limit
        self.default_watch_timeout = default_watch_timeout
        self._resources: dict[tuple[str, str, str], ResourceType] = {}
        self._objects: dict[str, dict[tuple[str, str], JsonObj]] = {}
        for resource in resources:
            self.register(resource)
        self._rv = 0
        self._compacted_rv = 0
        self._history: list[_HistoryEvent] = []
        self._snapshots: dict[str, _Snapshot] = {}
        self._watchers: set[_Watcher] = set()
        self._failures: list[_Failure] = []
        self._stalled = False
        self._stalled_resources: set[str] = set()
        self._runner: web.AppRunner | None = None
        self.requests: list[RecordedRequest] = []
        # Each request with the HTTP status it was answered (a watch once it ends).
        self.answers: list[tuple[RecordedRequest, int]] = []
        # More bearer tokens, each authenticating a user of its own (``RecordedRequest.user``).
        self.users: dict[str, str] = {}
        # Groups of those users beyond the ones every user of their kind has (see
        # ``rbac.user_info``), by user name.
        self.groups: dict[str, tuple[str, ...]] = {}
        # RBAC authorization: None (the default) allows every request; ``apply`` of any
        # Role, ClusterRole or binding turns it on.
        self.rbac: rbac.Rbac | None = None
        # Validating and mutating admission policies and their bindings, run on every write.
        self.admission_policies = admission_policy.Policies()
        # Call the webhooks of stored MutatingWebhookConfigurations on writes (webhooks.py).
        self.call_webhooks = call_webhooks
        # Run the RuntimeClass admission plugin on pod creates, as kube-apiserver does
        # unless --disable-admission-plugins names it (runtimeclass_plugin.py).
        self.runtimeclass_plugin = runtimeclass_plugin
        # Where a webhook's ``clientConfig.service`` is reached: (namespace, name, port)
        # -> (host, port) to dial; TLS is verified for ``<name>.<namespace>.svc``.
        self.webhook_addresses: dict[tuple[str, str, int], tuple[str, int]] = {}

    # ----- setup -------------------------------------------------------------------

    def register(self, resource: ResourceType) -> None:
        """Serve another resource (any group/version/plural, namespaced or not)."""
        self._resources[(resource.group, resource.version, resource.plural)] = resource
        self._objects.setdefault(resource.key, {})

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        return self._rv

    async def start(self) -> None:
        """Listen (on the same port as before after a ``stop``)."""
        if self._runner is not None:
            return
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        if self.port == 0:
            self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        """Stop listening and cut every connection (watches end mid-stream)."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.drop_watches()
        await runner.cleanup()

    async def restart(self, *, fresh_history: bool = False) -> None:
        """Stop, then start on the same port; ``fresh_history`` as in ``reset_history``."""
        await self.stop()
        if fresh_history:
            self.reset_history()
        await self.start()

    def reset_history(self, start_rv: int = 0) -> None:
        """Forget all history and re-stamp every object from ``start_rv`` upwards.

        Models an API server whose storage was restored or replaced: the same objects
        (or whatever the test puts there next), at resourceVersions lower than clients
        have seen.
        """
        self._rv = start_rv
        self._history.clear()
        self._snapshots.clear()
        self._compacted_rv = start_rv
        for objects in self._objects.values():
            for key in sorted(objects):
                obj = copy.deepcopy(objects[key])
                self._stamp(obj)
                objects[key] = obj

    def token_for(self, user_name: str, *, groups: Iterable[str] = ()) -> str:
        """A bearer token that authenticates as ``user_name``: a ServiceAccount's user
        name (``system:serviceaccount:<ns>:<name>``) has that ServiceAccount's groups,
        any user ``groups`` too, and every user ``system:authenticated``."""
        token = f"token-of-{user_name}"
        self.users[token] = user_name
        self.groups[user_name] = tuple(groups)
        return token

    def user_info(self, user_name: str) -> rbac.UserInfo:
        """Who a request of ``user_name`` (``RecordedRequest.user``) is: "" is the
        default token's user, an administrator (``rbac.ADMIN``, in ``system:masters``)."""
        if not user_name:
            return rbac.ADMIN
        return rbac.user_info(user_name, self.groups.get(user_name, ()))

    def write_kubeconfig(
        self, path: str | Path, *, context: str = "fake", user_name: str = "", groups: Iterable[str] = ()
    ) -> Path:
        """An ordinary kubeconfig file pointing at this server (with its token; with
        ``user_name``, a token of that user's own, so its requests can be told apart and
        authorized as that user, with ``groups`` as in ``token_for``)."""
        path = Path(path)
        token = self.token
        if user_name:
            token = self.token_for(user_name, groups=groups)
        user: JsonObj = {"token": token} if token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    # ----- authorization and admission ------------------------------------------------

    def apply(self, manifests: Iterable[Mapping[str, Any] | None]) -> list[JsonObj]:
        """Load manifests as ``kubectl apply`` would, e.g. ``yaml.safe_load_all`` of a file.

        Roles, ClusterRoles, RoleBindings and ClusterRoleBindings (rbac.authorization.k8s.io/v1)
        go to RBAC, which from then on authorizes every request (``rbac.py``); Validating-
        and MutatingAdmissionPolicies and their bindings (admissionregistration.k8s.io/v1)
        go to admission, which runs them on every write (``admission_policy.py``,
        ``mutating_policy.py``); each replaces one of its kind and name loaded before. A
        CustomResourceDefinition (apiextensions.k8s.io/v1) registers its kind at its
        storage version, served from then on as kube-apiserver serves an established
        CRD's kind (no schema, no pruning). A manifest of a registered resource's kind is
        stored (``put``); any other (a ServiceAccount, say) is returned, with nothing done. All or nothing: a manifest the
        fake cannot load (a policy expression the ``cel`` package cannot parse, an
        ApplyConfiguration mutation, a paramKind that is not a registered resource, a
        ClusterRole aggregationRule) raises ValueError naming it, and nothing is loaded.
        """
        docs = [dict(doc) for doc in manifests if doc]
        staged_rbac = self.rbac.copy() if self.rbac is not None else rbac.Rbac()
        staged_policies = self.admission_policies.copy()
        to_store: list[tuple[ResourceType, JsonObj]] = []
        ignored: list[JsonObj] = []
        loads_rbac = False
        defined = [_defined(doc) for doc in docs if (doc.get("apiVersion"), doc.get("kind")) == _CRD]
        for doc in docs:
            api_version, kind = doc.get("apiVersion"), doc.get("kind")
            if (api_version, kind) == _CRD:
                continue
            if api_version == rbac.RBAC_API_VERSION and kind in rbac.RBAC_KINDS:
                staged_rbac.add(doc)
                loads_rbac = True
            elif api_version == admission_policy.API_VERSION and kind in admission_policy.POLICY_KINDS:
                staged_policies.add(doc)
            else:
                rtype = next(
                    (
                        r
                        for r in [*self._resources.values(), *defined]
                        if (r.api_version, r.kind) == (api_version, kind)
                    ),
                    None,
                )
                if rtype is None:
                    ignored.append(doc)
                else:
                    to_store.append((rtype, doc))
        served = {(r.api_version, r.kind) for r in [*self._resources.values(), *defined]}
        unserved = sorted(staged_policies.param_kinds() - served)
        if unserved:
            api_version, kind = unserved[0]
            raise admission_policy.PolicyError(
                f"paramKind {api_version} {kind} is not a resource the fake API server serves: register it"
            )
        if loads_rbac:
            self.rbac = staged_rbac
        self.admission_policies = staged_policies
        for rtype in defined:
            self.register(rtype)
        for rtype, doc in to_store:
            self.put(rtype, doc)
        return ignored

    # ----- object controls ------------------------------------------------------------

    def _resource(self, resource: ResourceType | str) -> ResourceType:
        if isinstance(resource, ResourceType):
            # The registered instance: watchers are matched to it by identity.
            return self._resources.get((resource.group, resource.version, resource.plural), resource)
        for known in self._resources.values():
            if resource in (known.plural, known.key):
                return known
        raise KeyError(f"resource {resource!r} is not registered")

    def _key(self, resource: ResourceType, name: str, namespace: str | None) -> tuple[str, str]:
        if resource.namespaced:
            return (namespace or "default", name)
        return ("", name)

    def _stamp(self, obj: JsonObj) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def get(self, resource: ResourceType | str, name: str, *, namespace: str | None = None) -> JsonObj | None:
        rtype = self._resource(resource)
        obj = self._objects[rtype.key].get(self._key(rtype, name, namespace))
        return copy.deepcopy(obj) if obj is not None else None

    def changes(self, resource: ResourceType | str) -> list[tuple[str, JsonObj, JsonObj | None]]:
        """Every change of ``resource`` kept in history: (event type, object, previous)."""
        rtype = self._resource(resource)
        return [(e.type, e.obj, e.prev) for e in self._history if e.resource == rtype.key]

    def objects(self, resource: ResourceType | str) -> list[JsonObj]:
        rtype = self._resource(resource)
        return [copy.deepcopy(o) for _, o in sorted(self._objects[rtype.key].items())]

    def add(self, resource: ResourceType | str, obj: Mapping[str, Any]) -> JsonObj:
        """Create an object (KeyError if it exists); emits ADDED. Returns it as stored."""
        rtype = self._resource(resource)
        new = self._prepared_for_create(rtype, obj)
        meta = new["metadata"]
        key = self._key(rtype, meta["name"], meta.get("namespace"))
        if key in self._objects[rtype.key]:
            raise KeyError(f"{rtype.plural} {meta['name']!r} already exists")
        self._stamp(new)
        self._objects[rtype.key][key] = new
        self._emit(rtype, "ADDED", new, None)
        return copy.deepcopy(new)

    @staticmethod
    def _prepared_for_create(rtype: ResourceType, obj: Mapping[str, Any]) -> JsonObj:
        """A copy of ``obj`` as it will be stored, but for its resourceVersion."""
        new = copy.deepcopy(dict(obj))
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("metadata.name is required")
        if rtype.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        new["kind"], new["apiVersion"] = rtype.kind, rtype.api_version
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", CREATION_TIMESTAMP)
        return new

    def modify(
        self,
        resource: ResourceType | str,
        name: str,
        change: Callable[[JsonObj], Any] | Mapping[str, Any],
        *,
        namespace: str | None = None,
    ) -> JsonObj:
        """Change an object in place (a callable) or by merge patch (a mapping); emits MODIFIED."""
        rtype = self._resource(resource)
        key = self._key(rtype, name, namespace)
        old = self._objects[rtype.key].get(key)
        if old is None:
            raise KeyError(f"{rtype.plural} {name!r} not found")
        if callable(change):
            new = copy.deepcopy(old)
            change(new)
        else:
            new = _merge_patch(old, dict(change))
        return self._replace(rtype, key, old, new)

    @staticmethod
    def _as_replacement(rtype: ResourceType, old: JsonObj, new: Mapping[str, Any]) -> JsonObj:
        """A copy of ``new`` as it will replace ``old``, but for its resourceVersion."""
        replacement = copy.deepcopy(dict(new))
        meta = replacement.setdefault("metadata", {})
        # Identity fields are not the caller's to change.
        for field_name in ("name", "namespace", "uid", "creationTimestamp"):
            if field_name in old["metadata"]:
                meta[field_name] = old["metadata"][field_name]
        replacement["kind"], replacement["apiVersion"] = rtype.kind, rtype.api_version
        return replacement

    def _replace(
        self, rtype: ResourceType, key: tuple[str, str], old: JsonObj, new: Mapping[str, Any]
    ) -> JsonObj:
        new = self._as_replacement(rtype, old, new)
        self._stamp(new)
        self._objects[rtype.key][key] = new
        self._emit(rtype, "MODIFIED", new, old)
        return copy.deepcopy(new)

    def put(self, resource: ResourceType | str, obj: Mapping[str, Any]) -> JsonObj:
        """Create or replace an object (ADDED or MODIFIED)."""
        rtype = self._resource(resource)
        meta = obj.get("metadata") or {}
        key = self._key(rtype, meta.get("name", ""), meta.get("namespace"))
        old = self._objects[rtype.key].get(key)
        if old is None:
            return self.add(rtype, obj)
        return self._replace(rtype, key, old, dict(obj))

    def delete(self, resource: ResourceType | str, name: str, *, namespace: str | None = None) -> JsonObj:
        """Delete an object (KeyError if absent); emits DELETED with the final state."""
        rtype = self._resource(resource)
        key = self._key(rtype, name, namespace)
        old = self._objects[rtype.key].pop(key, None)
        if old is None:
            raise KeyError(f"{rtype.plural} {name!r} not found")
        final = copy.deepcopy(old)
        self._stamp(final)  # a deletion is a revision too; the event carries it
        self._emit(rtype, "DELETED", final, old)
        return final

    def _emit(self, rtype: ResourceType, event_type: str, obj: JsonObj, prev: JsonObj | None) -> None:
        self._history.append(_HistoryEvent(self._rv, rtype.key, event_type, obj, prev))
        if self.history_limit is not None and len(self._history) > self.history_limit:
            dropped = self._history[: len(self._history) - self.history_limit]
            del self._history[: len(dropped)]
            self._compacted_rv = dropped[-1].rv
        for watcher in self._watchers:
            if watcher.resource is rtype:
                seen = watcher.translate(event_type, obj, prev)
                if seen is not None:
                    watcher.queue.put_nowait(_event_line(seen, obj))

    # ----- fault controls -------------------------------------------------------------

    def compact(self, rv: int | None = None) -> None:
        """Forget history up to ``rv`` (default: all of it); older resourceVersions get 410."""
        self._compacted_rv = self._rv if rv is None else rv
        self._history = [e for e in self._history if e.rv > self._compacted_rv]

    def drop_watches(self) -> int:
        """Cut every open watch connection abruptly; returns how many were cut."""
        watchers = list(self._watchers)
        for watcher in watchers:
            watcher.dropped = True
            if watcher.transport is not None:
                watcher.transport.abort()
            watcher.queue.put_nowait(_DROP)
            watcher.flowing.set()
        return len(watchers)

    def end_watches(self) -> int:
        """End every open watch cleanly, without a bookmark (after queued events)."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(_END)
        return len(self._watchers)

    def stall_watches(self, resource: ResourceType | str | None = None) -> None:
        """Open watches (and new ones) stop sending anything, connections stay open.

        With ``resource``, only the watches of that resource stall.
        """
        if resource is None:
            self._stalled = True
        else:
            self._stalled_resources.add(self._resource(resource).key)
        for watcher in self._watchers:
            if self._is_stalled(watcher.resource):
                watcher.flowing.clear()

    def resume_watches(self) -> None:
        self._stalled = False
        self._stalled_resources.clear()
        for watcher in self._watchers:
            watcher.flowing.set()

    def _is_stalled(self, rtype: ResourceType) -> bool:
        return self._stalled or rtype.key in self._stalled_resources

    def send_bookmarks(self) -> None:
        """Queue a BOOKMARK at the current resourceVersion on every watch that allows them."""
        for watcher in self._watchers:
            if watcher.bookmarks:
                watcher.queue.put_nowait(_Bookmark(self._rv))

    def fail_next(
        self,
        count: int = 1,
        status: int = 500,
        *,
        retry_after: float | None = None,
        verbs: Iterable[str] | None = None,
        resource: ResourceType | str | None = None,
        message: str = "injected failure",
        only_if: Callable[[RecordedRequest], bool] | None = None,
    ) -> None:
        """The next ``count`` matching requests get ``status`` with a Status body.

        ``verbs`` limits it to some of list/watch/get/patch; ``resource`` to one
        resource; ``only_if`` to requests it accepts (e.g. ``lambda r: "continue" in
        r.query``); ``retry_after`` adds a Retry-After header (seconds, as for 429).
        """
        self._failures.append(
            _Failure(
                count,
                status,
                retry_after,
                frozenset(verbs) if verbs is not None else None,
                self._resource(resource).key if resource is not None else None,
                message,
                only_if,
            )
        )

    def clear_failures(self) -> None:
        """Forget every failure ``fail_next`` still holds."""
        self._failures.clear()

    def watcher_count(self, resource: ResourceType | str | None = None) -> int:
        rtype = self._resource(resource) if resource is not None else None
        return sum(1 for w in self._watchers if rtype is None or w.resource is rtype)

    async def wait_for_watchers(
        self, resource: ResourceType | str | None = None, count: int = 1, *, timeout: float = 10.0
    ) -> None:
        """Wait (bounded) until at least ``count`` watches of ``resource`` are open."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.watcher_count(resource) < count:
            if loop.time() > deadline:
                raise TimeoutError(f"fewer than {count} watch(es) of {resource} connected")
            await asyncio.sleep(0.005)

    # ----- HTTP ---------------------------------------------------------------------

    def _route(self, path: str) -> _Route | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not 1 <= len(rest) <= 3:
            return None
        rtype = self._resources.get((group, version, rest[0]))
        if rtype is None or (namespace is not None and not rtype.namespaced):
            return None
        subresource = rest[2] if len(rest) == 3 else ""
        if subresource and subresource not in rtype.subresources:
            return None
        return _Route(rtype, namespace, rest[1] if len(rest) >= 2 else None, subresource)

    def _loaded_policy(self, request: web.Request) -> web.Response | None:
        """A GET of a ValidatingAdmissionPolicy by name: the one ``apply`` loaded, or 404
        (not authorized: the fake serves policies for reading alone). None for any other
        request."""
        prefix = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
        if request.method != "GET" or not request.path.startswith(prefix):
            return None
        name = request.path.removeprefix(prefix)
        policy = self.admission_policies.policies.get(name)
        if policy is None:
            return _status_response(
                status_object(
                    404,
                    f'validatingadmissionpolicies.admissionregistration.k8s.io "{name}" not found',
                    reason="NotFound",
                )
            )
        return web.json_response(policy)

    def _injected_failure(self, request: RecordedRequest, rtype: ResourceType) -> web.Response | None:
        verb = request.verb
        for failure in self._failures:
            if failure.remaining <= 0:
                continue
            if failure.verbs is not None and verb not in failure.verbs:
                continue
            if failure.resource is not None and failure.resource != rtype.key:
                continue
            if failure.only_if is not None and not failure.only_if(request):
                continue
            failure.remaining -= 1
            headers = {}
            if failure.retry_after is not None:
                # Retry-After is whole seconds (RFC 9110 delay-seconds).
                headers["Retry-After"] = str(max(1, round(failure.retry_after)))
            details = {"retryAfterSeconds": int(failure.retry_after)} if failure.retry_after else None
            return _status_response(status_object(failure.status, failure.message, details=details), headers)
        return None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        # _handle records the request before its first await: it is at this index.
        index = len(self.requests)
        response = await self._serve(request)
        self.answers.append((self.requests[index], response.status))
        return response

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        route = self._route(request.path)
        is_watch = query.get("watch") in ("1", "true")
        loaded = self._loaded_policy(request)
        if loaded is not None:
            self.requests.append(RecordedRequest("get", request.path, query))
            return loaded
        if route is None:
            self.requests.append(RecordedRequest(request.method, request.path, query))
            return _status_response(status_object(404, "the server could not find the requested resource"))
        rtype, namespace, name, subresource = route
        if request.method == "GET":
            verb = "get" if name else ("watch" if is_watch else "list")
        elif request.method == "PATCH" and name:
            verb = "patch"
        else:
            verb = request.method.lower()
        authorization = request.headers.get("Authorization", "")
        bearer = authorization.removeprefix("Bearer ")
        user_name = self.users.get(bearer, "")
        self.requests.append(RecordedRequest(verb, request.path, query, user_name))
        if (
            self.token is not None
            and authorization != f"Bearer {self.token}"
            and not (authorization.startswith("Bearer ") and bearer in self.users)
        ):
            return _status_response(status_object(401, "Unauthorized"))
        failure = self._injected_failure(self.requests[-1], rtype)
        if failure is not None:
            return failure
        # Authorization: the one place every request is checked (rbac.py).
        user = self.user_info(user_name)
        if self.rbac is not None:
            # A list or watch is authorized with the name its fieldSelector pins.
            authorized_name = name or ""
            if verb in ("list", "watch"):
                authorized_name = rbac.name_from_field_selector(query.get("fieldSelector", ""))
            attributes = rbac.Attributes(
                user=user,
                verb=rbac.request_verb(request.method, name or "", watch=is_watch),
                api_group=rtype.group,
                api_version=rtype.version,
                resource=rtype.plural,
                subresource=subresource,
                namespace=namespace or "",
                name=authorized_name,
            )
            decision = rbac.authorize(self.rbac, attributes)
            if not decision.allowed:
                return _status_response(rbac.forbidden_status(attributes, decision.reason))
        write = _Write(
            user,
            rtype,
            namespace,
            subresource,
            dry_run=query.get("dryRun") == "All",
            options=_operation_options(request.method, query),
        )
        try:
            if request.method in ("POST", "PUT", "PATCH", "DELETE") and query.get("dryRun", "All") != "All":
                return self._unsupported_dry_run(request.method, query["dryRun"])
            response = await self._handle(request, verb, write, name, query)
        except _BadRequest as exc:
            return _status_response(status_object(400, str(exc)))
        for warning in write.warnings:
            # apiserver/pkg/warning: "299 - <quoted text>".
            response.headers.add("Warning", "299 - " + orjson.dumps(warning).decode())
        return response

    async def _handle(
        self, request: web.Request, verb: str, write: _Write, name: str | None, query: Mapping[str, str]
    ) -> web.StreamResponse:
        rtype, namespace, subresource = write.rtype, write.namespace, write.subresource
        if verb == "list" and not subresource:
            return self._list(rtype, namespace, query)
        if verb == "watch" and not subresource:
            return await self._watch(request, rtype, namespace, query)
        if name is not None:
            if verb == "get" and subresource in ("", "status"):
                return self._get(rtype, namespace, name)
            if verb == "patch" and subresource in ("", "status"):
                return await self._patch(request, write, name)
            if verb == "put" and subresource in ("", "status"):
                return await self._update(request, write, name)
            if verb == "delete" and not subresource:
                return await self._delete(request, write, name)
            if verb == "post" and subresource in ("eviction", "binding"):
                return await self._create_pod_subresource(request, write, name)
        elif verb == "post":
            return await self._create(request, write)
        return _status_response(
            status_object(405, f"the server does not allow this method on the requested resource ({verb})")
        )

    @staticmethod
    def _unsupported_dry_run(method: str, value: str) -> web.Response:
        # The options' validation (apimachinery/pkg/apis/meta/v1/validation: ValidateDryRun).
        options = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions"}.get(
            method, "DeleteOptions"
        )
        return _status_response(
            status_object(
                422,
                f'{options}.meta.k8s.io "" is invalid: dryRun: Unsupported value: "{value}": supported values: "All"',
                reason="Invalid",
            )
        )

    def _selector(self, query: Mapping[str, str]) -> _Selector:
        try:
            return _Selector(
                _parse_terms(query.get("fieldSelector", ""), fields=True),
                _parse_terms(query.get("labelSelector", ""), fields=False),
            )
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None

    def _current(self, rtype: ResourceType, namespace: str | None, selector: _Selector) -> list[JsonObj]:
        return [
            obj
            for (ns, _), obj in sorted(self._objects[rtype.key].items())
            if (namespace is None or ns == namespace) and selector.matches(obj)
        ]

    def _requested_rv(self, query: Mapping[str, str]) -> int | None:
        text = query.get("resourceVersion", "")
        if text in ("", "0"):
            return None
        try:
            return int(text)
        except ValueError:
            raise _BadRequest(f"invalid resource version: {text!r}") from None

    def _too_large(self, rv: int) -> web.Response:
        # What the watch cache answers when the requested revision never arrives
        # (storage/cacher: NewTooLargeResourceVersionError).
        return _status_response(
            status_object(
                504,
                f"Too large resource version: {rv}, current: {self._rv}",
                reason="Timeout",
                details={
                    "causes": [
                        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                    ],
                    "retryAfterSeconds": 1,
                },
            )
        )

    def _list(self, rtype: ResourceType, namespace: str | None, query: Mapping[str, str]) -> web.Response:
        token = query.get("continue")
        if token:
            try:
                decoded = orjson.loads(base64.urlsafe_b64decode(token.encode()))
                snapshot_id, offset = str(decoded["id"]), int(decoded["start"])
            except (ValueError, KeyError, TypeError):
                raise _BadRequest("continue key is not valid") from None
            snapshot = self._snapshots.get(snapshot_id)
            if snapshot is None or snapshot.rv < self._compacted_rv:
                return _status_response(
                    status_object(
                        410,
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter.",
                    )
                )
        else:
            requested = self._requested_rv(query)
            if requested is not None and requested > self._rv:
                return self._too_large(requested)
            if (
                requested is not None
                and query.get("resourceVersionMatch") == "Exact"
                and requested < self._compacted_rv
            ):
                return _status_response(
                    status_object(410, "The resourceVersion for the provided list is too old.")
                )
            items = [_without_type(obj) for obj in self._current(rtype, namespace, self._selector(query))]
            snapshot_id, offset = uuid.uuid4().hex, 0
            snapshot = _Snapshot(self._rv, items)
        try:
            limit = int(query.get("limit", "0") or 0)
        except ValueError:
            raise _BadRequest("limit must be an integer") from None
        end = offset + limit if limit > 0 else len(snapshot.items)
        page = snapshot.items[offset:end]
        metadata: JsonObj = {"resourceVersion": str(snapshot.rv)}
        if end < len(snapshot.items):
            self._snapshots[snapshot_id] = snapshot
            while len(self._snapshots) > 64:
                del self._snapshots[next(iter(self._snapshots))]
            metadata["continue"] = base64.urlsafe_b64encode(
                orjson.dumps({"id": snapshot_id, "start": end, "rv": snapshot.rv})
            ).decode()
            metadata["remainingItemCount"] = len(snapshot.items) - end
        body = {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": metadata,
            "items": page,
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    def _get(self, rtype: ResourceType, namespace: str | None, name: str) -> web.Response:
        obj = self._objects[rtype.key].get(self._key(rtype, name, namespace))
        if obj is None:
            return _not_found(rtype, name)
        return web.Response(body=orjson.dumps(obj), content_type="application/json")

    async def _body_object(self, request: web.Request, rtype: ResourceType) -> JsonObj:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise _BadRequest(f"error decoding body: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise _BadRequest(f"the body is not a {rtype.kind} object")
        return body

    def _admit(
        self,
        write: _Write,
        operation: str,
        name: str,
        new: JsonObj | None,
        old: JsonObj | None,
        kind: tuple[str, str, str] | None = None,
    ) -> web.Response | None:
        """Validating admission of a write (the RuntimeClass plugin's validating half, then
        admission_policy.py): the denial to answer with, or None. Every write passes
        here once its object is known and before anything is stored."""
        if self._plugin_applies(write, operation) and new is not None:
            runtime_class, refusal = self._runtime_class_of(new)
            refusal = refusal or runtimeclass_plugin.validate(new, runtime_class)
            if refusal:
                return _status_response(_forbidden(new, refusal))
        if not self.admission_policies:
            return None
        try:
            verdict = admission_policy.admit(
                self.admission_policies,
                self._attributes(write, operation, name, new, old, kind),
                params=self._params,
            )
        except admission_policy.PolicyError as exc:
            # Not a decision a real server would make: say so, loudly.
            return _status_response(status_object(500, str(exc)))
        write.warnings.extend(verdict.warnings)
        return _status_response(verdict.denial) if verdict.denial is not None else None

    def _attributes(
        self,
        write: _Write,
        operation: str,
        name: str,
        new: JsonObj | None,
        old: JsonObj | None,
        kind: tuple[str, str, str] | None,
    ) -> admission_policy.AdmissionAttributes:
        """What admission sees of ``write`` (copies: a policy or webhook never changes
        the objects the server holds)."""
        rtype = write.rtype
        return admission_policy.AdmissionAttributes(
            operation=operation,
            user=write.user,
            group=rtype.group,
            version=rtype.version,
            resource=rtype.plural,
            kind=kind or (rtype.group, rtype.version, rtype.kind),
            subresource=write.subresource,
            namespace=write.namespace or "",
            name=name,
            object=copy.deepcopy(new),
            old_object=copy.deepcopy(old),
            dry_run=write.dry_run,
            namespace_object=self._namespace_object(write.namespace),
        )

    def _plugin_applies(self, write: _Write, operation: str) -> bool:
        """The RuntimeClass plugin handles pod creates alone (``shouldIgnore``)."""
        return self.runtimeclass_plugin and write.rtype.key == PODS.key and operation == "CREATE" and not write.subresource

    def _runtime_class_of(self, pod: JsonObj) -> tuple[JsonObj | None, str]:
        """The stored class the pod names (None: it names none), or the plugin's refusal
        of a class that does not exist."""
        name = (pod.get("spec") or {}).get("runtimeClassName")
        if name is None:
            return None, ""
        stored = self._objects[RUNTIME_CLASSES.key].get(("", name))
        if stored is None:
            return None, runtimeclass_plugin.NOT_FOUND.format(name=name)
        return stored, ""

    def _namespace_object(self, namespace: str | None) -> JsonObj | None:
        """The CEL ``namespaceObject``: the stored Namespace if ``namespaces`` is a
        registered resource holding it, else one as a new namespace is (with the
        ``kubernetes.io/metadata.name`` label every namespace gets); without kind and
        apiVersion, as cel.go ``CreateNamespaceObject`` builds it."""
        if not namespace:
            return None
        rtype = self._resources.get(("", "v1", "namespaces"))
        stored = self._objects[rtype.key].get(("", namespace)) if rtype is not None else None
        if stored is not None:
            return {k: copy.deepcopy(v) for k, v in stored.items() if k not in ("kind", "apiVersion")}
        return {
            "metadata": {"name": namespace, "labels": {"kubernetes.io/metadata.name": namespace}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    def _params(self, api_version: str, kind: str) -> admission_policy.ParamKind | None:
        """The policies' ParamSource: every stored object of a registered kind, in
        namespace/name order."""
        for rtype in self._resources.values():
            if (rtype.api_version, rtype.kind) == (api_version, kind):
                return admission_policy.ParamKind(rtype.namespaced, self.objects(rtype))
        return None

    def _resolve_webhook(self, namespace: str, name: str, port: int) -> tuple[str, int] | None:
        return self.webhook_addresses.get((namespace, name, port))

    async def _mutate(
        self,
        write: _Write,
        operation: str,
        name: str,
        new: JsonObj | None,
        old: JsonObj | None,
        kind: tuple[str, str, str] | None = None,
    ) -> JsonObj | web.Response | None:
        """Mutating admission of a write (admission/reinvocation.go over the chain of
        MutatingAdmissionPolicy, then MutatingAdmissionWebhook when ``call_webhooks``):
        the object as mutated, or the answer refusing the write. The chain runs a second
        time when a plugin asks for it (mutating_policy.py says when), never a third."""
        run_policies = bool(self.admission_policies.mutating_policies) and operation in ("CREATE", "UPDATE")
        hooks: list[webhooks.Webhook] = []
        if self.call_webhooks and MUTATING_WEBHOOKS.key in self._objects:
            hooks = webhooks.webhooks_in_order(self.objects(MUTATING_WEBHOOKS))
        plugin = self._plugin_applies(write, operation)
        if not run_policies and not hooks and not plugin:
            return new
        attributes = self._attributes(write, operation, name, new, old, kind)
        reinvocation = mutating_policy.ReinvocationContext()
        try:
            while True:
                # The in-tree plugins first, on every run of the chain.
                if plugin and attributes.object is not None:
                    runtime_class, refusal = self._runtime_class_of(attributes.object)
                    admitted, refusal = (
                        runtimeclass_plugin.admit(attributes.object, runtime_class) if not refusal else (None, refusal)
                    )
                    if admitted is None:
                        return _status_response(_forbidden(attributes.object, refusal))
                    attributes = replace(attributes, object=admitted)
                if run_policies:
                    verdict = mutating_policy.mutate(
                        self.admission_policies, attributes, params=self._params, reinvocation=reinvocation
                    )
                    if verdict.denial is not None:
                        return _status_response(verdict.denial)
                    attributes = replace(attributes, object=verdict.object)
                if hooks:
                    answer = await webhooks.dispatch(
                        hooks,
                        attributes,
                        options=write.options,
                        resolve=self._resolve_webhook,
                        reinvocation=reinvocation,
                    )
                    write.warnings.extend(answer.warnings)
                    if answer.denial is not None:
                        return _status_response(answer.denial)
                    attributes = replace(attributes, object=answer.object)
                if reinvocation.is_reinvoke or not reinvocation.should_reinvoke:
                    break
                reinvocation.is_reinvoke = True
        except admission_policy.PolicyError as exc:
            # Not a decision a real server would make: say so, loudly.
            return _status_response(status_object(500, str(exc)))
        return attributes.object

    def _generated_name(self, rtype: ResourceType, base: str, namespace: str | None) -> str:
        """storage/names ``SimpleNameGenerator``: the base cut to 58 characters and five
        random characters of utilrand's alphabet; one not taken (store.go retries a
        generated name that exists, ``createWithGenerateNameRetry``)."""
        while True:
            name = base[:58] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
            if self._key(rtype, name, namespace) not in self._objects[rtype.key]:
                return name

    async def _create(self, request: web.Request, write: _Write) -> web.Response:
        """POST to a collection: 201 with the stored object, 409 AlreadyExists for a
        taken name (registry/generic/registry/store.go ``Create``: storage.KeyExists
        becomes ``errors.NewAlreadyExists``, after admission). A resourceVersion in the
        body is refused, as in ``Create`` (``BeforeCreate`` requires it empty:
        "resourceVersion should not be set on objects to be created").

        In the order of endpoints/handlers/create.go and store.go ``create``: the
        object's system fields are wiped (``rest.WipeObjectMetaSystemFields``: uid,
        creationTimestamp...) and it is defaulted (``defaults.py``), then mutating
        admission runs on it (``_mutate``: no uid, no creationTimestamp, and for a
        ``generateName`` create no name yet), then the store fills uid and
        creationTimestamp and generates the name, then validating admission runs on the
        object as it will be stored. A dry run answers that object, without a
        resourceVersion, and stores nothing."""
        rtype, namespace = write.rtype, write.namespace
        body = await self._body_object(request, rtype)
        meta = body.setdefault("metadata", {})
        if rtype.namespaced:
            if namespace is None:
                raise _BadRequest("the namespace of the provided object does not match the namespace sent")
            if meta.get("namespace") not in (None, namespace):
                raise _BadRequest("the namespace of the provided object does not match the namespace sent")
            meta["namespace"] = namespace
        if meta.get("resourceVersion"):
            raise _BadRequest("resourceVersion should not be set on objects to be created")
        name = str(meta.get("name") or "")
        if not name and not meta.get("generateName"):
            return _status_response(
                status_object(
                    422,
                    f'{rtype.kind}.{rtype.group} "" is invalid: metadata.name: Required value',
                    reason="Invalid",
                )
            )
        for system_field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ):
            meta.pop(system_field, None)
        if not rtype.namespaced:
            meta.pop("namespace", None)
        new = copy.deepcopy(body)
        new["kind"], new["apiVersion"] = rtype.kind, rtype.api_version
        apply_defaults((rtype.group, rtype.version, rtype.kind), new)
        mutated = await self._mutate(write, "CREATE", name, new, None)
        if isinstance(mutated, web.Response):
            return mutated
        new = copy.deepcopy(mutated or {})
        meta = new.setdefault("metadata", {})
        if rtype.namespaced:
            meta["namespace"] = namespace
        new["kind"], new["apiVersion"] = rtype.kind, rtype.api_version
        # store.go create: FillObjectMetaSystemFields, then the generated name.
        meta["creationTimestamp"] = CREATION_TIMESTAMP
        meta["uid"] = str(uuid.uuid4())
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generated_name(rtype, str(meta["generateName"]), namespace)
        name = str(meta.get("name") or "")
        if not name:
            return _status_response(
                status_object(
                    422,
                    f'{rtype.kind}.{rtype.group} "" is invalid: metadata.name: Required value',
                    reason="Invalid",
                )
            )
        invalid = _invalid(rtype, name, new)
        if invalid is not None:
            return invalid
        denial = self._admit(write, "CREATE", name, new, None)
        if denial is not None:
            return denial
        if self._key(rtype, name, namespace) in self._objects[rtype.key]:
            return _status_response(
                status_object(
                    409,
                    f'{_qualified(rtype)} "{name}" already exists',
                    reason="AlreadyExists",
                    details={"name": name, "group": rtype.group, "kind": rtype.plural},
                )
            )
        stored = new if write.dry_run else self.add(rtype, new)
        return web.Response(status=201, body=orjson.dumps(stored), content_type="application/json")

    def _conflict(self, rtype: ResourceType, name: str, cause: str) -> web.Response:
        # errors.NewConflict: "Operation cannot be fulfilled on <resource[.group]> ...".
        return _status_response(
            status_object(
                409,
                f'Operation cannot be fulfilled on {_qualified(rtype)} "{name}": {cause}',
                details=resource_details(rtype.group, rtype.plural, name),
            )
        )

    async def _commit_update(
        self, write: _Write, name: str, old: JsonObj, new: JsonObj, conflict: web.Response | None = None
    ) -> web.Response:
        """The end of every update (PUT and PATCH, of the object or its status), in the
        order of store.go ``Update``: the new object goes through mutating admission as an
        UPDATE (the update handler's transformers, ``objInfo.UpdatedObject``), then a
        stale resourceVersion is refused (``conflict``, compared after that), then the
        status strategy keeps only the status of a status write, then validating
        admission sees the object as it will be stored, which is stored (200 with it) or,
        in a dry run, only answered (with the old resourceVersion)."""
        rtype = write.rtype
        mutated = await self._mutate(write, "UPDATE", name, self._as_replacement(rtype, old, new), old)
        if isinstance(mutated, web.Response):
            return mutated
        if conflict is not None:
            return conflict
        new = mutated or {}
        if write.subresource == "status":
            # The status strategies' PrepareForUpdate: only the status changes.
            status = new.get("status")
            new = {k: v for k, v in old.items() if k != "status"}
            if status is not None:
                new["status"] = status
        replacement = self._as_replacement(rtype, old, new)
        denial = self._admit(write, "UPDATE", name, replacement, old)
        if denial is not None:
            return denial
        if write.dry_run:
            replacement["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            stored = replacement
        else:
            stored = self._replace(rtype, self._key(rtype, name, write.namespace), old, replacement)
        return web.Response(body=orjson.dumps(stored), content_type="application/json")

    async def _update(self, request: web.Request, write: _Write, name: str) -> web.Response:
        """PUT of a whole object (or of its status): optimistic concurrency on
        ``metadata.resourceVersion`` (store.go ``Update``: a stale one is
        ``errors.NewConflict`` "the object has been modified; please apply your changes to
        the latest version and try again", checked after mutating admission and before
        validating admission, ``_commit_update``). An absent object is
        404 here: Leases, like most resources, do not allow create on update
        (``AllowCreateOnUpdate`` false). A PUT without a resourceVersion is an
        unconditional update, as for these resources on a real server."""
        rtype = write.rtype
        body = await self._body_object(request, rtype)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise _BadRequest("the name of the object does not match the name on the URL")
        old = self._objects[rtype.key].get(self._key(rtype, name, write.namespace))
        if old is None:
            return _not_found(rtype, name)
        wanted_rv = meta.get("resourceVersion")
        conflict = None
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            conflict = self._conflict(
                rtype,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        return await self._commit_update(write, name, old, body, conflict)

    async def _patch(self, request: web.Request, write: _Write, name: str) -> web.Response:
        # Built-in kinds take both (the API server's patch handler, staging/src/k8s.io/
        # apiserver/pkg/endpoints/handlers/patch.go, also JSON patch and apply).
        rtype = write.rtype
        if request.content_type not in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/json-patch+json",
        ):
            return _status_response(
                status_object(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    f"application/strategic-merge-patch+json (got {request.content_type})",
                )
            )
        try:
            patch = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise _BadRequest(f"error decoding patch: {exc}") from None
        old = self._objects[rtype.key].get(self._key(rtype, name, write.namespace))
        if request.content_type == "application/json-patch+json":
            # patch.go, applyJSPatch: a patch that does not decode is a 400, one that
            # does not apply a 422 with json-patch v4's words; no precondition but
            # what a "test" operation says.
            if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
                raise _BadRequest("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            if old is None:
                return _not_found(rtype, name)
            try:
                patched = json_patch.apply_patch(old, patch)
            except json_patch.JsonPatchError as exc:
                return _status_response(status_object(422, str(exc)))
            return await self._commit_update(write, name, old, patched, None)
        if not isinstance(patch, dict):
            raise _BadRequest("a merge patch must be a JSON object")
        if old is None:
            return _not_found(rtype, name)
        wanted_uid = (patch.get("metadata") or {}).get("uid")
        if wanted_uid is not None and wanted_uid != old["metadata"].get("uid"):
            # A uid in the patch is a precondition (the kubelet's status patches rely on
            # it): the object was deleted and recreated under the same name.
            return self._conflict(
                rtype,
                name,
                f"Precondition failed: UID in precondition: {wanted_uid}, UID in object meta: {old['metadata'].get('uid')}",
            )
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
        conflict = None
        if wanted_rv is not None and wanted_rv != old["metadata"]["resourceVersion"]:
            conflict = self._conflict(
                rtype,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        if request.content_type == "application/strategic-merge-patch+json":
            new = _strategic_merge_patch(old, patch, dict(rtype.merge_keys))
        else:
            new = _merge_patch(old, patch)
        return await self._commit_update(write, name, old, new, conflict)

    async def _delete(self, request: web.Request, write: _Write, name: str) -> web.Response:
        """DELETE of one object, with the DeleteOptions body's ``preconditions`` (uid,
        resourceVersion: 409 on a mismatch, storage ``Preconditions.Check``, before
        admission) and ``dryRun``. Deletion is immediate (no graceful deletion, no
        finalizers) and answered as store.go ``finalizeDelete`` does for a resource that
        does not return the deleted object: a Success Status naming it."""
        rtype = write.rtype
        raw = await request.read()
        options: Any = {}
        if raw.strip():
            try:
                options = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise _BadRequest(f"error decoding DeleteOptions: {exc}") from None
            if not isinstance(options, dict):
                raise _BadRequest("the body is not a DeleteOptions object")
        dry_run = options.get("dryRun") or []
        if dry_run not in ([], ["All"]):
            return self._unsupported_dry_run("DELETE", ",".join(map(str, dry_run)))
        write.dry_run = write.dry_run or dry_run == ["All"]
        write.options = _delete_options(options, write.dry_run)
        old = self._objects[rtype.key].get(self._key(rtype, name, write.namespace))
        if old is None:
            return _not_found(rtype, name)
        preconditions = options.get("preconditions") or {}
        for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(field_name)
            if wanted is not None and wanted != old["metadata"].get(field_name):
                return self._conflict(
                    rtype,
                    name,
                    f"Precondition failed: {label} in precondition: {wanted}, "
                    f"{label} in object meta: {old['metadata'].get(field_name, '')}",
                )
        # registry/rest/delete.go AdmissionToValidateObjectDeleteFunc: mutating, then
        # validating admission, with the stored object as oldObject.
        mutated = await self._mutate(write, "DELETE", name, None, old)
        if isinstance(mutated, web.Response):
            return mutated
        denial = self._admit(write, "DELETE", name, None, old)
        if denial is not None:
            return denial
        if not write.dry_run:
            self.delete(rtype, name, namespace=write.namespace)
        details = resource_details(rtype.group, rtype.plural, name, uid=old["metadata"].get("uid", ""))
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def _create_pod_subresource(self, request: web.Request, write: _Write, name: str) -> web.Response:
        """POST of a pod's ``eviction`` (policy/v1 Eviction: the pod is deleted; no
        disruption budgets) or ``binding`` (v1 Binding: ``spec.nodeName`` is set to the
        target's name, 409 if the pod is already bound, as the pod registry's
        ``assignPod``), each admitted as a CREATE of that subresource with the posted
        object. 201 with a Success Status."""
        rtype = write.rtype
        body = await self._body_object(request, rtype)
        kind = ("policy", "v1", "Eviction") if write.subresource == "eviction" else ("", "v1", "Binding")
        body["kind"], body["apiVersion"] = kind[2], f"{kind[0]}/{kind[1]}" if kind[0] else kind[1]
        old = self._objects[rtype.key].get(self._key(rtype, name, write.namespace))
        if old is None:
            return _not_found(rtype, name)
        mutated = await self._mutate(write, "CREATE", name, body, None, kind=kind)
        if isinstance(mutated, web.Response):
            return mutated
        body = mutated or body
        target = (body.get("target") or {}).get("name") if write.subresource == "binding" else None
        if write.subresource == "binding" and not target:
            return _status_response(
                status_object(
                    422, f'Binding "{name}" is invalid: target.name: Required value', reason="Invalid"
                )
            )
        denial = self._admit(write, "CREATE", name, body, None, kind=kind)
        if denial is not None:
            return denial
        if write.subresource == "binding" and old["spec"].get("nodeName"):
            return _status_response(
                status_object(
                    409,
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned '
                    f'to node "{old["spec"]["nodeName"]}"',
                    details={"name": name, "kind": "pods/binding"},
                )
            )
        if not write.dry_run:
            if write.subresource == "eviction":
                self.delete(rtype, name, namespace=write.namespace)
            else:
                self.modify(
                    rtype, name, lambda pod: pod["spec"].update(nodeName=target), namespace=write.namespace
                )
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        return web.Response(status=201, body=orjson.dumps(body), content_type="application/json")

    async def _watch(
        self, request: web.Request, rtype: ResourceType, namespace: str | None, query: Mapping[str, str]
    ) -> web.StreamResponse:
        selector = self._selector(query)
        requested = self._requested_rv(query)
        try:
            timeout = (
                float(query["timeoutSeconds"]) if "timeoutSeconds" in query else self.default_watch_timeout
            )
        except ValueError:
            raise _BadRequest("timeoutSeconds must be a number") from None
        watcher = _Watcher(
            rtype, namespace, selector, bookmarks=query.get("allowWatchBookmarks") in ("1", "true")
        )
        if requested is not None and requested > self._rv:
            return self._too_large(requested)
        gone = requested is not None and requested < self._compacted_rv
        if gone and self.gone_as == "http":
            return _status_response(
                status_object(410, f"too old resource version: {requested} ({self._compacted_rv})")
            )
        if not gone:
            # Replay and registration in one synchronous step: nothing falls between.
            if requested is None:
                for obj in self._current(rtype, namespace, selector):
                    watcher.queue.put_nowait(_event_line("ADDED", obj))
            else:
                for event in self._history:
                    if event.rv > requested and event.resource == rtype.key:
                        seen = watcher.translate(event.type, event.obj, event.prev)
                        if seen is not None:
                            watcher.queue.put_nowait(_event_line(seen, event.obj))
            self._watchers.add(watcher)
            if not self._is_stalled(rtype):
                watcher.flowing.set()
        response = web.StreamResponse(
            headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
        )
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if gone:
                # The watch cache's answer: 200, then one ERROR event carrying 410 Expired.
                await response.write(
                    _event_line(
                        "ERROR",
                        status_object(410, f"too old resource version: {requested} ({self._compacted_rv})"),
                    )
                )
                await response.write_eof()
                return response
            watcher.transport = request.transport
            if watcher.dropped and watcher.transport is not None:
                watcher.transport.abort()
            await self._stream(response, watcher, timeout)
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self._watchers.discard(watcher)
        return response

    async def _stream(self, response: web.StreamResponse, watcher: _Watcher, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            await watcher.flowing.wait()
            if watcher.dropped:
                return
            now = loop.time()
            if now >= deadline:
                if watcher.bookmarks and watcher.queue.empty():
                    await response.write(self._bookmark_line(watcher.resource, self._rv))
                await response.write_eof()
                return
            wait = deadline - now
            if watcher.bookmarks and self.bookmark_interval is not None:
                wait = min(wait, self.bookmark_interval)
            try:
                item = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if watcher.bookmarks and self.bookmark_interval is not None and loop.time() < deadline:
                    await watcher.flowing.wait()
                    if watcher.dropped:
                        return
                    if watcher.queue.empty():
                        await response.write(self._bookmark_line(watcher.resource, self._rv))
                continue
            await watcher.flowing.wait()
            if watcher.dropped or isinstance(item, _Drop):
                return
            if isinstance(item, _End):
                await response.write_eof()
                return
            if isinstance(item, _Bookmark):
                await response.write(self._bookmark_line(watcher.resource, item.rv))
            else:
                await response.write(item)

    @staticmethod
    def _bookmark_line(rtype: ResourceType, rv: int) -> bytes:
        return _event_line(
            "BOOKMARK",
            {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": {"resourceVersion": str(rv)}},
        )


class _BadRequest(ValueError):
    pass


class _Route(NamedTuple):
    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str


@dataclass(eq=False)
class _Write:
    """Who writes what: what admission is told of a request besides its objects."""

    user: rbac.UserInfo
    rtype: ResourceType
    namespace: str | None
    subresource: str
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    # The operation's options as a webhook is sent them (CreateOptions, UpdateOptions,
    # DeleteOptions).
    options: JsonObj | None = None


def _operation_options(method: str, query: Mapping[str, str]) -> JsonObj | None:
    """The CreateOptions (POST) or UpdateOptions (PUT, and PATCH: patch.go
    ``patchToUpdateOptions``) a write carries, from its query, as meta/v1 writes them."""
    kind = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "UpdateOptions"}.get(method)
    if kind is None:
        return None
    options: JsonObj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if query.get("dryRun"):
        options["dryRun"] = [query["dryRun"]]
    for name in ("fieldManager", "fieldValidation"):
        if query.get(name):
            options[name] = query[name]
    return options


def _delete_options(body: Mapping[str, Any], dry_run: bool) -> JsonObj:
    """A DELETE's DeleteOptions (its body, the query's dryRun), as meta/v1 writes them."""
    options: JsonObj = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    for name in ("gracePeriodSeconds", "preconditions", "orphanDependents", "propagationPolicy"):
        if body.get(name) is not None:
            options[name] = body[name]
    if dry_run:
        options["dryRun"] = ["All"]
    return options


def _qualified(rtype: ResourceType) -> str:
    # schema.GroupResource.String(): "pods", "leases.coordination.k8s.io".
    return f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural


def _without_type(obj: JsonObj) -> JsonObj:
    # Items of a typed list carry no kind/apiVersion of their own.
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def _not_found(rtype: ResourceType, name: str) -> web.Response:
    return _status_response(
        status_object(404, f'{rtype.plural} "{name}" not found', details={"name": name, "kind": rtype.plural})
    )


def _status_response(status: JsonObj, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        status=int(status["code"]),
        body=orjson.dumps(status),
        content_type="application/json",
        headers=headers,
    )


# apimachinery/pkg/util/validation/validation.go IsDNS1123Subdomain, as its message words it.
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _invalid(rtype: ResourceType, name: str, obj: JsonObj) -> web.Response | None:
    """The strategy's validation of a created object, between mutating and validating
    admission (the registry's BeforeCreate), as far as the tests meet it: a pod's
    ``spec.runtimeClassName``, which must be a DNS subdomain when set, the empty string
    included (pkg/apis/core/validation/validation.go ValidateRuntimeClassName)."""
    if rtype.kind != "Pod":
        return None
    runtime_class = (obj.get("spec") or {}).get("runtimeClassName")
    if runtime_class is None or (len(runtime_class) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(runtime_class)):
        return None
    return _status_response(
        status_object(
            422,
            f'Pod "{name}" is invalid: spec.runtimeClassName: Invalid value: "{runtime_class}": '
            + _DNS1123_SUBDOMAIN_MESSAGE,
            reason="Invalid",
        )
    )


def _forbidden(pod: JsonObj, refusal: str) -> JsonObj:
    """An in-tree admission plugin's refusal of a pod (admission.NewForbidden): named as
    the pod is, or by its generateName before it has a name."""
    metadata = pod.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName") or "Unknown"
    return status_object(
        403,
        f'pods "{name}" is forbidden: {refusal}',
        reason="Forbidden",
        details={"name": name, "kind": "pods"},
    )


_CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


def _defined(crd: Mapping[str, Any]) -> ResourceType:
    """The kind a CustomResourceDefinition serves, at its storage version."""
    spec = crd["spec"]
    (version,) = [v["name"] for v in spec["versions"] if v.get("storage")]
    names = spec["names"]
    return ResourceType(spec["group"], version, names["plural"], names["kind"], namespaced=spec["scope"] == "Namespaced")
