"""Mutating admission webhooks, called as kube-apiserver 1.36 calls them.

Opt-in (``FakeApiServer(call_webhooks=True)``): the MutatingWebhookConfigurations stored
in the fake are read at each write and their webhooks called over HTTPS. Validating
webhooks are never called (ValidatingWebhookConfigurations are stored, nothing more).

Mirrored from staging/src/k8s.io/apiserver/pkg/admission/:

- Order (configuration/mutating_webhook_manager.go): configurations by name, each one's
  webhooks in their order; a webhook is known by ``<configuration>/<webhook>/<n>``.
  Writes of webhook configurations and admission policies are exempt
  (plugin/webhook/predicates/rules/rules.go ``IsExemptAdmissionConfigurationResource``).
  CREATE, UPDATE and DELETE are sent (plugin/webhook/mutating/plugin.go; a DELETE with
  ``object`` null and ``oldObject`` the stored object, registry/rest/delete.go).
- Whether a webhook is called (plugin/webhook/generic/webhook.go ``ShouldCallHook``), on
  the object as mutated so far: ``namespaceSelector`` (the request's Namespace's labels,
  or the object's for a Namespace itself; never for other cluster-scoped resources),
  ``objectSelector`` (the new or the old object's labels), ``rules`` (operations,
  apiGroups, apiVersions, resources with subresources, scope; exact matching only, no
  ``matchPolicy: Equivalent`` conversion), then ``matchConditions`` (CEL, the webhook
  environment: ``object``, ``oldObject``, ``request``, ``namespaceObject`` null; any false
  skips; errors under ``failurePolicy: Fail`` refuse the request with
  ``apierrors.NewForbidden``: 403, ``<resource> "<name>" is forbidden: <errors>``).
- The call (plugin/webhook/mutating/dispatcher.go ``callAttrMutatingHook``): in a dry
  run, a webhook whose ``sideEffects`` is not None or NoneOnDryRun is not called and the
  request fails with 400 ``admission webhook "<name>" does not support dry run``
  (webhook/errors/statuserror.go; whatever the failurePolicy). The request is an
  AdmissionReview v1 built as request/admissionreview.go ``CreateV1AdmissionReview``
  builds it (compare tests/data/admission/plugin-off/03-pods.json and 04-pods.json, what
  kube-apiserver 1.36.2 sent): a fresh ``uid``, ``kind``, ``resource``,
  ``subResource``, ``requestKind``, ``requestResource``, ``requestSubResource``,
  ``name`` (empty, so absent, for a create by generateName), ``namespace``,
  ``operation``, ``userInfo``, ``object``, ``oldObject``, ``dryRun`` and ``options``
  (CreateOptions, UpdateOptions, DeleteOptions). It is POSTed with
  ``?timeout=<timeoutSeconds>s`` (default 10), within that timeout, to
  ``https://<service>.<namespace>.svc:<port><path>`` (port default 443) verifying the
  served certificate against the ``caBundle`` for the server name
  ``<service>.<namespace>.svc`` (util/webhook/client.go ``hookClientConfig``), or to
  ``clientConfig.url``. The fake has no Service resolution: a test maps each service to
  a local address (``FakeApiServer.webhook_addresses[(namespace, name, port)] = (host,
  port)``); a service it has no address for is answered with a 500 naming it.
- The answer (request/admissionreview.go ``VerifyAdmissionResponse``): an AdmissionReview
  v1 whose ``response.uid`` is the request's; ``patch`` and ``patchType`` together;
  ``warnings`` passed on as ``Warning`` headers (also when it denies); not allowed: the
  webhook's ``status`` with ``admission webhook "<name>" denied the request: <message>``
  (or ``: <reason>``, or `` without explanation``), code 400 when it gave none below 400
  (statuserror.go ``ToStatusErr``); allowed with a base64 JSONPatch: applied with
  json-patch v4 (``json_patch.py``) and defaulted; a patch that does not apply, a failed
  ``test`` included, is a 500 ``Internal error occurred: <error>`` whatever the
  failurePolicy, as is a patch of a DELETE.
- A call that fails (util/webhook/error.go ``ErrCallingWebhook``: unreachable, timed out,
  an invalid answer): under Fail the request fails with 500 InternalError ``Internal
  error occurred: failed calling webhook "<name>": failed to call webhook: Post
  "<url>?timeout=<n>s": <error>``; under Ignore the webhook is passed over. A refused
  connection reads ``dial tcp <address>: connect: connection refused`` and a timeout
  ``context deadline exceeded``, as Go words them; a certificate the caBundle does not
  trust reads ``tls: failed to verify certificate: x509: certificate signed by unknown
  authority``; other transport errors, an HTTP error status and an undecodable answer
  carry the fake's own wording after ``failed to call webhook:``.
- Reinvocation: ``mutating_policy.py`` (``ReinvocationContext.webhooks``): a webhook
  whose patch changed the object asks for the second round and marks the ``IfNeeded``
  webhooks called before it; in the second round only marked webhooks are called, after
  marking every remembered one if the object changed since the plugin's last output.

Not mirrored: AdmissionReview v1beta1 (a webhook accepting only it is answered with a
500), the typed round trip of the patched object, audit annotations, the request's own
deadline.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import posixpath
import ssl
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import aiohttp
import orjson

from tests.support.apiserver.admission_policy import (
    AdmissionAttributes,
    PolicyError,
    UnsupportedExpression,
    admission_request,
    label_selector_matches,
    match_conditions,
    namespace_labels,
    object_selector_matches,
    qualified_resource,
    rule_matches,
)
from tests.support.apiserver.cel_env import compiled, execute
from tests.support.apiserver.defaults import apply_defaults
from tests.support.apiserver.json_patch import JsonPatchError, apply_patch, json_equal
from tests.support.apiserver.mutating_policy import ReinvocationContext
from tests.support.apiserver.objects import resource_details, status_object

JsonObj = dict[str, Any]
# (namespace, service name, port) -> (host, port) to dial.
Resolver = Callable[[str, str, int], tuple[str, int] | None]

_EXEMPT_KINDS = (
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)
_DEFAULT_TIMEOUT_SECONDS = 10  # admissionregistration/v1 SetDefaults_MutatingWebhook


class WebhookNotEmulated(PolicyError):
    """A webhook call the fake cannot make as a real server would (answered with a 500)."""


@dataclass(frozen=True)
class Webhook:
    """One webhook of a stored MutatingWebhookConfiguration."""

    uid: str  # "<configuration>/<webhook>/<n>"
    configuration: str
    spec: JsonObj

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def fail(self) -> bool:
        return (self.spec.get("failurePolicy") or "Fail") == "Fail"


def webhooks_in_order(configurations: Sequence[Mapping[str, Any]]) -> list[Webhook]:
    """mutating_webhook_manager.go ``getMutatingWebhookConfigurations``."""
    hooks = []
    for configuration in sorted(configurations, key=lambda c: str((c.get("metadata") or {}).get("name", ""))):
        configuration_name = str((configuration.get("metadata") or {}).get("name", ""))
        seen: dict[str, int] = {}
        for spec in configuration.get("webhooks") or []:
            name = str(spec.get("name", ""))
            hooks.append(
                Webhook(f"{configuration_name}/{name}/{seen.get(name, 0)}", configuration_name, spec)
            )
            seen[name] = seen.get(name, 0) + 1
    return hooks


class WebhookVerdict(NamedTuple):
    # The object as mutated (the one given when nothing changed it).
    object: JsonObj | None
    # The Status to answer with, or None.
    denial: JsonObj | None = None
    # Warning header texts the webhooks answered with.
    warnings: tuple[str, ...] = ()


class _CallingError(Exception):
    """util/webhook/error.go ``ErrCallingWebhook``: subject to the failurePolicy."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(f'failed calling webhook "{webhook}": {reason}')


