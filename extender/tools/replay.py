"""The ``replay`` command: re-decide captured filter calls, offline or against a server.

Offline (``--cluster-file``) each capture is decided again by this version against the
captured state; with ``--url`` it is sent to a running extender (marked with the replay
header, so a capturing server does not capture it again). Exit status 0 when every
decision is unchanged, 1 when some changed, 2 on bad input or a URL that is not an
extender.
"""

from __future__ import annotations

import argparse
import asyncio
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from extender.capture.format import REPLAY_HEADER, Capture, state_fingerprint
from extender.capture.replay import (
    capture_files,
    captured_state,
    compare,
    load_capture,
    redecide,
)
from extender.documents import read_failure
from extender.policy_file import load_policy
from extender.tools.inputs import read_cluster_file
from extender.tools.output import UsageError, guarded


def _check_url(url: str) -> None:
    """Refuse a --url that cannot name an extender, before any capture is sent."""
    scheme, separator, _ = url.partition("://")
    if not separator:
        raise UsageError(f"--url {url}: the scheme is missing: start it with http:// or https://")
    if scheme.lower() not in ("http", "https"):
        raise UsageError(f"--url {url}: {scheme}:// is not supported: use http:// or https://")
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError as exc:
        raise UsageError(f"--url {url}: not a URL ({exc})") from None
    if not host:
        raise UsageError(f"--url {url}: no host")


def _is_filter_result(answer: Any) -> bool:
    return isinstance(answer, dict) and "Error" in answer and ("NodeNames" in answer or "Nodes" in answer)


async def _post_all(url: str, captures: Sequence[Capture]) -> list[dict[str, Any]]:
    """POST each captured request to a running extender; its answers, in order.

    Each request carries REPLAY_HEADER, so a capturing server does not capture it
    again. A URL that has no filter verb (404, 405) or answers 200 with something that
    is not an ExtenderFilterResult is not an extender at all: a UsageError, not a
    changed decision per capture.
    """
    endpoint = url.rstrip("/") + "/filter"
    headers = {"Content-Type": "application/json", REPLAY_HEADER: "1"}
    answers: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        for capture in captures:
            try:
                async with session.post(endpoint, data=capture.request_json, headers=headers) as response:
                    body = await response.read()
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                # A timeout's str() is empty: its type names the reason then.
                reason = str(exc).strip() or type(exc).__name__
                raise UsageError(f"cannot reach the extender at {endpoint}: {reason}") from None
            if response.status in (404, 405):
                raise UsageError(
                    f"{url} is not a RuntimeClass extender (HTTP {response.status}): POST {endpoint}"
                )
            try:
                answer = orjson.loads(body) if response.status == 200 else None
            except orjson.JSONDecodeError:
                answer = None
            if response.status == 200 and not _is_filter_result(answer):
                raise UsageError(
                    f"{url} is not a RuntimeClass extender (HTTP 200): POST {endpoint} did not answer "
                    "with an ExtenderFilterResult"
                )
            if not isinstance(answer, dict):
                text = body.decode("utf-8", "replace")[:200]
                answer = {"Error": f"HTTP {response.status}: {text}"}
            answers.append(answer)
    return answers


@guarded
def run_replay(args: argparse.Namespace) -> int:
    if args.url:
        _check_url(args.url)
    directory = Path(args.dir)
    if directory.is_file():
        # iterdir() would say "[Errno 20] Not a directory".
        raise UsageError(
            f"{directory} is a file: replay takes the capture directory (serve --capture-dir), "
            "the one holding the capture-*.json files"
        )
    try:
        paths = capture_files(directory)
    except OSError as exc:
        raise UsageError(f"capture directory {directory}: {read_failure(exc, want='directory')}") from None
    if not paths:
        raise UsageError(f"no capture files (capture-*.json) in {directory}")
    captures = [load_capture(path) for path in paths]
    policy = load_policy(args.policy_file)

    if args.url:
        against = f"the extender at {args.url}"
        answers = asyncio.run(_post_all(args.url, captures))
        fingerprint = None
    elif args.cluster_file:
        against = f"cluster file {args.cluster_file}"
        state = read_cluster_file(args.cluster_file)
        answers = [redecide(c, state, policy) for c in captures]
        fingerprint = state_fingerprint(state.nodes, state.runtime_classes)
    else:
        against = "the captured state"
        answers = [redecide(c, captured_state(c), policy) for c in captures]
        fingerprint = None

    changed = 0
    other_state = 0
    for capture, answer in zip(captures, answers, strict=True):
        if fingerprint is not None and capture.fingerprint != fingerprint:
            other_state += 1
        changes = compare(capture.response, answer)
        if not changes:
            continue
        changed += 1
        rc = capture.runtime_class_name or "<none>"
        print(f"CHANGED {capture.path.name}  pod {capture.pod_name or '<unnamed>'}  RuntimeClass {rc}")
        for line in changes:
            print(f"  {line}")
    summary = f"replayed {len(captures)} capture(s) against {against}: {len(captures) - changed} unchanged, {changed} changed"
    if fingerprint is not None:
        summary += (
            f" ({other_state} captured against a different state than the file's, fingerprint {fingerprint})"
        )
    print(summary)
    return 1 if changed else 0
