"""The explain endpoints: ``GET /explain/runtimeclasses/{name}`` and ``POST /explain``.

``GET`` explains a pod with no tolerations of its own that names the RuntimeClass (what
the class alone allows); an unknown class is a 404. ``POST`` takes a Pod (JSON, as
``kubectl get pod -o json`` prints it, or just ``{"spec": {...}}``): its own tolerations
count, and a RuntimeClass it names that does not exist is explained like the filter
treats it (every node fails with ``RuntimeClass "<name>" not found``). Both answer 503
until the cluster state is synced. The decision itself is ``extender.explain``.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web
from pydantic import ValidationError

from extender.cluster.objects import describe_validation_error
from extender.explain import explain_nodes, explanation_to_json, runtime_class_pod
from extender.http.keys import POLICY, STATE
from extender.protocol import PodModel
from policies.objects import PodView


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def explain_routes() -> list[web.RouteDef]:
    """Routes reading the app's state and policy."""

    async def answer(request: web.Request, pod: PodView) -> web.Response:
        state = request.app[STATE]
        unsynced = state.unsynced_kinds()
        if unsynced:
            return _json({"error": "cluster state not synced", "unsynced": unsynced}, 503)
        # Every predicate on every node is ~100 ms at 15,000 nodes: too long to hold
        # the loop that answers kube-scheduler. The views are immutable, so a list of
        # them taken here (the watch may change the store meanwhile) is safe to read
        # in a worker thread.
        name = pod.runtime_class_name
        runtime_class = state.runtime_classes.get(name) if name else None
        nodes = list(state.nodes.values())
        policy = request.app[POLICY]

        def work() -> bytes:
            return orjson.dumps(explanation_to_json(explain_nodes(pod, runtime_class, nodes, policy)))

        return web.Response(body=await asyncio.to_thread(work), content_type="application/json")

    async def explain_runtime_class(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        state = request.app[STATE]
        if state.runtime_classes.synced and name not in state.runtime_classes:
            return _json({"error": f'RuntimeClass "{name}" not found'}, 404)
        return await answer(request, runtime_class_pod(name))

    async def explain_pod(request: web.Request) -> web.Response:
        if request.content_type != "application/json":
            raise web.HTTPUnsupportedMediaType(
                text=f"Content-Type must be application/json, got {request.content_type or 'none'!r}"
            )
        body = await request.read()
        try:
            pod = PodModel.model_validate_json(body).view()
        except ValidationError as exc:
            return _json({"error": "malformed Pod", "detail": describe_validation_error(exc, "pod")}, 400)
        return await answer(request, pod)

    return [
        web.get("/explain/runtimeclasses/{name}", explain_runtime_class, allow_head=False),
        web.post("/explain", explain_pod),
    ]