class _StatusError(Exception):
    """A Status the request fails with, whatever the failurePolicy."""

    def __init__(self, status: JsonObj) -> None:
        super().__init__(status["message"])
        self.status = status


def internal_error(message: str) -> JsonObj:
    """apierrors.NewInternalError."""
    return status_object(
        500,
        f"Internal error occurred: {message}",
        reason="InternalError",
        details={"causes": [{"message": message}]},
    )


def _bad_request(message: str) -> JsonObj:
    return status_object(400, message, reason="BadRequest")


def _rejection(webhook: str, result: Any) -> JsonObj:
    """webhook/errors/statuserror.go ``ToStatusErr``, as the Status is then written."""
    result = dict(result) if isinstance(result, Mapping) else {}
    denied_by = f'admission webhook "{webhook}" denied the request'
    code = result.get("code") if isinstance(result.get("code"), int) else 0
    status = result.get("status") if result.get("status") not in (None, "", "Success") else "Failure"
    if result.get("message"):
        message = f"{denied_by}: {result['message']}"
    elif result.get("reason"):
        message = f"{denied_by}: {result['reason']}"
    else:
        message = f"{denied_by} without explanation"
    answer: JsonObj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": result.get("metadata") or {},
        "status": status,
        "message": message,
    }
    if result.get("reason"):
        answer["reason"] = result["reason"]
    if result.get("details"):
        answer["details"] = result["details"]
    answer["code"] = max(code, 400)
    return answer


