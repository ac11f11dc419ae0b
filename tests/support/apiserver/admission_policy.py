"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) admission as kube-apiserver
runs it, as a pure function over plain manifests (dicts); CEL is evaluated by the ``cel``
package (cel-rust's bindings, PyPI common-expression-language).

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
  here.
- The denial (dispatcher.go, admission/errors.go ``NewForbidden``): the first denial in
  policy-name then binding-name order (a real server's order among several denying
  policies is unspecified), as ``<resource[.group]> "<name>" is forbidden:
  ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request:
  <message>``, reason and code from the decision, the message again as the one cause.
- The CEL context (plugin/cel/activation.go ``newActivation``, condition.go
  ``CreateAdmissionRequest``): ``object`` (null for DELETE), ``oldObject`` (null for
  CREATE), ``params`` (null), ``namespaceObject`` (null for cluster-scoped requests),
  ``variables``, and ``request`` with uid, kind, resource, requestKind,
  requestResource, operation, userInfo, dryRun always present and subResource,
  requestSubResource, name and namespace only when not empty (omitempty), so
  ``has(request.subResource)`` is false for the object itself. Not provided:
  ``request.options``, ``authorizer``, ``paramKind``/``paramRef`` (refused when loaded).

The ``cel`` package, with its cel-go-like extension functions (``cel.stdlib``: the
strings, lists, math, sets and base64 libraries Kubernetes' CEL environment also has),
treats the JSON as CEL does: None is ``null``, ``has(m.k)`` is false for an absent key
and true for one whose value is null, ``k in m`` tests a map's keys, an error in one
operand of ``||``/``&&`` is absorbed when the other decides. A missing map key raises
KeyError, reported as CEL's ``no such key: <key>``; other evaluation errors keep the
package's own wording. Where it falls short of a real
server, the fake says so instead of deciding: it cannot parse CEL's optional syntax
(``obj.?field.orValue(x)``), so a policy using it is refused when loaded, naming the
expression (write ``has()`` instead); and an expression that calls a function it lacks
(Kubernetes' ``authorizer``, ``quantity()``, ``string()`` of a bool...) raises
``UnsupportedExpression`` when it runs, which the server answers with a 500 naming the
expression, never a denial or an admission a real server would not give.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import cel
from cel.stdlib import STDLIB_FUNCTIONS

from tests.support.apiserver.objects import status_object
from tests.support.apiserver.rbac import UserInfo

JsonObj = dict[str, Any]

API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
# plugin/policy/generic/plugin.go admissionResources: never admitted by API-defined policies.
_EXEMPT_RESOURCES = (
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
)
# apiserver/pkg/apis/cel/config.go MaxEvaluatedMessageExpressionSizeBytes.
_MAX_MESSAGE_BYTES = 5 * 1024
# dispatcher.go reasonToCode.
_REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}


class PolicyError(ValueError):
    """A policy or binding the fake API server cannot load, naming what and why."""


class UnsupportedExpression(PolicyError):
    """An expression the ``cel`` package cannot evaluate though a real server would
    (a function or variable it does not provide)."""


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


# ----- the manifests -------------------------------------------------------------------


@dataclass
class Policies:
    """The ValidatingAdmissionPolicies and their bindings admission runs (as loaded)."""

    policies: dict[str, JsonObj] = field(default_factory=dict)
    bindings: dict[str, JsonObj] = field(default_factory=dict)
    _programs: dict[str, Any] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return bool(self.policies or self.bindings)

    def copy(self) -> Policies:
        return Policies(dict(self.policies), dict(self.bindings), dict(self._programs))

    def add(self, manifest: Mapping[str, Any]) -> None:
        """Add or replace one policy or binding; PolicyError if the fake cannot run it
        (an expression the ``cel`` package cannot parse, params)."""
        kind = manifest.get("kind")
        name = (manifest.get("metadata") or {}).get("name")
        if manifest.get("apiVersion") != API_VERSION or kind not in POLICY_KINDS:
            raise PolicyError(
                f"not a ValidatingAdmissionPolicy manifest: {manifest.get('apiVersion')}/{kind}"
            )
        if not name:
            raise PolicyError(f"{kind} without metadata.name")
        spec = manifest.get("spec") or {}
        if kind == "ValidatingAdmissionPolicyBinding":
            if not spec.get("policyName"):
                raise PolicyError(f'{kind} "{name}": spec.policyName is required')
            if spec.get("paramRef"):
                raise PolicyError(f'{kind} "{name}": paramRef is not supported by the fake API server')
            self.bindings[name] = copy.deepcopy(dict(manifest))
            return
        if spec.get("paramKind"):
            raise PolicyError(f'{kind} "{name}": paramKind is not supported by the fake API server')
        programs = {}
        for path, expression in _expressions(spec):
            try:
                programs[expression] = cel.compile(expression)
            except Exception as exc:  # the package raises ValueError on a parse error
                raise PolicyError(
                    f'{kind} "{name}": {path} {expression!r} cannot be compiled by the cel package '
                    f"the fake API server evaluates CEL with: {exc}"
                ) from exc
        self._programs.update(programs)
        self.policies[name] = copy.deepcopy(dict(manifest))

    def run(self, expression: str, context: Mapping[str, Any]) -> Any:
        """Evaluate one of the loaded expressions; UnsupportedExpression where the
        ``cel`` package lacks a name the expression uses."""
        try:
            return self._programs[expression].execute(cel.Context(dict(context), functions=STDLIB_FUNCTIONS))
        except RuntimeError as exc:
            if str(exc).startswith("Undefined variable or function"):
                raise UnsupportedExpression(
                    f"the cel package the fake API server evaluates CEL with cannot evaluate {expression!r}: {exc}"
                ) from exc
            raise


def _expressions(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    for section, keys in (
        ("matchConditions", ("expression",)),
        ("variables", ("expression",)),
        ("validations", ("expression", "messageExpression")),
    ):
        for index, item in enumerate(spec.get(section) or []):
            for key in keys:
                if item.get(key):
                    found.append((f"spec.{section}[{index}].{key}", str(item[key])))
    return found


# ----- matching ------------------------------------------------------------------------


def _label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
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


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    if not isinstance(obj, Mapping):
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


def _rule_matches(rule: Mapping[str, Any], attributes: AdmissionAttributes) -> bool:
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


def matches(criteria: Mapping[str, Any] | None, attributes: AdmissionAttributes) -> bool:
    """matching.go ``Matches`` for a policy's matchConstraints or a binding's matchResources."""
    criteria = criteria or {}
    # A cluster-scoped request other than of a namespace is never exempted by namespace.
    namespace_labels = _labels(attributes.namespace_object)
    if (attributes.namespace or attributes.resource == "namespaces") and not _label_selector_matches(
        criteria.get("namespaceSelector"), namespace_labels
    ):
        return False
    selector = criteria.get("objectSelector")
    if selector and not (
        (attributes.object is not None and _label_selector_matches(selector, _labels(attributes.object)))
        or (
            attributes.old_object is not None
            and _label_selector_matches(selector, _labels(attributes.old_object))
        )
    ):
        return False
    if any(_rule_matches(rule, attributes) for rule in criteria.get("excludeResourceRules") or []):
        return False
    rules = criteria.get("resourceRules") or []
    return not rules or any(_rule_matches(rule, attributes) for rule in rules)


# ----- evaluation ----------------------------------------------------------------------


class _Decision(NamedTuple):
    message: str
    reason: str  # "" for an evaluation error (reported as Invalid)


def _error_text(exc: Exception, variable_errors: Mapping[str, str]) -> str:
    if isinstance(exc, KeyError) and exc.args:
        key = exc.args[0]
        if isinstance(key, str) and key in variable_errors:
            # An erroring variable is left out of ``variables``, so using it is a
            # missing key named after it.
            return variable_errors[key]
        return f"no such key: {key}"
    return str(exc)


def _denials(policies: Policies, spec: Mapping[str, Any], context: JsonObj, fail: bool) -> list[_Decision]:
    """validator.go ``Validate`` for one binding: the denials, in validation order."""
    variables: JsonObj = {}
    variable_errors: dict[str, str] = {}
    context = {**context, "variables": variables}
    for variable in spec.get("variables") or []:
        name = variable["name"]
        try:
            variables[name] = policies.run(variable["expression"], context)
        except UnsupportedExpression:
            raise
        except Exception as exc:
            variable_errors[name] = (
                f'composited variable "{name}" fails to evaluate: {_error_text(exc, variable_errors)}'
            )
    errors = []
    for condition in spec.get("matchConditions") or []:
        expression = condition["expression"]
        try:
            result = policies.run(expression, context)
        except UnsupportedExpression:
            raise
        except Exception as exc:
            errors.append(f"expression '{expression}' resulted in error: {_error_text(exc, variable_errors)}")
            continue
        if result is False:
            return []
    if errors:
        if not fail:
            return []
        # utilerrors.NewAggregate: one error reads as itself, several as "[a, b]".
        return [_Decision(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]", "")]

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
                        f"expression '{expression}' resulted in error: {_error_text(exc, variable_errors)}",
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
    name = attributes.name
    if not name:
        meta = (attributes.object or {}).get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or "Unknown"
    qualified = f"{attributes.resource}.{attributes.group}" if attributes.group else attributes.resource
    reason = decision.reason or "Invalid"
    details: JsonObj = {"name": name}
    if attributes.group:
        details["group"] = attributes.group
    details["kind"] = attributes.resource
    details["causes"] = [{"message": text}]
    return status_object(
        _REASON_CODES.get(reason, 422),
        f'{qualified} "{name}" is forbidden: {text}',
        reason=reason,
        details=details,
    )


def admit(policies: Policies, attributes: AdmissionAttributes) -> Verdict:
    """Run every loaded policy on a write (dispatcher.go ``Dispatch``)."""
    if attributes.group == "admissionregistration.k8s.io" and attributes.resource in _EXEMPT_RESOURCES:
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
        bindings = sorted(
            (name, binding)
            for name, binding in policies.bindings.items()
            if (binding.get("spec") or {}).get("policyName") == policy_name
        )
        spec = policy.get("spec") or {}
        if not bindings or not matches(spec.get("matchConstraints"), attributes):
            continue
        fail = (spec.get("failurePolicy") or "Fail") == "Fail"
        for binding_name, binding in bindings:
            binding_spec = binding.get("spec") or {}
            if binding_spec.get("matchResources") and not matches(binding_spec["matchResources"], attributes):
                continue
            actions: Sequence[str] = binding_spec.get("validationActions") or []
            for decision in _denials(policies, spec, context, fail):
                if "Deny" in actions:
                    denied.append(_denial_status(attributes, policy_name, binding_name, decision))
                if "Warn" in actions:
                    warnings.append(
                        f"Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding "
                        f"'{binding_name}': {decision.message}"
                    )
    return Verdict(denied[0] if denied else None, tuple(warnings))
