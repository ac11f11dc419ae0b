"""The ``filter`` command: answer one captured filter request offline and print the
ExtenderFilterResult, as ``POST /filter`` would."""

from __future__ import annotations

import argparse
import sys

import orjson
from pydantic import ValidationError

from extender.cluster.objects import ObjectError, describe_validation_error
from extender.filtering import decide
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs, pod_instead_of_extender_args
from extender.tools.inputs import empty_input, read_bytes, read_cluster_file
from extender.tools.output import UsageError, guarded


@guarded
def run_filter(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy_file)
    state = read_cluster_file(args.cluster_file)
    body = read_bytes(args.request)
    if not body.strip():
        raise empty_input(args.request, "an ExtenderArgs request (as kube-scheduler POSTs to /filter)")
    try:
        request = ExtenderArgs.model_validate_json(body)
        decision = decide(request, state, policy)
    except ValidationError as exc:
        problem = pod_instead_of_extender_args(body)
        if problem is None:
            problem = f"malformed ExtenderArgs: {describe_validation_error(exc, 'request')}"
        raise UsageError(f"{args.request}: {problem}") from None
    except ObjectError as exc:
        raise UsageError(f"{args.request}: malformed ExtenderArgs: {exc}") from None
    pretty = orjson.dumps(orjson.loads(decision.to_json()), option=orjson.OPT_INDENT_2)
    sys.stdout.buffer.write(pretty + b"\n")
    return 0
