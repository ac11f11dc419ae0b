"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) admission as kube-apiserver
1.36 runs it, as a pure function over plain manifests (dicts), and what it shares with
MutatingAdmissionPolicy (``mutating_policy.py``): loading both kinds and their
bindings, matching, params, matchConditions and variables. CEL is evaluated by the
``cel`` package (``cel_env.py``).

Mirrored from the Kubernetes source (staging/src/k8s.io/apiserver/pkg/admission/...):

- Which policies run (plugin/policy/validating/dispatcher.go ``Dispatch``): every policy
  that has a binding (``spec.policyName``) and whose ``matchConstraints`` match, then each
  of its bindings whose ``matchResources`` match (none: every request the policy
  matches). Writes of the policy resources themselves (validating and mutating
  admission policies and their bindings) are exempt, webhook configurations are not
  (plugin/policy/generic/plugin.go ``Dispatch``: ``admissionResources``; the
  webhooks' own exemption, rules.go ``IsExemptAdmissionConfigurationResource``,
  does not apply to policies).
- Matching (plugin/policy/matching/matching.go ``Matches``, rules.go ``Matcher``):
  ``namespaceSelector`` (ignored for cluster-scoped requests; labels of the request's
  Namespace), ``objectSelector`` (the new or the old object's labels), then
  ``excludeResourceRules``, then ``resourceRules``: operations, apiGroups, apiVersions
  (``*`` or exact), ``scope``, and resources as ``resource/subresource`` where ``*`` is any
  resource WITHOUT a subresource, ``*/*`` any resource with any or none, ``pods/*`` pods
  with any subresource or none (the pod itself too), ``nodes/status`` exactly that
  (unlike RBAC, whose ``*`` covers subresources too and ``pods/*`` nothing but the
  literal); then ``resourceNames`` if given. Only exact matching: no
  ``matchPolicy: Equivalent`` conversion across versions.
- Params (plugin/policy/generic/policy_dispatcher.go ``CollectParams``): a policy with
  ``spec.paramKind`` (apiVersion, kind) is evaluated once per param its binding's
  ``spec.paramRef`` selects among the stored objects of that kind: ``name`` (one
  object), or ``selector`` (every object whose labels it matches, ``{}`` all of them);
  of a namespaced kind in ``paramRef.namespace``, else in the request's namespace ("cannot
  use namespaced paramRef in policy binding that matches cluster-scoped resources" for a
  cluster-scoped request), while a cluster-scoped kind refuses ``paramRef.namespace``
  ("paramRef.namespace must not be provided for a cluster-scoped `paramKind`"). None
  found: ``parameterNotFoundAction: Allow`` skips the binding, ``Deny`` is the
  configuration error "no params found for policy binding with `Deny`
  parameterNotFoundAction". A policy without paramKind, or a binding without paramRef,
  runs once with ``params`` null. The real dispatcher takes a selector's params in the
  order its informer's store lists them, a Go map's (unspecified); the fake takes them
  in namespace/name order. The param a ValidatingAdmissionPolicy sees carries
  ``apiVersion`` and ``kind`` (validating/dispatcher.go wraps it, ``wrappedParam``); a
  MutatingAdmissionPolicy gets the informer's typed object as it is, without them. The
  objects are looked up through a ``ParamSource`` the caller passes (the API server's
  store), so ``admit`` stays a pure function; a paramKind the source does not serve is
  ``UnsupportedExpression`` (the fake cannot tell which kinds a real server has).
  A binding's paramRef is validated when loaded as the API validates it
  (apis/admissionregistration/validation ``validateParamRef``): ``name`` or
  ``selector``, not both; ``parameterNotFoundAction`` required, Allow or Deny.
- Evaluation (plugin/policy/validating/validator.go ``Validate``): ``matchConditions``
  first (webhook/matchconditions/matcher.go ``Match``: any false skips the binding;
  otherwise errors deny under ``failurePolicy: Fail``, their messages aggregated, and
  skip under ``Ignore``); then every ``validations[]`` expression, each one not true a
  denial with ``messageExpression``'s string, else ``message``, else ``failed
  expression: <expression>``, and with its ``reason`` (default Invalid, which is 422); an
  expression that fails to evaluate (e.g. a missing key) denies under Fail with
  ``expression '<expression>' resulted in error: <error>`` (plugin/cel/activation.go
  ``Evaluate``) and is passed over under Ignore. ``variables`` are evaluated in order
  and an error in one surfaces only where it is used, as ``composited variable "<name>"
  fails to evaluate: <error>`` (plugin/cel/composition.go ``variableAccessor``).
  ``validationActions``: Deny denies, Warn adds a ``Warning`` header, Audit does nothing
  here. A binding's configuration error (params) denies under Fail whatever its
  validationActions, as ``failed to configure binding: <error>`` (validating/dispatcher.go
  ``addConfigError``), and is passed over under Ignore.
- The denial (dispatcher.go, admission/errors.go ``NewForbidden``): the first denial in
  policy-name then binding-name order (a real server's order among several denying
  policies is unspecified), as ``<resource[.group]> "<name>" is forbidden:
  ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request:
  <message>``, reason and code from the decision, the message again as the one cause.
- The CEL context (plugin/cel/activation.go ``newActivation``, condition.go
  ``CreateAdmissionRequest``): ``object`` (null for DELETE), ``oldObject`` (null for
  CREATE), ``params``, ``namespaceObject`` (null for cluster-scoped requests, and in
  matchConditions always: matcher.go ``Match`` passes no namespace), ``variables``, and
  ``request`` with uid, kind, resource, requestKind, requestResource, operation,
  userInfo, dryRun always present and subResource, requestSubResource, name and
  namespace only when not empty (omitempty), so ``has(request.subResource)`` is false
  for the object itself, and ``request.name`` is absent in the mutating admission of a
  create by ``generateName``. Not provided: ``request.options``, ``authorizer``.

The ``cel`` package, with its cel-go-like extension functions (``cel.stdlib``: the
strings, lists, math, sets and base64 libraries Kubernetes' CEL environment also has)
and the Kubernetes functions ``cel_env.py`` adds (``jsonpatch.escapeKey``, the quantity
comparisons), treats the JSON as CEL does: None is ``null``, ``has(m.k)`` is false for
an absent key and true for one whose value is null, ``k in m`` tests a map's keys, an
error in one operand of ``||``/``&&`` is absorbed when the other decides. A missing map
key raises KeyError, reported as CEL's ``no such key: <key>``; other evaluation errors
keep the package's own wording. Where it falls short of a real server, the fake says so
instead of deciding: it cannot parse CEL's optional syntax (``obj.?field.orValue(x)``),
so a policy using it is refused when loaded, naming the expression (write ``has()``
instead); and an expression that calls a function it lacks (Kubernetes' ``authorizer``,
``string()`` of a bool...) raises ``UnsupportedExpression`` when it runs, which the
server answers with a 500 naming the expression, never a denial or an admission a real
server would not give.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tests.support.apiserver.cel_env import (
    CelEvaluationError,
    PolicyError,
    UnsupportedExpression,
    compile_expression,
    error_text,
    execute,
)
from tests.support.apiserver.objects import resource_details, status_object
from tests.support.apiserver.rbac import UserInfo

__all__ = [
    "API_VERSION",
    "MUTATING_KINDS",
    "POLICY_KINDS",
    "VALIDATING_KINDS",
    "AdmissionAttributes",
    "CelEvaluationError",
    "ParamKind",
    "ParamSource",
    "Policies",
    "PolicyConfigurationError",
    "PolicyError",
    "UnsupportedExpression",
    "Verdict",
    "admission_request",
    "admit",
    "matches",
]

JsonObj = dict[str, Any]

API_VERSION = "admissionregistration.k8s.io/v1"
VALIDATING_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
MUTATING_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
POLICY_KINDS = VALIDATING_KINDS + MUTATING_KINDS
# plugin/policy/generic/plugin.go admissionResources: never admitted by API-defined policies.
EXEMPT_RESOURCES = (
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
)
# apiserver/pkg/apis/cel/config.go MaxEvaluatedMessageExpressionSizeBytes.
_MAX_MESSAGE_BYTES = 5 * 1024
# dispatcher.go reasonToCode.
_REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class AdmissionAttributes:
    """What admission sees of a write (staging/src/k8s.io/apiserver/pkg/admission
    ``Attributes``). ``kind`` is (group, version, kind) of ``object``: the resource's own
    for the object and its status, e.g. policy/v1 Eviction for ``pods/eviction``."""

    operation: str  # CREATE, UPDATE or DELETE
    user: UserInfo
    group: str
    version: str
    resource: str
    kind: tuple[str, str, str]
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    object: JsonObj | None = None
    old_object: JsonObj | None = None
    dry_run: bool = False
    namespace_object: JsonObj | None = None


def admission_request(attributes: AdmissionAttributes) -> JsonObj:
    """The CEL ``request`` variable (condition.go ``CreateAdmissionRequest``, with the
    JSON field names and omitempty of admission/v1 ``AdmissionRequest``)."""
    group, version, kind = attributes.kind
    kind_obj = {"group": group, "version": version, "kind": kind}
    resource_obj = {"group": attributes.group, "version": attributes.version, "resource": attributes.resource}
    request: JsonObj = {"uid": "", "kind": kind_obj, "resource": resource_obj}
    if attributes.subresource:
        request["subResource"] = attributes.subresource
    request["requestKind"] = dict(kind_obj)
    request["requestResource"] = dict(resource_obj)
    if attributes.subresource:
        request["requestSubResource"] = attributes.subresource
    if attributes.name:
        request["name"] = attributes.name
    if attributes.namespace:
        request["namespace"] = attributes.namespace
    request["operation"] = attributes.operation
    user_info: JsonObj = {}
    if attributes.user.name:
        user_info["username"] = attributes.user.name
    if attributes.user.groups:
        user_info["groups"] = list(attributes.user.groups)
    request["userInfo"] = user_info
    request["dryRun"] = attributes.dry_run
    return request


def resource_name(attributes: AdmissionAttributes) -> str:
    """admission/errors.go ``extractResourceName``: the request's name, else the
    object's name or generateName (name generation has not happened yet), else Unknown."""
    if attributes.name:
        return attributes.name
    meta = (attributes.object or {}).get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "Unknown")


def qualified_resource(attributes: AdmissionAttributes) -> str:
    # schema.GroupResource.String(): "pods", "leases.coordination.k8s.io".
    return f"{attributes.resource}.{attributes.group}" if attributes.group else attributes.resource


# ----- params --------------------------------------------------------------------------


class ParamKind(NamedTuple):
    """What a ParamSource knows of a paramKind: its scope and every stored object of it."""

    namespaced: bool
    objects: Sequence[JsonObj]


# (apiVersion, kind) -> the kind's objects, or None for a kind the source does not serve.
ParamSource = Callable[[str, str], ParamKind | None]


class PolicyConfigurationError(Exception):
    """The policy itself cannot be configured (its paramKind not served): the generic
    dispatcher's hook ``ConfigurationError``, answered ``policy "<name>" denied request:
    failed to configure policy: <error>`` under failurePolicy Fail, skipped under Ignore."""


class ParamConfigurationError(Exception):
    """A binding's params cannot be collected (policy_dispatcher.go ``CollectParams``)."""


def collect_params(
    policy_spec: Mapping[str, Any],
    binding_spec: Mapping[str, Any],
    namespace: str,
    source: ParamSource | None,
    *,
    mutating: bool = False,
) -> list[JsonObj | None]:
    """policy_dispatcher.go ``CollectParams``: the params to evaluate a policy-binding
    with, in order; ``[None]`` without paramKind or paramRef; ``[]`` for none found under
    ``parameterNotFoundAction: Allow``. ParamConfigurationError as the real one errs."""
    param_kind = policy_spec.get("paramKind")
    param_ref = binding_spec.get("paramRef")
    if not param_kind or param_ref is None:
        return [None]
    api_version, kind = str(param_kind.get("apiVersion", "")), str(param_kind.get("kind", ""))
    found = source(api_version, kind) if source is not None else None
    if found is None and source is not None and mutating:
        # Seen on kube-apiserver 1.36.2 (a PodAdmissionTable policy applied without its
        # CustomResourceDefinition): every request the policy matches is denied under
        # failurePolicy Fail, a pod that names no RuntimeClass too.
        raise PolicyConfigurationError(
            f"failed to find resource referenced by paramKind: '{api_version}, Kind={kind}'"
        )
    if found is None:
        raise UnsupportedExpression(
            f"paramKind {api_version} {kind} is not a resource the fake API server serves: "
            "register it, or a real server would answer what the fake cannot know"
        )
    ref_namespace = str(param_ref.get("namespace") or "")
    if found.namespaced:
        namespace = ref_namespace or namespace
        if not namespace:
            raise ParamConfigurationError(
                "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
            )
        candidates = [o for o in found.objects if (o.get("metadata") or {}).get("namespace") == namespace]
    elif ref_namespace:
        raise ParamConfigurationError(
            "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
        )
    else:
        candidates = list(found.objects)
    if param_ref.get("name"):
        params = [o for o in candidates if (o.get("metadata") or {}).get("name") == param_ref["name"]][:1]
    elif param_ref.get("selector") is not None:
        params = [o for o in candidates if label_selector_matches(param_ref["selector"], labels_of(o))]
    else:
        raise ParamConfigurationError("one of name or selector must be provided")
    if not params and param_ref.get("parameterNotFoundAction") == "Deny":
        raise ParamConfigurationError(
            "no params found for policy binding with `Deny` parameterNotFoundAction"
        )
    return [copy.deepcopy(p) for p in params]


def param_view(param: JsonObj | None, policy_spec: Mapping[str, Any], *, wrapped: bool) -> JsonObj | None:
    """The CEL ``params``: with the paramKind's apiVersion and kind (``wrapped``: a
    ValidatingAdmissionPolicy's ``wrappedParam``), or without them (the informer's typed
    object, as a MutatingAdmissionPolicy receives it)."""
    if param is None:
        return None
    rest = {k: v for k, v in param.items() if k not in ("apiVersion", "kind")}
    if not wrapped:
        return rest
    param_kind = policy_spec.get("paramKind") or {}
    return {"apiVersion": param_kind.get("apiVersion", ""), "kind": param_kind.get("kind", ""), **rest}


# ----- the manifests -------------------------------------------------------------------


@dataclass
class Policies:
    """The admission policies and their bindings admission runs (as loaded): validating
    (``admit``) and mutating (``mutating_policy.mutate``)."""

    policies: dict[str, JsonObj] = field(default_factory=dict)
    bindings: dict[str, JsonObj] = field(default_factory=dict)
    mutating_policies: dict[str, JsonObj] = field(default_factory=dict)
    mutating_bindings: dict[str, JsonObj] = field(default_factory=dict)
    _programs: dict[tuple[bool, str], Any] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return bool(self.policies or self.bindings or self.mutating_policies or self.mutating_bindings)

    def copy(self) -> Policies:
        return Policies(
            dict(self.policies),
            dict(self.bindings),
            dict(self.mutating_policies),
            dict(self.mutating_bindings),
            dict(self._programs),
        )

    def param_kinds(self) -> set[tuple[str, str]]:
        """(apiVersion, kind) of every loaded ValidatingAdmissionPolicy's paramKind (a
        MutatingAdmissionPolicy's that is not served is answered as kube-apiserver
        answers it: ``PolicyConfigurationError``)."""
        kinds = set()
        for policy in self.policies.values():
            param_kind = (policy.get("spec") or {}).get("paramKind")
            if param_kind:
                kinds.add((str(param_kind.get("apiVersion", "")), str(param_kind.get("kind", ""))))
        return kinds

    def add(self, manifest: Mapping[str, Any]) -> None:
        """Add or replace one policy or binding; PolicyError if the fake cannot run it (an
        expression the ``cel`` package cannot parse, an ApplyConfiguration mutation) or
        the API would refuse it (a paramRef without parameterNotFoundAction...)."""
        kind = manifest.get("kind")
        name = (manifest.get("metadata") or {}).get("name")
        if manifest.get("apiVersion") != API_VERSION or kind not in POLICY_KINDS:
            raise PolicyError(f"not an admission policy manifest: {manifest.get('apiVersion')}/{kind}")
        if not name:
            raise PolicyError(f"{kind} without metadata.name")
        spec = manifest.get("spec") or {}
        where = f'{kind} "{name}"'
        if kind in ("ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"):
            if not spec.get("policyName"):
                raise PolicyError(f"{where}: spec.policyName is required")
            if spec.get("paramRef") is not None:
                _check_param_ref(where, spec["paramRef"])
            target = self.bindings if kind == "ValidatingAdmissionPolicyBinding" else self.mutating_bindings
            target[name] = copy.deepcopy(dict(manifest))
            return
        param_kind = spec.get("paramKind")
        if param_kind is not None and not (param_kind.get("apiVersion") and param_kind.get("kind")):
            raise PolicyError(f"{where}: spec.paramKind needs apiVersion and kind")
        if spec.get("failurePolicy") not in (None, "Fail", "Ignore"):
            raise PolicyError(f"{where}: spec.failurePolicy: Unsupported value: {spec['failurePolicy']!r}")
        expressions = _expressions(spec)
        if kind == "MutatingAdmissionPolicy":
            if spec.get("reinvocationPolicy") not in (None, "Never", "IfNeeded"):
                raise PolicyError(
                    f"{where}: spec.reinvocationPolicy: Unsupported value: {spec['reinvocationPolicy']!r}"
                )
            expressions += _mutation_expressions(where, spec)
        programs = {}
        for path, expression, json_patch in expressions:
            try:
                programs[(json_patch, expression)] = compile_expression(expression, json_patch=json_patch)
            except Exception as exc:  # the package raises ValueError on a parse error
                raise PolicyError(
                    f"{where}: {path} {expression!r} cannot be compiled by the cel package "
                    f"the fake API server evaluates CEL with: {exc}"
                ) from exc
        self._programs.update(programs)
        target = self.policies if kind == "ValidatingAdmissionPolicy" else self.mutating_policies
        target[name] = copy.deepcopy(dict(manifest))

    def run(self, expression: str, context: Mapping[str, Any]) -> Any:
        """Evaluate one of the loaded expressions; UnsupportedExpression where the
        ``cel`` package lacks a name the expression uses."""
        return execute(self._programs[(False, expression)], expression, context)

    def run_patch(self, expression: str, context: Mapping[str, Any]) -> Any:
        """Evaluate a loaded mutation's JSONPatch expression (compiled rewritten)."""
        return execute(self._programs[(True, expression)], expression, context)


def _check_param_ref(where: str, param_ref: Any) -> None:
    """apis/admissionregistration/validation ``validateParamRef``, as the API refuses
    a binding with a malformed paramRef when it is created."""
    if not isinstance(param_ref, Mapping):
        raise PolicyError(f"{where}: spec.paramRef must be an object")
    has_name, has_selector = bool(param_ref.get("name")), param_ref.get("selector") is not None
    if has_name and has_selector:
        raise PolicyError(
            f"{where}: spec.paramRef.selector: Forbidden: name and selector are mutually exclusive"
        )
    if not has_name and not has_selector:
        raise PolicyError(
            f"{where}: spec.paramRef: Required value: one of name or selector must be specified"
        )
    if has_selector:
        for requirement in param_ref["selector"].get("matchExpressions") or []:
            if requirement.get("operator") not in _SELECTOR_OPERATORS:
                raise PolicyError(
                    f"{where}: spec.paramRef.selector: operator {requirement.get('operator')!r} is not valid"
                )
    action = param_ref.get("parameterNotFoundAction")
    if not action:
        raise PolicyError(f"{where}: spec.paramRef.parameterNotFoundAction: Required value")
    if action not in ("Allow", "Deny"):
        raise PolicyError(
            f'{where}: spec.paramRef.parameterNotFoundAction: Unsupported value: "{action}": '
            'supported values: "Deny", "Allow"'
        )


def _expressions(spec: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    found = []
    for section, keys in (
        ("matchConditions", ("expression",)),
        ("variables", ("expression",)),
        ("validations", ("expression", "messageExpression")),
    ):
        for index, item in enumerate(spec.get(section) or []):
            for key in keys:
                if item.get(key):
                    found.append((f"spec.{section}[{index}].{key}", str(item[key]), False))
    return found


def _mutation_expressions(where: str, spec: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    found = []
    for index, mutation in enumerate(spec.get("mutations") or []):
        patch_type = mutation.get("patchType")
        if patch_type == "ApplyConfiguration":
            raise PolicyError(
                f"{where}: spec.mutations[{index}]: patchType ApplyConfiguration (a server-side apply "
                "merge of an Object{} literal) is not supported by the fake API server: use JSONPatch"
            )
        expression = (mutation.get("jsonPatch") or {}).get("expression")
        if patch_type != "JSONPatch" or not expression:
            raise PolicyError(
                f"{where}: spec.mutations[{index}]: patchType JSONPatch with jsonPatch.expression is required"
            )
        found.append((f"spec.mutations[{index}].jsonPatch.expression", str(expression), True))
    return found


# ----- matching ------------------------------------------------------------------------


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; an absent or empty selector matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator = requirement.get("key", ""), requirement.get("operator")
        values = requirement.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            raise PolicyError(f"label selector operator {operator!r} is not supported")
        if not ok:
            return False
    return True


def labels_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    if not isinstance(obj, Mapping):
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


def rule_matches(rule: Mapping[str, Any], attributes: AdmissionAttributes) -> bool:
    """rules.go ``Matcher.Matches`` (then ``resourceNames``, as matching.go checks them)."""
    is_namespace = (attributes.group, attributes.version, attributes.resource) == ("", "v1", "namespaces")
    scope = rule.get("scope") or "*"
    if scope == "Namespaced":
        in_scope = not is_namespace and attributes.namespace != ""
    elif scope == "Cluster":
        in_scope = is_namespace or attributes.namespace == ""
    else:
        in_scope = scope == "*"
    if not in_scope:
        return False
    if not any(op in ("*", attributes.operation) for op in rule.get("operations") or []):
        return False
    if not any(group in ("*", attributes.group) for group in rule.get("apiGroups") or []):
        return False
    if not any(version in ("*", attributes.version) for version in rule.get("apiVersions") or []):
        return False
    for entry in rule.get("resources") or []:
        resource, _, subresource = str(entry).partition("/")
        if resource in ("*", attributes.resource) and subresource in ("*", attributes.subresource):
            break
    else:
        return False
    names = rule.get("resourceNames") or []
    return not names or attributes.name in names


def namespace_labels(attributes: AdmissionAttributes) -> Mapping[str, str]:
    """The labels a namespaceSelector is matched against: the request's Namespace's,
    or, for a create or update of a Namespace itself, the object's (namespace/matcher.go
    ``GetNamespaceLabels``)."""
    if attributes.resource == "namespaces" and not attributes.subresource and attributes.object is not None:
        return labels_of(attributes.object)
    return labels_of(attributes.namespace_object)


def object_selector_matches(selector: Mapping[str, Any] | None, attributes: AdmissionAttributes) -> bool:
    """The new or the old object's labels match (object/matcher.go)."""
    if not selector:
        return True
    return (
        attributes.object is not None and label_selector_matches(selector, labels_of(attributes.object))
    ) or (
        attributes.old_object is not None
        and label_selector_matches(selector, labels_of(attributes.old_object))
    )


def matches(criteria: Mapping[str, Any] | None, attributes: AdmissionAttributes) -> bool:
    """matching.go ``Matches`` for a policy's matchConstraints or a binding's matchResources."""
    criteria = criteria or {}
    # A cluster-scoped request other than of a namespace is never exempted by namespace.
    if (attributes.namespace or attributes.resource == "namespaces") and not label_selector_matches(
        criteria.get("namespaceSelector"), namespace_labels(attributes)
    ):
        return False
    if not object_selector_matches(criteria.get("objectSelector"), attributes):
        return False
    if any(rule_matches(rule, attributes) for rule in criteria.get("excludeResourceRules") or []):
        return False
    rules = criteria.get("resourceRules") or []
    return not rules or any(rule_matches(rule, attributes) for rule in rules)


# ----- evaluation ----------------------------------------------------------------------


def with_variables(
    spec: Mapping[str, Any], context: Mapping[str, Any], run: Callable[[str, Mapping[str, Any]], Any]
) -> tuple[JsonObj, dict[str, str]]:
    """The context with ``variables`` evaluated in order over it, and the error text of
    each variable that failed (composition.go: a failing variable surfaces only where it
    is used)."""
    variables: JsonObj = {}
    variable_errors: dict[str, str] = {}
    context = {**context, "variables": variables}
    for variable in spec.get("variables") or []:
        name = variable["name"]
        try:
            variables[name] = run(variable["expression"], context)
        except UnsupportedExpression:
            raise
        except Exception as exc:
            variable_errors[name] = (
                f'composited variable "{name}" fails to evaluate: {error_text(exc, variable_errors)}'
            )
    return context, variable_errors


class MatchResult(NamedTuple):
    matches: bool
    error: str | None = None  # only under failurePolicy Fail


def match_conditions(
    conditions: Sequence[Mapping[str, Any]],
    context: Mapping[str, Any],
    *,
    fail: bool,
    run: Callable[[str, Mapping[str, Any]], Any],
    variable_errors: Mapping[str, str] | None = None,
) -> MatchResult:
    """webhook/matchconditions/matcher.go ``Match``: any condition false skips, whatever
    errors the others had; otherwise errors are the aggregated error under Fail and a
    skip under Ignore. ``context`` should carry no namespaceObject (``Match`` passes
    none)."""
    errors = []
    for condition in conditions:
        expression = condition["expression"]
        try:
            result = run(expression, context)
        except UnsupportedExpression:
            raise
        except Exception as exc:
            errors.append(f"expression '{expression}' resulted in error: {error_text(exc, variable_errors)}")
            continue
        if result is False:
            return MatchResult(False)
    if errors:
        if not fail:
            return MatchResult(False)
        # utilerrors.NewAggregate: one error reads as itself, several as "[a, b]".
        return MatchResult(False, errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return MatchResult(True)


class _Decision(NamedTuple):
    message: str
    reason: str  # "" for an evaluation error (reported as Invalid)


def _denials(policies: Policies, spec: Mapping[str, Any], context: JsonObj, fail: bool) -> list[_Decision]:
    """validator.go ``Validate`` for one binding and param: the denials, in validation order."""
    conditions_context, condition_errors = with_variables(
        spec, {**context, "namespaceObject": None}, policies.run
    )
    matched = match_conditions(
        spec.get("matchConditions") or [],
        conditions_context,
        fail=fail,
        run=policies.run,
        variable_errors=condition_errors,
    )
    if matched.error is not None:
        return [_Decision(matched.error, "")]
    if not matched.matches:
        return []
    context, variable_errors = with_variables(spec, context, policies.run)
    denials = []
    for validation in spec.get("validations") or []:
        expression = validation["expression"]
        try:
            result = policies.run(expression, context)
        except UnsupportedExpression:
            raise
        except Exception as exc:
            if fail:
                denials.append(
                    _Decision(
                        f"expression '{expression}' resulted in error: {error_text(exc, variable_errors)}",
                        "",
                    )
                )
            continue
        if result is True:
            continue
        message = ""
        if validation.get("messageExpression"):
            try:
                evaluated = policies.run(validation["messageExpression"], context)
            except UnsupportedExpression:
                raise
            except Exception:
                evaluated = None
            if isinstance(evaluated, str):
                message = evaluated.strip()
                if len(message.encode()) > _MAX_MESSAGE_BYTES or "\n" in message:
                    message = ""
        if not message and validation.get("message"):
            message = str(validation["message"]).strip()
        if not message:
            message = f"failed expression: {expression.strip()}"
        denials.append(_Decision(message, str(validation.get("reason") or "Invalid")))
    return denials


class Verdict(NamedTuple):
    # The Status to answer with, or None: admitted.
    denial: JsonObj | None
    # Texts of ``Warning`` headers (bindings with validationActions Warn).
    warnings: tuple[str, ...] = ()


def _denial_status(
    attributes: AdmissionAttributes, policy: str, binding: str, decision: _Decision
) -> JsonObj:
    text = f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {decision.message}"
    name = resource_name(attributes)
    reason = decision.reason or "Invalid"
    return status_object(
        _REASON_CODES.get(reason, 422),
        f'{qualified_resource(attributes)} "{name}" is forbidden: {text}',
        reason=reason,
        details=resource_details(attributes.group, attributes.resource, name, causes=[text]),
    )


def bindings_of(policy_name: str, bindings: Mapping[str, JsonObj]) -> list[tuple[str, JsonObj]]:
    """A policy's bindings, by name (a real server lists them in its informer's order)."""
    return sorted(
        (name, binding)
        for name, binding in bindings.items()
        if (binding.get("spec") or {}).get("policyName") == policy_name
    )


def admit(policies: Policies, attributes: AdmissionAttributes, params: ParamSource | None = None) -> Verdict:
    """Run every loaded ValidatingAdmissionPolicy on a write (validating/dispatcher.go
    ``Dispatch``); ``params`` looks up the objects of a policy's paramKind."""
    if attributes.group == "admissionregistration.k8s.io" and attributes.resource in EXEMPT_RESOURCES:
        return Verdict(None)
    context: JsonObj = {
        "object": attributes.object,
        "oldObject": attributes.old_object,
        "request": admission_request(attributes),
        "params": None,
        "namespaceObject": attributes.namespace_object if attributes.namespace else None,
    }
    denied: list[JsonObj] = []
    warnings: list[str] = []
    for policy_name, policy in sorted(policies.policies.items()):
        bindings = bindings_of(policy_name, policies.bindings)
        spec = policy.get("spec") or {}
        if not bindings or not matches(spec.get("matchConstraints"), attributes):
            continue
        fail = (spec.get("failurePolicy") or "Fail") == "Fail"
        for binding_name, binding in bindings:
            binding_spec = binding.get("spec") or {}
            if binding_spec.get("matchResources") and not matches(binding_spec["matchResources"], attributes):
                continue
            try:
                params_found = collect_params(spec, binding_spec, attributes.namespace, params)
            except ParamConfigurationError as exc:
                # dispatcher.go addConfigError: whatever the validationActions.
                if fail:
                    decision = _Decision(f"failed to configure binding: {exc}", "")
                    denied.append(_denial_status(attributes, policy_name, binding_name, decision))
                continue
            actions: Sequence[str] = binding_spec.get("validationActions") or []
            for param in params_found:
                param_context = {**context, "params": param_view(param, spec, wrapped=True)}
                for decision in _denials(policies, spec, param_context, fail):
                    if "Deny" in actions:
                        denied.append(_denial_status(attributes, policy_name, binding_name, decision))
                    if "Warn" in actions:
                        warnings.append(
                            f"Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding "
                            f"'{binding_name}': {decision.message}"
                        )
    return Verdict(denied[0] if denied else None, tuple(warnings))
