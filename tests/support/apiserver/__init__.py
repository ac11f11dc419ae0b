"""An in-process Kubernetes API server for tests: the real list/watch protocol, no etcd.

No Kubernetes API server can be installed where these tests run, so this package serves
the parts of the API the extender (and its tests) speak, faithfully enough that the
production client code runs unmodified against it through an ordinary kubeconfig file.

What it serves (any registered resource, cluster-scoped or namespaced; by default Nodes,
RuntimeClasses, Pods, Leases, Secrets and both webhook configuration kinds):

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
- Errors are ``Status`` objects (``kind: Status``, ``code``, ``reason``, ``message``).

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

The pytest fixtures ``fake_apiserver`` (started, stopped at teardown) and
``fake_kubeconfig`` (a kubeconfig file for it) live in ``tests.support.apiserver.fixtures``;
tests/conftest.py registers them for every test.
"""

from tests.support.apiserver.objects import make_node, make_pod, make_runtime_class
from tests.support.apiserver.server import (
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
    "make_node",
    "make_pod",
    "make_runtime_class",
    "status_object",
]
