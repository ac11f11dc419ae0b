"""MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA and on by default in
kube-apiserver 1.36) as a pure function over plain manifests (dicts), and the
reinvocation state the mutating admission chain shares with the webhooks
(``webhooks.py``).

Mirrored from staging/src/k8s.io/apiserver/pkg/admission/:

- Which writes (plugin/policy/mutating/plugin.go ``NewPlugin``): CREATE and UPDATE (and
  CONNECT, which the fake does not serve); never DELETE, which has no object. Writes of
  the policy resources themselves are exempt (plugin/policy/generic/plugin.go).
- Which invocations, in which order (plugin/policy/generic/policy_dispatcher.go
  ``Dispatch``): for every policy with a binding whose ``matchConstraints`` match, each
  binding whose ``matchResources`` match, each param ``CollectParams`` gives (see
  ``admission_policy.py``): one invocation per (policy, binding, param). A real server
  takes policies in the order of a Go map (policy_source.go ``calculatePolicyData``
  ranges over ``policiesToBindings``), i.e. unspecified; the fake takes them by policy
  name, then binding name, then param namespace/name. Policies whose patches do not
  commute should not rely on any order.
- Each invocation (plugin/policy/mutating/dispatcher.go ``dispatchInvocations``), on the
  object as mutated so far: ``matchConditions`` (matcher.go: false skips, errors are a
  policy error under Fail and a skip under Ignore, with params but no namespaceObject),
  then each of ``mutations[]`` in order: the JSONPatch expression is evaluated with
  ``object``, ``oldObject``, ``params`` (the param without apiVersion and kind),
  ``namespaceObject``, ``request`` and ``variables``, and the patch applied to the object
  as json_patch.go ``Patch`` does it (``json_patch.py``: evanphx/json-patch v4):
  a failed ``test`` operation leaves the object as it was, silently ("If a json patch
  fails a test operation, the patch must not be applied"); any other failure, and an
  expression that fails to evaluate, is a policy error ``JSON Patch: <error>`` or
  ``expression '<expression>' resulted in error: <error>`` with reason Invalid, and the
  next mutation of the same invocation still runs. The patched object is defaulted
  again (``defaults.py``). Patch values come out of the ``cel`` package as maps without
  an order; their keys are sorted, as Go's encoder writes map keys.
- Errors (generic/policy_dispatcher.go ``Dispatch``): under the policy's
  ``failurePolicy: Ignore`` dropped; under ``Fail`` (the default) the request is
  refused with ``admission.NewForbidden``'s Status: code 403, the reason of the first
  error (Invalid for a matchCondition or mutation error, Forbidden for a binding's
  configuration error), the message of the first error only, ``policy '<policy>' with
  binding '<binding>' denied request: <error>``, each error a cause. A binding's
  configuration error reads ``failed to configure binding: <error>``.
- Reinvocation (dispatcher.go with reinvocationcontext.go, admission/reinvocation.go,
  and plugin/webhook/mutating/dispatcher.go with its own reinvocationcontext.go): the
  mutating chain (MutatingAdmissionPolicy, then MutatingAdmissionWebhook, the order of
  pkg/kubeapiserver/options/plugins.go ``AllOrderedPlugins``, where the in-tree mutating
  plugins, ServiceAccount, Priority, DefaultTolerationSeconds, RuntimeClass..., come
  first; the fake has none of them) runs once, and once more (never a third time) if
  any plugin asked for it. A policy invocation
  that changed the object asks, and marks every ``reinvocationPolicy: IfNeeded``
  invocation that ran before it in this round for the second round; an ``IfNeeded``
  invocation is remembered once it ran (its matchConditions passed), whether it changed
  anything or not; and when any patch of the round applied (even one that changed
  nothing, or whose ``test`` failed: the plugin marks the object dirty either way), every
  remembered ``IfNeeded`` invocation is marked and the second round asked for. In the
  second round only marked invocations run (their matchConditions first), and if the
  object changed since the plugin's previous output (a webhook changed it), the
  remembered ones are marked first. Webhooks keep the same books under their own
  name, but only a webhook whose patch changed the object asks. So an ``IfNeeded``
  policy whose own patch applied runs twice, and a ``Never`` policy runs once.

Not mirrored: ``patchType: ApplyConfiguration`` (refused when loaded); the typed
round trip a real server makes after each patch (a field the Go type does not have is
an error there, an empty map or list disappears there, quantities are canonicalized
there), and its strict decoding errors; ``matchPolicy: Equivalent``; the CEL cost budget.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from tests.support.apiserver.admission_policy import (
    EXEMPT_RESOURCES,
    AdmissionAttributes,
    ParamConfigurationError,
    ParamSource,
    Policies,
    PolicyConfigurationError,
    admission_request,
    bindings_of,
    collect_params,
    match_conditions,
    matches,
    param_view,
    resource_name,
    with_variables,
)
from tests.support.apiserver.cel_env import JSON_PATCH_FIELDS, UnsupportedExpression, error_text
from tests.support.apiserver.defaults import apply_defaults
from tests.support.apiserver.json_patch import JsonPatchError, apply_patch, json_equal
from tests.support.apiserver.objects import resource_details, status_object

JsonObj = dict[str, Any]


@dataclass
class PluginReinvocation:
    """One plugin's books (policyReinvokeContext, webhookReinvokeContext)."""

    # The object the plugin last returned; unset (Go's nil) until it first runs.
    last_output: JsonObj | None = None
    previously_invoked: set[Any] = field(default_factory=set)
    reinvoke: set[Any] = field(default_factory=set)

    def require_reinvoking_previously_invoked(self) -> None:
        """``RequireReinvokingPreviouslyInvokedPlugins``."""
        self.reinvoke |= self.previously_invoked
        self.previously_invoked = set()