def _typed_first(obj: JsonObj | None) -> JsonObj | None:
    # A Go object serializes kind and apiVersion first.
    if obj is None:
        return None
    head: JsonObj = {k: obj[k] for k in ("kind", "apiVersion") if k in obj}
    return {**head, **{k: v for k, v in obj.items() if k not in head}}


def admission_review(uid: str, attributes: AdmissionAttributes, options: Mapping[str, Any] | None) -> JsonObj:
    """request/admissionreview.go ``CreateV1AdmissionReview`` as JSON (admission/v1 field
    order and omitempty): the CEL ``request`` (admission_policy.admission_request, the
    same fields) with its uid, the objects (kind and apiVersion first, as Go writes
    them) and the options."""
    request = admission_request(attributes)
    request["uid"] = uid  # its first field already
    dry_run = request.pop("dryRun")
    request["object"] = _typed_first(attributes.object)
    request["oldObject"] = _typed_first(attributes.old_object)
    request["dryRun"] = dry_run
    request["options"] = dict(options) if options is not None else None
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def _is_exempt(attributes: AdmissionAttributes) -> bool:
    group, _, kind = attributes.kind
    return group == "admissionregistration.k8s.io" and kind in _EXEMPT_KINDS


def _should_call(hook: Webhook, attributes: AdmissionAttributes) -> bool:
    """webhook.go ``ShouldCallHook``: whether to call (raises _StatusError when its
    matchConditions fail to evaluate under Fail)."""
    spec = hook.spec
    if (attributes.namespace or attributes.resource == "namespaces") and not label_selector_matches(
        spec.get("namespaceSelector"), namespace_labels(attributes)
    ):
        return False
    if not object_selector_matches(spec.get("objectSelector"), attributes):
        return False
    if not any(rule_matches(rule, attributes) for rule in spec.get("rules") or []):
        return False
    conditions = spec.get("matchConditions") or []
    if not conditions:
        return True
    context = {
        "object": attributes.object,
        "oldObject": attributes.old_object,
        "request": admission_request(attributes),
        "namespaceObject": None,
    }
    matched = match_conditions(conditions, context, fail=hook.fail, run=_run_condition)
    if matched.error is not None:
        # apierrors.NewForbidden(resource, attr.GetName(), err): the name as requested.
        resource = qualified_resource(attributes)
        subject = f'{resource} "{attributes.name}"' if attributes.name else resource
        details = resource_details(attributes.group, attributes.resource, attributes.name)
        raise _StatusError(
            status_object(
                403, f"{subject} is forbidden: {matched.error}", reason="Forbidden", details=details
            )
        )
    return matched.matches


def _run_condition(expression: str, context: Mapping[str, Any]) -> Any:
    try:
        program = compiled(expression)
    except Exception as exc:
        raise UnsupportedExpression(
            f"the webhook match condition {expression!r} cannot be compiled by the cel package "
            f"the fake API server evaluates CEL with: {exc}"
        ) from exc
    return execute(program, expression, context)


class _Endpoint(NamedTuple):
    url: str  # as a real server names it in errors, without the timeout
    host: str  # the address dialled
    port: int
    path: str
    server_name: str
    host_header: str


def _endpoint(hook: Webhook, resolve: Resolver) -> _Endpoint:
    """util/webhook/client.go ``hookClientConfig``."""
    config = hook.spec.get("clientConfig") or {}
    service = config.get("service")
    if service:
        namespace, name = str(service.get("namespace", "")), str(service.get("name", ""))
        port = int(service.get("port") or 443)
        # rest.DefaultVersionedAPIPath: path.Join("/", path).
        path = posixpath.normpath("/" + str(service.get("path") or "").lstrip("/"))
        server_name = f"{name}.{namespace}.svc"
        address = resolve(namespace, name, port)
        if address is None:
            raise WebhookNotEmulated(
                f'webhook "{hook.name}" calls service {namespace}/{name} port {port}, which the fake API '
                f"server has no address for: set webhook_addresses[({namespace!r}, {name!r}, {port})]"
            )
        return _Endpoint(
            f"https://{server_name}:{port}{path}",
            address[0],
            address[1],
            path,
            server_name,
            f"{server_name}:{port}",
        )
    url = config.get("url")
    if not url:
        reason = (
            f'failed calling webhook "{hook.name}": webhook configuration must have either service or URL'
        )
        raise _CallingError(hook.name, f"could not get REST client: {reason}")
    parts = urlsplit(str(url))
    port = parts.port or 443
    host = parts.hostname or ""
    path = parts.path or "/"
    return _Endpoint(str(url), host, port, path, host, parts.netloc)


