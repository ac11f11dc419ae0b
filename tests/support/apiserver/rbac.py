"""Who a request is, and whether RBAC lets it: kube-apiserver's authentication result and
its RBAC authorizer, as pure functions over plain manifests (dicts).

Mirrored from the Kubernetes source:

- ``UserInfo`` of a ServiceAccount token: staging/src/k8s.io/apiserver/pkg/authentication/
  serviceaccount/util.go (``MakeUsername``, ``MakeGroupNames``: ``system:serviceaccounts``
  and ``system:serviceaccounts:<ns>``), then ``system:authenticated`` appended by
  staging/src/k8s.io/apiserver/pkg/authentication/group/authenticated_group_adder.go.
- ``request_verb`` and ``name_from_field_selector``: staging/src/k8s.io/apiserver/pkg/
  endpoints/request/requestinfo.go (``NewRequestInfo``: GET of a collection is list or
  watch, DELETE of one is deletecollection; a list or watch whose fieldSelector requires
  ``metadata.name`` to equal a valid path segment carries that name, so resourceNames
  apply to it; a create (POST to a collection) carries none, so they never do).
- ``authorize``: plugin/pkg/auth/authorizer/rbac/rbac.go (``Authorize``, ``RuleAllows``:
  the rule's resources are matched against ``resource/subresource``) over
  pkg/registry/rbac/validation/rule.go (``VisitRulesFor``: every ClusterRoleBinding, then
  the RoleBindings of the request's namespace only; ``GetRoleReferenceRules``: a
  RoleBinding's Role is looked up in the binding's namespace, a ClusterRole by name;
  ``appliesToUser``: User by name, Group by membership, ServiceAccount by
  ``system:serviceaccount:<ns>:<name>`` with the binding's namespace as the default) and
  pkg/apis/rbac/v1/evaluation_helpers.go (``VerbMatches``, ``APIGroupMatches``,
  ``ResourceMatches``: ``*`` matches every resource and every subresource, ``*/status``
  the status subresource of any resource, anything else only itself — ``pods`` does not
  cover ``pods/status`` — and ``ResourceNameMatches``: no names means any name, else the
  request's name must be listed, which an empty name never is). Rules resolve from the
  manifests at each request, so a binding to a role that does not exist grants nothing
  and its lookup error is the denial's reason, as in ``Authorize``.
- ``system:masters`` is allowed everything before RBAC is asked, as the privileged-group
  authorizer in front of it does (staging/src/k8s.io/apiserver/pkg/authorization/
  authorizerfactory/builtin.go ``NewPrivilegedGroups``).
- ``forbidden_status``: staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
  responsewriters/errors.go (``Forbidden``, ``forbiddenMessage``) through
  apimachinery/pkg/api/errors ``NewForbidden``.

Not modelled: non-resource URLs (the fake serves only resources), ClusterRole
aggregation (``aggregationRule`` is refused when loaded), the bootstrap roles a real
cluster has (load them like any other manifest if a test needs one), impersonation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tests.support.apiserver.objects import resource_details, status_object

JsonObj = dict[str, Any]

SYSTEM_MASTERS = "system:masters"
SYSTEM_AUTHENTICATED = "system:authenticated"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"


@dataclass(frozen=True)
class UserInfo:
    """An authenticated user (staging/src/k8s.io/apiserver/pkg/authentication/user)."""

    name: str
    groups: tuple[str, ...] = ()


# The fake's default token: an administrator, as kubeadm's admin credentials are.
ADMIN = UserInfo("kubernetes-admin", (SYSTEM_MASTERS, SYSTEM_AUTHENTICATED))


def user_info(name: str, groups: Iterable[str] = ()) -> UserInfo:
    """The user a token of ``name`` authenticates as: a ServiceAccount name
    (``system:serviceaccount:<ns>:<sa>``) gets that ServiceAccount's groups, any other
    user the ``groups`` given; every user is also in ``system:authenticated``."""
    all_groups = list(groups)
    if name.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace = name[len(SERVICE_ACCOUNT_PREFIX) :].split(":", 1)[0]
        all_groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", *all_groups]
    if SYSTEM_AUTHENTICATED not in all_groups:
        all_groups.append(SYSTEM_AUTHENTICATED)
    return UserInfo(name, tuple(dict.fromkeys(all_groups)))


def service_account(namespace: str, name: str) -> str:
    """The user name of a ServiceAccount's tokens."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


