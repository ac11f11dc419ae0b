"""An in-process Kubernetes API server for tests: the real list/watch protocol, no etcd.

No Kubernetes API server can be installed where these tests run, so this package serves
the parts of the API the extender (and its tests) speak, faithfully enough that the
production client code runs unmodified against it through an ordinary kubeconfig file.

What it serves (any registered resource, cluster-scoped or namespaced; by default Nodes,
RuntimeClasses, Pods, Leases, Secrets, Events, ConfigMaps, EndpointSlices and both
webhook configuration kinds):

- ``GET <collection>``: LIST, ordered by namespace/name, with ``limit``/``continue``
  pagination served from a snapshot taken at the first page (like an etcd read at the
  list's revision), ``metadata.resourceVersion``, ``metadata.continue`` and
  ``metadata.remainingItemCount``; ``fieldSelector`` (``metadata.name``,
  ``metadata.namespace``, ``spec.nodeName`` and ``status.phase``, each with ``=``,
  ``==`` or ``!=``; comma-separated terms are ANDed, as in
  ``spec.nodeName!=,status.phase!=Succeeded``) and ``labelSelector`` (equality terms
  only). A watch applies the same selectors: an object that stops matching is
  reported as ``DELETED``, one that starts matching as ``ADDED``.
- ``GET <collection>?watch=1``: WATCH as chunked JSON lines ``{"type", "object"}``,
  replaying history after ``resourceVersion``; without one (or ``"0"``) synthetic
  ``ADDED`` events for the current objects come first. ``allowWatchBookmarks=true``
  adds ``BOOKMARK`` events (periodic, and one just before ``timeoutSeconds`` ends the
  stream cleanly).
- ``GET <collection>/<name>``: one object, or a 404 ``Status``.
- ``PATCH <collection>/<name>`` with ``application/merge-patch+json`` (RFC 7386) or
  ``application/strategic-merge-patch+json`` (lists named in a ``ResourceType``'s
  ``merge_keys`` merge item by item on that key, as the webhooks of both webhook
  configuration kinds do by ``name``; other lists are replaced): bumps the
  resourceVersion and emits ``MODIFIED``. A ``metadata.resourceVersion`` or
  ``metadata.uid`` in the patch is a precondition (409 on mismatch), as on a real server.
- ``POST <collection>`` creates (201; 409 ``AlreadyExists`` for a taken name) and
  ``PUT <collection>/<name>`` replaces, with a ``metadata.resourceVersion`` in the body
  as the precondition (409 ``Conflict`` when stale), as leader election's Leases
  (``coordination.k8s.io/v1``, registered by default) are written.
- ``DELETE <collection>/<name>``: deletes at once (emits ``DELETED``) and answers a
  Success ``Status`` naming it; a DeleteOptions body's ``preconditions`` (``uid``,
  ``resourceVersion``) are checked (409 on a mismatch).
- Subresources: ``GET``/``PUT``/``PATCH <collection>/<name>/status`` of nodes and pods
  (a write changes ``status`` only); ``POST .../pods/<name>/eviction`` (deletes the pod)
  and ``POST .../pods/<name>/binding`` (sets ``spec.nodeName``; 409 if already bound),
  both 201.
- ``?dryRun=All`` on any write (or ``dryRun: [All]`` in DeleteOptions): authorized and
  admitted as the write itself, answered as it would be, nothing stored, no event.
- Errors are ``Status`` objects (``kind: Status``, ``code``, ``reason``, ``message``).

Authentication, RBAC and admission, as kube-apiserver 1.36 enforces them (``rbac.py``,
``admission_policy.py``, ``mutating_policy.py``, ``webhooks.py``, ``json_patch.py``,
``cel_env.py`` and ``defaults.py`` say what is mirrored from where). The default token
is ``kubernetes-admin`` in ``system:masters``, which RBAC always allows; a token of
``token_for``/``write_kubeconfig(user_name=...)`` is that user, and a ServiceAccount's
user name (``system:serviceaccount:<ns>:<name>``) brings that ServiceAccount's groups.
Nothing is authorized until RBAC manifests are ``apply``-ed; from then on every request
is, and a refusal is a 403 worded as kube-apiserver words it.

Admission runs on every write that passes authorization (CREATE for POST, UPDATE for
PUT and every PATCH, DELETE; on the object and its subresources), for every user a
policy matches (the administrator too, as on a real server), in the real order:

1. defaulting of a created object (only a pod's ``spec.schedulerName``:
   ``default-scheduler`` when empty);
2. mutating admission: with ``FakeApiServer(runtimeclass_plugin=True)``, the in-tree
   RuntimeClass admission plugin on a pod create (``runtimeclass_plugin.py``: the
   class's overhead, selector and tolerations merged, a class that does not exist
   refused), as every kube-apiserver runs it unless its flags turn it off; loaded
   MutatingAdmissionPolicies (JSONPatch mutations, with
   params, matchConditions, variables, failurePolicy, reinvocationPolicy), then, if
   ``call_webhooks``, the webhooks of stored MutatingWebhookConfigurations, called over
   HTTPS; run once more when a mutation asks for it, as the real chain reinvokes;
3. for a create: uid, creationTimestamp, and the name of a ``generateName`` create;
4. validating admission: the RuntimeClass plugin's check of the pod's overhead, where it
   runs; loaded ValidatingAdmissionPolicies (with params), which deny with the 422 (or
   the validation's reason) a real server sends. Validating webhooks are never called.
   A loaded ValidatingAdmissionPolicy can be read back by name (``GET
   /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/<name>``).

The object stored (or, in a dry run, answered) is the mutated one. Refusals carry the
real wording and code. What the fake cannot evaluate as a real server would (an
expression using a CEL function the ``cel`` package lacks, a webhook service it has no
address for) is answered with a 500 naming it rather than with a guess.

resourceVersions come from one global counter shared by every resource, like etcd's
revision. Watching or listing from a resourceVersion older than the compaction point
gives ``410 Gone`` (reason ``Expired``): by default as HTTP 200 followed by one
``ERROR`` event carrying the Status (what the watch cache does), or as an HTTP 410
response (``FakeApiServer(gone_as="http")``). A resourceVersion newer than the
server's (e.g. after a restart with a fresh history) gives 504 with the cause
``ResourceVersionTooLarge``, as the watch cache answers after it gives up waiting.

Test controls (plain methods; the data survives ``stop``/``start``)::

    server = FakeApiServer()                   # nodes, runtimeclasses, pods registered
    await server.start()                        # ephemeral port; server.url
    server.write_kubeconfig(tmp_path / "kubeconfig")
    server.add(NODES, make_node("n1", labels={"a": "b"}))
    server.modify(NODES, "n1", lambda obj: obj["metadata"]["labels"].update(a="c"))
    server.put(NODES, obj)                      # add or replace
    server.delete(NODES, "n1")
    server.compact()                            # older resourceVersions now 410
    server.drop_watches()                       # cut every open watch mid-stream
    server.end_watches()                        # end every open watch cleanly
    server.stall_watches(); server.resume_watches()
    server.stall_watches(PODS)                  # only the watches of one resource
    server.send_bookmarks()                     # a BOOKMARK on every bookmark-enabled watch
    server.fail_next(3, status=500)             # the next 3 matching requests fail
    server.fail_next(1, status=429, retry_after=1, verbs={"list"})
    server.fail_next(1, status=410, only_if=lambda r: "continue" in r.query)
    server.token = "rotated"                    # requests must now carry this bearer token
    server.write_kubeconfig(path, user_name="replica-a")  # a token of its own: requests
                                                #   it sends are recorded with user "replica-a"
    await server.stop(); await server.start()   # same port
    await server.restart(fresh_history=True)    # same objects, lower resourceVersions
    server.requests                             # (verb, path, query) of every request
    await server.wait_for_watchers(NODES, 1)    # a bounded wait for connected watches

Authorization and admission controls::

    server.apply(yaml.safe_load_all(text))      # Roles, ClusterRoles and bindings turn RBAC
                                                #   on; Validating- and MutatingAdmission-
                                                #   Policies and bindings run on writes;
                                                #   objects of registered kinds are stored
                                                #   (RuntimeClasses as params, webhook
                                                #   configurations); the rest (e.g.
                                                #   ServiceAccounts) is returned.
                                                #   ValueError, nothing loaded, for what the
                                                #   fake cannot run (CEL ``.?`` syntax, an
                                                #   ApplyConfiguration mutation, a paramKind
                                                #   that is not a registered resource...)
    sa = rbac.service_account("ns", "name")     # "system:serviceaccount:ns:name"
    token = server.token_for(sa)                # a bearer token of that user; with
    server.token_for("ann", groups=["ops"])     #   groups of its own for other users
    server.write_kubeconfig(path, user_name=sa) # the same, as a kubeconfig file
    server.user_info(sa)                        # the UserInfo (name, groups) it authenticates as
    server.rbac = None                          # RBAC off again (allow everything)
    server.admission_policies = admission_policy.Policies()  # no policies again
    rbac.authorize(server.rbac, rbac.Attributes(...))  # the decision, without HTTP
    admission_policy.admit(server.admission_policies, admission_policy.AdmissionAttributes(...),
                           params=lambda api_version, kind: admission_policy.ParamKind(False, [...]))
    mutating_policy.mutate(server.admission_policies, attributes, params=...)  # one round
    server = FakeApiServer(call_webhooks=True)  # call mutating webhooks (off by default:
    server.call_webhooks = True                 #   stored configurations stay inert)
    server.webhook_addresses[("ns", "svc", 443)] = ("127.0.0.1", port)  # where a
                                                #   clientConfig.service is dialled; TLS is
                                                #   verified against its caBundle for
                                                #   "svc.ns.svc" (clientConfig.url: as is)

The pytest fixtures ``fake_apiserver`` (started, stopped at teardown) and
``fake_kubeconfig`` (a kubeconfig file for it) live in ``tests.support.apiserver.fixtures``;
tests/conftest.py registers them for every test.
"""

from tests.support.apiserver import admission_policy, mutating_policy, rbac, webhooks
from tests.support.apiserver.objects import make_node, make_pod, make_runtime_class
from tests.support.apiserver.server import (
    CONFIGMAPS,
    ENDPOINT_SLICES,
    EVENTS,
    LEASES,
    MUTATING_WEBHOOKS,
    NODES,
    PODS,
    RUNTIME_CLASSES,
    SECRETS,
    VALIDATING_WEBHOOKS,
    FakeApiServer,
    ResourceType,
    status_object,
)

__all__ = [
    "CONFIGMAPS",
    "ENDPOINT_SLICES",
    "EVENTS",
    "LEASES",
    "MUTATING_WEBHOOKS",
    "NODES",
    "PODS",
    "RUNTIME_CLASSES",
    "SECRETS",
    "VALIDATING_WEBHOOKS",
    "FakeApiServer",
    "ResourceType",
    "admission_policy",
    "make_node",
    "make_pod",
    "make_runtime_class",
    "mutating_policy",
    "rbac",
    "status_object",
    "webhooks",
]