def _transport_error(exc: BaseException, endpoint: _Endpoint) -> str:
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        return "context deadline exceeded"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        certificate_error = exc.certificate_error
        verify = getattr(certificate_error, "verify_message", "") or str(certificate_error)
        if "local issuer" in verify or "self-signed" in verify or "self signed" in verify:
            return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        return f"tls: failed to verify certificate: {verify}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"dial tcp {endpoint.host}:{endpoint.port}: connect: connection refused"
        return f"dial tcp {endpoint.host}:{endpoint.port}: {exc.os_error}"
    return str(exc) or type(exc).__name__


async def _post(hook: Webhook, endpoint: _Endpoint, review: JsonObj) -> Any:
    """The POST, its decoded answer; _CallingError as ``failed to call webhook: ...``."""
    timeout = int(hook.spec.get("timeoutSeconds") or _DEFAULT_TIMEOUT_SECONDS)
    shown = f"{endpoint.url}{'&' if '?' in endpoint.url else '?'}timeout={timeout}s"
    bundle = (hook.spec.get("clientConfig") or {}).get("caBundle")
    try:
        cadata = base64.b64decode(bundle).decode() if bundle else None
        context = ssl.create_default_context(cadata=cadata)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
        raise _CallingError(
            hook.name, f"could not get REST client: unable to load root certificates: {exc}"
        ) from None
    context.set_alpn_protocols(["http/1.1"])
    headers = {
        "Host": endpoint.host_header,
        "User-Agent": "kube-apiserver-admission",
        "Accept": "application/json, */*",
        "Content-Type": "application/json",
    }
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.post(
                f"https://{endpoint.host}:{endpoint.port}{endpoint.path}",
                params={"timeout": f"{timeout}s"},
                data=orjson.dumps(review),
                headers=headers,
                ssl=context,
                server_hostname=endpoint.server_name,
            ) as response,
        ):
            body = await response.read()
            status = response.status
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise _CallingError(
            hook.name, f'failed to call webhook: Post "{shown}": {_transport_error(exc, endpoint)}'
        ) from None
    if not 200 <= status < 300:
        raise _CallingError(
            hook.name,
            f"failed to call webhook: the webhook answered HTTP {status}: {body[:200].decode(errors='replace')}",
        )
    try:
        return json.loads(body)
    except ValueError as exc:
        raise _CallingError(hook.name, f"failed to call webhook: the answer is not JSON: {exc}") from None


