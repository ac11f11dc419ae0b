"""Kubernetes' and client-go's defaults that several layers need, in a module that imports nothing.

The CLI's parsers and ``extender.settings`` read these without loading aiohttp or
pydantic (``bench/cli_startup.py``); the client, the pod views and the pod webhook use
the same values.

The settings check the ``--leader-elect-*`` durations with ``LEADER_JITTER_FACTOR`` and
the election hands it to kubernetes-asyncio; importing ``extender.leader.election`` for
a check would load the whole generated API client.
"""

from __future__ import annotations

from typing import Final

# What the API server writes into spec.schedulerName when a pod names none
# (SetDefaults_PodSpec, kubernetes/kubernetes pkg/apis/core/v1/defaults.go).
DEFAULT_SCHEDULER: Final = "default-scheduler"

# Items per LIST page (client-go's pager default is 500: k8s.io/client-go/tools/pager).
DEFAULT_PAGE_SIZE: Final = 500

# Connect timeout, and the whole-request timeout of one non-streaming request (a LIST
# page, a patch): the extender's own choice, far above what a healthy API server takes.
DEFAULT_REQUEST_TIMEOUT: Final = 30.0

# client-go's JitterFactor (tools/leaderelection/leaderelection.go): the renew deadline
# must exceed the retry period by this factor.
LEADER_JITTER_FACTOR: Final = 1.2