@dataclass
class ReinvocationContext:
    """admission.ReinvocationContext of one request, shared by the mutating plugins."""

    is_reinvoke: bool = False
    should_reinvoke: bool = False
    policies: PluginReinvocation = field(default_factory=PluginReinvocation)
    webhooks: PluginReinvocation = field(default_factory=PluginReinvocation)


class MutationVerdict(NamedTuple):
    # The object as mutated (the one given when nothing ran).
    object: JsonObj | None
    # The Status to answer with, or None: admitted so far.
    denial: JsonObj | None = None


class _PolicyError(NamedTuple):
    policy: str
    binding: str
    message: str
    reason: str
    fail: bool

    def text(self) -> str:
        # generic.PolicyError.Error(): a policy-level error names no binding.
        if not self.binding:
            return f'policy "{self.policy}" denied request: {self.message}'
        return f"policy '{self.policy}' with binding '{self.binding}' denied request: {self.message}"


class _Invocation(NamedTuple):
    policy: str
    spec: Mapping[str, Any]
    binding: str
    param: JsonObj | None


class _Failed(NamedTuple):
    message: str


def _json_value(value: Any, expression: str) -> Any:
    """A CEL value as the JSON a patch carries (structpb.Value), map keys sorted."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_json_value(item, expression) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _json_value(value[key], expression) for key in sorted(value)}
    raise UnsupportedExpression(
        f"the JSONPatch expression {expression!r} gave a value of type {type(value).__name__} "
        "the fake API server cannot write as JSON (a real server's answer is not known to it)"
    )


def _operations(value: Any, expression: str) -> list[JsonObj]:
    """json_patch.go ``evaluatePatchExpression``: the list of JSONPatch values as
    operations (``from`` only when not empty, ``value`` only when set)."""
    if not isinstance(value, list):
        raise UnsupportedExpression(
            f"the JSONPatch expression {expression!r} gave {type(value).__name__}, not a list of JSONPatch: "
            "a real server's type checker refuses that when the policy is created"
        )
    operations = []
    for item in value:
        if not (isinstance(item, dict) and set(item) <= set(JSON_PATCH_FIELDS)):
            raise UnsupportedExpression(
                f"the JSONPatch expression {expression!r} gave {item!r}, not a JSONPatch: "
                "a real server's type checker refuses that when the policy is created"
            )
        fields = {name: item.get(name, "") for name in ("op", "path", "from")}
        if not all(isinstance(text, str) for text in fields.values()):
            raise UnsupportedExpression(
                f"the JSONPatch expression {expression!r} gave a JSONPatch whose op, path or from is not a string"
            )
        operation: JsonObj = {"op": fields["op"], "path": fields["path"]}
        if fields["from"]:
            operation["from"] = fields["from"]
        if "value" in item:
            operation["value"] = _json_value(item["value"], expression)
        operations.append(operation)
    return operations


def _patched(
    policies: Policies,
    expression: str,
    context: Mapping[str, Any],
    variable_errors: Mapping[str, str],
    obj: JsonObj,
    kind: tuple[str, str, str],
) -> JsonObj | _Failed:
    """json_patch.go ``jsonPatcher.Patch`` and dispatcher.go ``dispatchOne``: the
    patched, defaulted object, or the error."""
    try:
        value = policies.run_patch(expression, context)
    except UnsupportedExpression:
        raise
    except Exception as exc:
        return _Failed(f"expression '{expression}' resulted in error: {error_text(exc, variable_errors)}")
    try:
        patched = apply_patch(obj, _operations(value, expression), null_is_text=True)
    except JsonPatchError as exc:
        if exc.test_failed:
            return copy.deepcopy(obj)
        return _Failed(f"JSON Patch: {exc}")
    if not isinstance(patched, dict):
        raise UnsupportedExpression(
            f"the JSONPatch expression {expression!r} replaced the whole object by a non-object; a real "
            "server fails decoding it with an internal error the fake does not word"
        )
    apply_defaults(kind, patched)
    return patched


def _param_key(param: JsonObj | None) -> tuple[str, str]:
    meta = (param or {}).get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _forbidden(attributes: AdmissionAttributes, errors: Sequence[_PolicyError]) -> JsonObj:
    """generic/policy_dispatcher.go: ``admission.NewForbidden`` with the first error's
    message and reason, every error a cause."""
    texts = [error.text() for error in errors]
    details = resource_details(attributes.group, attributes.resource, resource_name(attributes), causes=texts)
    return status_object(403, texts[0], reason=errors[0].reason or "Forbidden", details=details)


def _dispatch_invocations(
    policies: Policies,
    attributes: AdmissionAttributes,
    invocations: Sequence[_Invocation],
    reinvocation: ReinvocationContext,
    errors: list[_PolicyError],
) -> JsonObj | None:
    """dispatcher.go ``dispatchInvocations``: the object as mutated."""
    books = reinvocation.policies
    current = attributes.object
    if reinvocation.is_reinvoke and not json_equal(books.last_output, current):
        # The object changed since this plugin's last output: by a webhook.
        books.require_reinvoking_previously_invoked()
    namespace_object = attributes.namespace_object
    if not attributes.namespace or attributes.kind == ("", "v1", "Namespace"):
        namespace_object = None
    dirty = reached_mutations = False
    for invocation in invocations:
        spec = invocation.spec
        fail = (spec.get("failurePolicy") or "Fail") == "Fail"
        view = replace(attributes, object=current)
        base: JsonObj = {
            "object": current,
            "oldObject": attributes.old_object,
            "request": admission_request(view),
            "params": param_view(invocation.param, spec, wrapped=False),
        }
        conditions = spec.get("matchConditions") or []
        if conditions:
            context, variable_errors = with_variables(spec, {**base, "namespaceObject": None}, policies.run)
            matched = match_conditions(
                conditions, context, fail=fail, run=policies.run, variable_errors=variable_errors
            )
            if matched.error is not None:
                errors.append(
                    _PolicyError(invocation.policy, invocation.binding, matched.error, "Invalid", fail)
                )
                continue
            if not matched.matches:
                continue
        key = (invocation.policy, invocation.binding, _param_key(invocation.param))
        if reinvocation.is_reinvoke and key not in books.reinvoke:
            continue
        before = current
        for mutation in spec.get("mutations") or []:
            reached_mutations = True
            if current is None:
                continue
            context, variable_errors = with_variables(
                spec, {**base, "object": current, "namespaceObject": namespace_object}, policies.run
            )
            outcome = _patched(
                policies,
                str(mutation["jsonPatch"]["expression"]),
                context,
                variable_errors,
                current,
                attributes.kind,
            )
            if isinstance(outcome, _Failed):
                errors.append(
                    _PolicyError(invocation.policy, invocation.binding, outcome.message, "Invalid", fail)
                )
                continue
            current, dirty = outcome, True
        if not json_equal(before, current):
            books.require_reinvoking_previously_invoked()
            reinvocation.should_reinvoke = True
        if spec.get("reinvocationPolicy") == "IfNeeded":
            books.previously_invoked.add(key)
    if reached_mutations and current is not None and dirty:
        books.require_reinvoking_previously_invoked()
        reinvocation.should_reinvoke = True
    return current


def mutate(
    policies: Policies,
    attributes: AdmissionAttributes,
    *,
    params: ParamSource | None = None,
    reinvocation: ReinvocationContext | None = None,
) -> MutationVerdict:
    """One round of the MutatingAdmissionPolicy plugin on a write (generic
    policy_dispatcher.go ``Dispatch`` with mutating dispatcher.go): the object as
    mutated, or the denial. ``reinvocation`` carries the books across the two rounds of
    one request (a fresh one: the first round)."""
    if attributes.operation not in ("CREATE", "UPDATE") or not policies.mutating_policies:
        return MutationVerdict(attributes.object)
    if attributes.group == "admissionregistration.k8s.io" and attributes.resource in EXEMPT_RESOURCES:
        return MutationVerdict(attributes.object)
    if reinvocation is None:
        reinvocation = ReinvocationContext()
    errors: list[_PolicyError] = []
    invocations: list[_Invocation] = []
    for policy_name, policy in sorted(policies.mutating_policies.items()):
        spec = policy.get("spec") or {}
        bindings = bindings_of(policy_name, policies.mutating_bindings)
        if not bindings or not matches(spec.get("matchConstraints"), attributes):
            continue
        fail = (spec.get("failurePolicy") or "Fail") == "Fail"
        for binding_name, binding in bindings:
            binding_spec = binding.get("spec") or {}
            if binding_spec.get("matchResources") and not matches(binding_spec["matchResources"], attributes):
                continue
            try:
                found = collect_params(spec, binding_spec, attributes.namespace, params, mutating=True)
            except PolicyConfigurationError as exc:
                errors.append(_PolicyError(policy_name, "", f"failed to configure policy: {exc}", "", fail))
                break
            except ParamConfigurationError as exc:
                errors.append(
                    _PolicyError(policy_name, binding_name, f"failed to configure binding: {exc}", "", fail)
                )
                continue
            invocations.extend(_Invocation(policy_name, spec, binding_name, param) for param in found)
    result = attributes.object
    if invocations:
        result = _dispatch_invocations(policies, attributes, invocations, reinvocation, errors)
        # The deferred SetLastPolicyInvocationOutput: the object the plugin returns.
        reinvocation.policies.last_output = copy.deepcopy(result)
    failing = [error for error in errors if error.fail]
    if failing:
        return MutationVerdict(attributes.object, _forbidden(attributes, failing))
    return MutationVerdict(result)