def _verified(hook: Webhook, uid: str, answer: Any) -> JsonObj:
    """``VerifyAdmissionResponse`` for a mutating webhook's AdmissionReview v1."""

    def invalid(reason: str) -> _CallingError:
        return _CallingError(hook.name, f"received invalid webhook response: {reason}")

    if not isinstance(answer, dict):
        raise invalid("unexpected response type")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise invalid("webhook response was absent")
    if response.get("uid", "") != uid:
        raise invalid(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
    api_version, kind = str(answer.get("apiVersion", "")), str(answer.get("kind", ""))
    if (api_version, kind) != ("admission.k8s.io/v1", "AdmissionReview"):
        raise invalid(
            f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        )
    has_patch, patch_type = bool(response.get("patch")), response.get("patchType")
    if has_patch and patch_type is None:
        raise invalid("webhook returned response.patch but not response.patchType")
    if not has_patch and patch_type is not None:
        raise invalid("webhook returned response.patchType but not response.patch")
    if patch_type == "":
        raise invalid('webhook returned invalid response.patchType of ""')
    return response


async def _call(
    hook: Webhook,
    attributes: AdmissionAttributes,
    options: Mapping[str, Any] | None,
    resolve: Resolver,
    warnings: list[str],
) -> JsonObj | None:
    """dispatcher.go ``callAttrMutatingHook``: the object after the webhook's patch (the
    same one when it sent none)."""
    spec = hook.spec
    if attributes.dry_run:
        side_effects = spec.get("sideEffects")
        if side_effects is None:
            raise _CallingError(hook.name, "Webhook SideEffects is nil")
        if side_effects not in ("None", "NoneOnDryRun"):
            raise _StatusError(_bad_request(f'admission webhook "{hook.name}" does not support dry run'))
    versions = [v for v in spec.get("admissionReviewVersions") or [] if v in ("v1", "v1beta1")]
    if not versions:
        raise _CallingError(
            hook.name,
            "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)",
        )
    if versions[0] != "v1":
        raise WebhookNotEmulated(
            f'webhook "{hook.name}" would be sent an AdmissionReview {versions[0]}; the fake API server sends v1 only'
        )
    uid = str(uuid.uuid4())
    endpoint = _endpoint(hook, resolve)
    response = _verified(hook, uid, await _post(hook, endpoint, admission_review(uid, attributes, options)))
    warnings.extend(str(w) for w in response.get("warnings") or [])
    if not response.get("allowed"):
        raise _StatusError(_rejection(hook.name, response.get("status")))
    if not response.get("patch"):
        return attributes.object
    try:
        operations = json.loads(base64.b64decode(response["patch"], validate=True))
    except (binascii.Error, ValueError) as exc:
        raise _CallingError(hook.name, f"received undecodable patch in webhook response: {exc}") from None
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise _CallingError(
            hook.name,
            "received undecodable patch in webhook response: json: cannot unmarshal into Go value of type jsonpatch.Patch",
        )
    if not operations:
        return attributes.object
    if attributes.object is None:
        raise _StatusError(
            internal_error(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not supported for this operation'
            )
        )
    if response.get("patchType") != "JSONPatch":
        raise _CallingError(hook.name, f'unsupported patch type "{response.get("patchType")}"')
    try:
        patched = apply_patch(attributes.object, operations)
    except JsonPatchError as exc:
        raise _StatusError(internal_error(str(exc))) from None
    if not isinstance(patched, dict):
        raise WebhookNotEmulated(
            f'webhook "{hook.name}" replaced the whole object by a non-object; a real server fails decoding it '
            "with an internal error the fake does not word"
        )
    apply_defaults(attributes.kind, patched)
    return patched


async def dispatch(
    hooks: Sequence[Webhook],
    attributes: AdmissionAttributes,
    *,
    options: Mapping[str, Any] | None,
    resolve: Resolver,
    reinvocation: ReinvocationContext,
) -> WebhookVerdict:
    """One round of the MutatingAdmissionWebhook plugin (dispatcher.go ``Dispatch``)."""
    if _is_exempt(attributes):
        return WebhookVerdict(attributes.object)
    books = reinvocation.webhooks
    if reinvocation.is_reinvoke and not json_equal(books.last_output, attributes.object):
        books.require_reinvoking_previously_invoked()
    current = attributes.object
    warnings: list[str] = []
    try:
        for hook in hooks:
            view = replace(attributes, object=current)
            try:
                if not _should_call(hook, view):
                    continue
            except _StatusError as exc:
                return WebhookVerdict(attributes.object, exc.status, tuple(warnings))
            if reinvocation.is_reinvoke and hook.uid not in books.reinvoke:
                # A webhook is never called for the first time in the second round.
                continue
            error: Exception | None = None
            after = current
            try:
                after = await _call(hook, view, options, resolve, warnings)
            except (_CallingError, _StatusError) as exc:
                error = exc
            if error is None and not json_equal(after, current):
                books.require_reinvoking_previously_invoked()
                reinvocation.should_reinvoke = True
            if hook.spec.get("reinvocationPolicy") == "IfNeeded":
                books.previously_invoked.add(hook.uid)
            if error is None:
                current = after
                continue
            if isinstance(error, _CallingError):
                if not hook.fail:
                    continue
                return WebhookVerdict(attributes.object, internal_error(str(error)), tuple(warnings))
            assert isinstance(error, _StatusError)
            return WebhookVerdict(attributes.object, error.status, tuple(warnings))
        return WebhookVerdict(current, None, tuple(warnings))
    finally:
        # The deferred SetLastWebhookInvocationOutput (only its success matters).
        books.last_output = copy.deepcopy(current)


__all__ = [
    "Resolver",
    "Webhook",
    "WebhookNotEmulated",
    "WebhookVerdict",
    "admission_review",
    "dispatch",
    "internal_error",
    "webhooks_in_order",
]