@dataclass(frozen=True)
class Attributes:
    """What the authorizer is asked (staging/src/k8s.io/apiserver/pkg/authorization/
    authorizer ``AttributesRecord``) for a resource request. ``namespace`` is "" for a
    cluster-scoped request and for a request across all namespaces."""

    user: UserInfo
    verb: str
    api_group: str
    api_version: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def request_verb(method: str, name: str, *, watch: bool = False) -> str:
    """The Kubernetes verb of an HTTP request on a resource path (requestinfo.go)."""
    if method in ("GET", "HEAD"):
        if name:
            return "get"
        return "watch" if watch else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")


def _valid_path_segment(name: str) -> bool:
    # apimachinery/pkg/api/validation/path/name.go IsValidPathSegmentName.
    return name not in (".", "..") and "/" not in name and "%" not in name


def _split_term(term: str) -> tuple[str, str, str] | None:
    # fields/selector.go splitTerm: the first place any operator starts, "!=" and "=="
    # tried before "=".
    for index in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, index):
                return term[:index], op, term[index + len(op) :]
    return None


def name_from_field_selector(selector: str) -> str:
    """The name a list or watch is authorized with: the value its fieldSelector
    requires ``metadata.name`` to equal (``RequiresExactMatch``: the first equality term
    on that field once the terms are sorted, as fields.ParseSelector sorts them), if it
    is a valid path segment; else "", as for a selector that does not parse (then the
    request's options fail to decode and it carries no name). Escaped values (``\\,``)
    are not supported."""
    terms = [_split_term(term) for term in sorted(t for t in selector.split(",") if t)]
    if None in terms:
        return ""
    for field_name, op, value in filter(None, terms):
        if field_name == "metadata.name" and op != "!=":
            return value if _valid_path_segment(value) else ""
    return ""


# ----- the manifests -------------------------------------------------------------------


@dataclass
class Rbac:
    """The Roles, ClusterRoles and bindings RBAC decides by (manifests as loaded)."""

    roles: dict[tuple[str, str], JsonObj] = field(default_factory=dict)
    cluster_roles: dict[str, JsonObj] = field(default_factory=dict)
    role_bindings: dict[tuple[str, str], JsonObj] = field(default_factory=dict)
    cluster_role_bindings: dict[str, JsonObj] = field(default_factory=dict)

    def copy(self) -> Rbac:
        return Rbac(
            dict(self.roles),
            dict(self.cluster_roles),
            dict(self.role_bindings),
            dict(self.cluster_role_bindings),
        )

    def add(self, manifest: Mapping[str, Any]) -> None:
        """Add or replace one Role, ClusterRole, RoleBinding or ClusterRoleBinding."""
        kind = manifest.get("kind")
        meta = manifest.get("metadata") or {}
        name = meta.get("name")
        if manifest.get("apiVersion") != RBAC_API_VERSION or kind not in RBAC_KINDS:
            raise ValueError(f"not an RBAC manifest: {manifest.get('apiVersion')}/{kind}")
        if not name:
            raise ValueError(f"{kind} without metadata.name")
        doc = copy.deepcopy(dict(manifest))
        if kind == "ClusterRole" and doc.get("aggregationRule"):
            raise ValueError(f'ClusterRole "{name}": aggregationRule is not supported by the fake API server')
        if kind in ("Role", "RoleBinding"):
            namespace = meta.get("namespace") or "default"
            store = self.roles if kind == "Role" else self.role_bindings
            store[(namespace, name)] = doc
        elif kind == "ClusterRole":
            self.cluster_roles[name] = doc
        else:
            self.cluster_role_bindings[name] = doc

    def role_reference_rules(self, role_ref: Mapping[str, Any], binding_namespace: str) -> list[JsonObj]:
        """A binding's rules (rule.go ``GetRoleReferenceRules``); LookupError if the role
        is missing, worded as the lister's NotFound."""
        kind, name = role_ref.get("kind"), role_ref.get("name", "")
        if kind == "Role":
            role = self.roles.get((binding_namespace, name))
            if role is None:
                raise LookupError(f'role.rbac.authorization.k8s.io "{name}" not found')
            return list(role.get("rules") or [])
        if kind == "ClusterRole":
            cluster_role = self.cluster_roles.get(name)
            if cluster_role is None:
                raise LookupError(f'clusterrole.rbac.authorization.k8s.io "{name}" not found')
            return list(cluster_role.get("rules") or [])
        raise LookupError(f'unsupported role reference kind: "{kind}"')


