"""--request-timeout as kubectl reads it, and what a value means for one request.

kubectl's parser is client-go ``clientcmd.ParseTimeout``
(staging/src/k8s.io/client-go/tools/clientcmd/helpers.go): a whole number is seconds,
anything else a Go duration (``time.ParseDuration``).
"""

from __future__ import annotations

import argparse

import pytest

from extender.cluster.snapshot import CONNECT_TIMEOUT_SECONDS, client_timeout, describe_failure
from extender.kube.defaults import DEFAULT_REQUEST_TIMEOUT
from extender.tools import arguments
from extender.tools.arguments import parse_request_timeout


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),  # no limit
        ("5", 5.0),  # a whole number is seconds
        ("1s", 1.0),
        ("2m", 120.0),
        ("3h", 10800.0),
        ("1m30s", 90.0),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("250us", 0.00025),
        ("250\u00b5s", 0.00025),
        ("0s", 0.0),
        (".5s", 0.5),
    ],
)
def test_durations_kubectl_accepts(text: str, seconds: float) -> None:
    assert parse_request_timeout(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "1.5", "1x", "s", "1s2", "-1s", "-5", "1 s", "1d"])
def test_what_is_no_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"1s, 2m, 3h"):
        parse_request_timeout(text)


def test_the_default_is_what_the_api_module_allows_a_request() -> None:
    assert parse_request_timeout(arguments.DEFAULT_REQUEST_TIMEOUT) == DEFAULT_REQUEST_TIMEOUT


def test_a_timeout_bounds_the_whole_request_and_zero_only_the_connect() -> None:
    bounded = client_timeout(2.5)
    assert bounded.total == 2.5
    unbounded = client_timeout(0)
    assert unbounded.total is None and unbounded.sock_read is None
    assert unbounded.sock_connect == CONNECT_TIMEOUT_SECONDS


@pytest.mark.parametrize(
    ("exc", "timeout", "expected"),
    [
        (TimeoutError(), 1.0, "no answer within 1s (--request-timeout)"),
        (TimeoutError(), 0.5, "no answer within 0.5s (--request-timeout)"),
        (TimeoutError(), 0.0, "no answer within the connect timeout (--request-timeout)"),
        (ConnectionResetError(), 1.0, "ConnectionResetError"),
        (OSError("Connection refused"), 1.0, "Connection refused"),
    ],
)
def test_a_failure_is_never_described_by_nothing(exc: BaseException, timeout: float, expected: str) -> None:
    assert describe_failure(exc, timeout) == expected
