"""The explain endpoints: ``GET /explain/runtimeclasses/{name}`` and ``POST /explain``.

``GET`` explains a pod with no tolerations of its own that names the RuntimeClass (what
the class alone allows); an unknown class is a 404. ``POST`` takes a Pod (JSON, as
``kubectl get pod -o json`` prints it, or just ``{"spec": {...}}``): its own tolerations
count, and a RuntimeClass it names that does not exist is explained like the filter
treats it (every node fails with ``RuntimeClass "<name>" not found``). Both answer 503
until the cluster state is synced. A body that is not a Pod (another kind, or an
ExtenderArgs meant for ``/filter``) is a 400 saying what it is. Errors have the one
shape of every endpoint (``extender.http.app.errors_as_json``). The decision itself is
``extender.explain``.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web
from pydantic import ValidationError

from extender.cluster.objects import ObjectError, describe_validation_error
from extender.explain import explain_nodes, explanation_to_json, runtime_class_pod
from extender.http.bodies import RequestRefused, read_body, require_json
from extender.http.keys import HIDDEN_NODES, POLICY, STATE
from extender.protocol import PodModel, check_pod_document
from policies.objects import PodView


def explain_routes() -> list[web.RouteDef]:
    """Routes reading the app's state and policy."""

    async def answer(request: web.Request, pod: PodView) -> web.Response:
        state = request.app[STATE]
        unsynced = state.unsynced_kinds()
        if unsynced:
            raise RequestRefused(
                503, "cluster state not synced", f"not listed from the API server yet: {', '.join(unsynced)}"
            )
        # Every predicate on every node is ~100 ms at 15,000 nodes: too long to hold
        # the loop that answers kube-scheduler. The views are immutable, so a list of
        # them taken here (the watch may change the store meanwhile) is safe to read
        # in a worker thread.
        name = pod.runtime_class_name
        runtime_class = state.runtime_classes.get(name) if name else None
        nodes = list(state.nodes.values())
        policy = request.app[POLICY]
        # What the filter has seen that no node list shows: the scheduler's sampling.
        hidden = request.app[HIDDEN_NODES].message_for(runtime_class.name if runtime_class else None)

        def work() -> bytes:
            explanation = explain_nodes(pod, runtime_class, nodes, policy)
            return orjson.dumps(explanation_to_json(explanation, warnings=[hidden] if hidden else []))

        return web.Response(body=await asyncio.to_thread(work), content_type="application/json")

    async def explain_runtime_class(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        state = request.app[STATE]
        if state.runtime_classes.synced and name not in state.runtime_classes:
            raise RequestRefused(404, "RuntimeClass not found", f'RuntimeClass "{name}" not found')
        return await answer(request, runtime_class_pod(name))

    async def explain_pod(request: web.Request) -> web.Response:
        require_json(request)
        body = await read_body(request)
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            document = None  # the model's validation below says where the JSON breaks
        try:
            if isinstance(document, dict):
                check_pod_document(document)  # another kind, or an ExtenderArgs meant for /filter
            pod = PodModel.model_validate_json(body).view()
        except ObjectError as exc:
            raise RequestRefused(400, "malformed Pod", str(exc)) from None
        except ValidationError as exc:
            raise RequestRefused(400, "malformed Pod", describe_validation_error(exc, "pod")) from None
        return await answer(request, pod)

    return [
        web.get("/explain/runtimeclasses/{name}", explain_runtime_class, allow_head=False),
        web.post("/explain", explain_pod),
    ]