# ----- matching ------------------------------------------------------------------------


def _applies_to_user(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(user.name == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.name == service_account(sa_namespace, name)
    return False


def _subject_index(user: UserInfo, binding: Mapping[str, Any], namespace: str) -> int | None:
    for index, subject in enumerate(binding.get("subjects") or []):
        if _applies_to_user(user, subject, namespace):
            return index
    return None


def rule_allows(attributes: Attributes, rule: Mapping[str, Any]) -> bool:
    """rbac.go ``RuleAllows`` for a resource request."""
    combined = attributes.resource
    if attributes.subresource:
        combined = f"{attributes.resource}/{attributes.subresource}"
    verbs = rule.get("verbs") or []
    groups = rule.get("apiGroups") or []
    resources = rule.get("resources") or []
    names = rule.get("resourceNames") or []
    return (
        any(verb in ("*", attributes.verb) for verb in verbs)
        and any(group in ("*", attributes.api_group) for group in groups)
        and any(
            resource in ("*", combined)
            or (bool(attributes.subresource) and resource == f"*/{attributes.subresource}")
            for resource in resources
        )
        and (not names or attributes.name in names)
    )


def _describe_subject(subject: Mapping[str, Any], namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or namespace}"'
    return f'{kind} "{name}"'


class Decision(NamedTuple):
    allowed: bool
    # Allowed: what allowed it ("RBAC: allowed by ..."); denied: the resolution errors
    # met on the way ("RBAC: ..."), or "" when there were none.
    reason: str


def authorize(rbac: Rbac, attributes: Attributes) -> Decision:
    """Whether ``attributes`` is allowed (rbac.go ``Authorize`` over ``VisitRulesFor``)."""
    user = attributes.user
    if SYSTEM_MASTERS in user.groups:
        return Decision(True, f'allowed by the privileged group "{SYSTEM_MASTERS}"')
    errors: list[str] = []
    # ClusterRoleBindings first, then the RoleBindings of the request's namespace, as
    # rbac/validation's VisitRulesFor visits them.
    bindings: list[tuple[str, str, dict[str, Any]]] = [
        (f'ClusterRoleBinding "{name}"', "", binding)
        for name, binding in sorted(rbac.cluster_role_bindings.items())
    ]
    if attributes.namespace:
        bindings += [
            (f'RoleBinding "{name}/{namespace}"', namespace, binding)
            for (namespace, name), binding in sorted(rbac.role_bindings.items())
            if namespace == attributes.namespace
        ]
    for described, namespace, binding in bindings:
        index = _subject_index(user, binding, namespace)
        if index is None:
            continue
        role_ref = binding.get("roleRef") or {}
        try:
            rules = rbac.role_reference_rules(role_ref, namespace)
        except LookupError as exc:
            errors.append(str(exc))
            continue
        if any(rule_allows(attributes, rule) for rule in rules):
            subject = binding["subjects"][index]
            return Decision(
                True,
                f"RBAC: allowed by {described} of {role_ref.get('kind')} "
                f'"{role_ref.get("name")}" to {_describe_subject(subject, namespace)}',
            )
    if not errors:
        return Decision(False, "")
    # utilerrors.NewAggregate: one error reads as itself, several as "[a, b]".
    aggregate = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return Decision(False, f"RBAC: {aggregate}")


_SANITIZER = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def forbidden_status(attributes: Attributes, reason: str = "") -> JsonObj:
    """The 403 Status kube-apiserver answers a request its authorizers do not allow."""
    resource = attributes.resource
    if attributes.subresource:
        resource = f"{resource}/{attributes.subresource}"
    what = (
        f'User "{attributes.user.name}" cannot {attributes.verb} resource "{resource}" '
        f'in API group "{attributes.api_group}"'
    )
    if attributes.namespace:
        what += f' in the namespace "{attributes.namespace}"'
    else:
        what += " at the cluster scope"
    what = what.translate(_SANITIZER)
    if reason:
        what = f"{what}: {reason}"
    qualified = attributes.resource
    if attributes.api_group:
        qualified = f"{qualified}.{attributes.api_group}"
    message = (
        f'{qualified} "{attributes.name}" is forbidden: {what}'
        if attributes.name
        else (f"{qualified} is forbidden: {what}")
    )
    details = resource_details(attributes.api_group, attributes.resource, attributes.name)
    return status_object(403, message, reason="Forbidden", details=details)
