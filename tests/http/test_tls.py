"""HTTPS and client-certificate authentication, with throwaway CAs from trustme."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from extender import cli
from extender.cluster.file_source import load_cluster_file
from extender.http.app import create_app
from extender.http.tls import (
    CertificateReloader,
    TLSFiles,
    server_context,
    tls_files,
)
from extender.http.wiring import attach_certificate_reloader
from extender.policy_file import load_policy
from extender.settings import SettingsError, default_serve_settings
from tests.support.paths import REPO

EXAMPLE_CLUSTER = REPO / "deploy" / "examples" / "cluster.yaml"
EXAMPLE_REQUEST = REPO / "deploy" / "examples" / "filter-request.json"

# What a refused handshake looks like from the client's side: an alert during the
# handshake (TLS 1.2) or on the first read (TLS 1.3), or the peer closing.
REFUSED = (aiohttp.ClientError, ssl.SSLError, ConnectionError)


@dataclass
class Pki:
    ca: trustme.CA
    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: trustme.LeafCert
    other_client_cert: trustme.LeafCert


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    ca_file = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    server_cert = tmp_path / "tls.crt"
    server_key = tmp_path / "tls.key"
    for i, pem in enumerate(server.cert_chain_pems):
        pem.write_to_path(str(server_cert), append=i > 0)
    server.private_key_pem.write_to_path(str(server_key))
    other_ca = trustme.CA()
    return Pki(
        ca=ca,
        ca_file=ca_file,
        server_cert=server_cert,
        server_key=server_key,
        client_cert=ca.issue_cert("runtimeclass-scheduler"),
        other_client_cert=other_ca.issue_cert("runtimeclass-scheduler"),
    )


def _client_context(pki: Pki, cert: trustme.LeafCert | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert is not None:
        cert.configure_cert(context)
    return context


async def _serve(aiohttp_server: Any, pki: Pki, *, client_ca: bool) -> Any:
    files = TLSFiles(str(pki.server_cert), str(pki.server_key), str(pki.ca_file) if client_ca else None)
    app = create_app(state=load_cluster_file(EXAMPLE_CLUSTER), policy=load_policy())
    return await aiohttp_server(app, ssl=server_context(files))


async def _post_filter(port: int, context: ssl.SSLContext) -> tuple[int, Any]:
    body = EXAMPLE_REQUEST.read_bytes()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"https://127.0.0.1:{port}/filter",
            data=body,
            headers={"Content-Type": "application/json"},
            ssl=context,
        ) as response,
    ):
        return response.status, await response.json()


async def test_https_serves_filter(aiohttp_server: Any, pki: Pki) -> None:
    server = await _serve(aiohttp_server, pki, client_ca=False)
    status, answer = await _post_filter(server.port, _client_context(pki, None))
    assert status == 200
    assert sorted(answer["NodeNames"]) == ["gvisor-1", "gvisor-2"]  # in any order


async def test_plain_http_is_not_served_on_the_https_port(aiohttp_server: Any, pki: Pki) -> None:
    server = await _serve(aiohttp_server, pki, client_ca=False)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(REFUSED):
            async with session.get(f"http://127.0.0.1:{server.port}/healthz") as response:
                # Some stacks answer plain HTTP on a TLS port with a 400; none with a 200.
                assert response.status != 200
                raise aiohttp.ClientError("answered plain HTTP with an error status")


async def test_client_certificate_from_the_right_ca_is_accepted(aiohttp_server: Any, pki: Pki) -> None:
    server = await _serve(aiohttp_server, pki, client_ca=True)
    status, answer = await _post_filter(server.port, _client_context(pki, pki.client_cert))
    assert status == 200
    assert answer["Error"] == ""


async def test_no_client_certificate_is_refused(aiohttp_server: Any, pki: Pki) -> None:
    server = await _serve(aiohttp_server, pki, client_ca=True)
    with pytest.raises(REFUSED):
        await _post_filter(server.port, _client_context(pki, None))


async def test_client_certificate_from_another_ca_is_refused(aiohttp_server: Any, pki: Pki) -> None:
    server = await _serve(aiohttp_server, pki, client_ca=True)
    with pytest.raises(REFUSED):
        await _post_filter(server.port, _client_context(pki, pki.other_client_cert))


def test_client_ca_makes_certificates_required(pki: Pki) -> None:
    with_ca = server_context(TLSFiles(str(pki.server_cert), str(pki.server_key), str(pki.ca_file)))
    assert with_ca.verify_mode == ssl.CERT_REQUIRED
    without = server_context(TLSFiles(str(pki.server_cert), str(pki.server_key)))
    assert without.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"tls_cert_file": "tls.crt"}, "tls-key-file"),
        ({"tls_key_file": "tls.key"}, "tls-cert-file"),
        ({"client_ca_file": "ca.crt"}, "client-ca-file"),
    ],
)
def test_incomplete_tls_settings_name_the_setting(settings: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        tls_files(default_serve_settings(**settings))


def test_no_tls_settings_means_plain_http() -> None:
    assert tls_files(default_serve_settings()) is None


def _serve_args(*extra: str) -> list[str]:
    return ["serve", "--cluster-file", str(EXAMPLE_CLUSTER), "--port", "0", *extra]


def test_cli_refuses_cert_without_key(pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(_serve_args("--tls-cert-file", str(pki.server_cert))) == 2
    err = capsys.readouterr().err
    assert "tls-key-file" in err
    assert "Traceback" not in err


def test_cli_refuses_unreadable_files(tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.crt"
    assert cli.main(_serve_args("--tls-cert-file", str(missing), "--tls-key-file", str(pki.server_key))) == 2
    err = capsys.readouterr().err
    assert "tls-cert-file" in err and str(missing) in err

    not_a_ca = tmp_path / "not-a-ca.pem"
    not_a_ca.write_text("this is not a certificate\n")
    args = _serve_args(
        "--tls-cert-file",
        str(pki.server_cert),
        "--tls-key-file",
        str(pki.server_key),
        "--client-ca-file",
        str(not_a_ca),
    )
    assert cli.main(args) == 2
    assert "client-ca-file" in capsys.readouterr().err


def test_cli_refuses_a_key_that_does_not_match(
    tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    other_key = tmp_path / "other.key"
    pki.client_cert.private_key_pem.write_to_path(str(other_key))
    assert (
        cli.main(_serve_args("--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(other_key))) == 2
    )
    assert "tls-key-file" in capsys.readouterr().err


def test_serve_command_speaks_mutual_tls(pki: Pki) -> None:
    """The real console command, flags as deploy/overlays/tls passes them."""
    command = [
        sys.executable,
        "-m",
        "extender",
        *_serve_args(
            "--host",
            "127.0.0.1",
            "--log-format",
            "json",
            "--tls-cert-file",
            str(pki.server_cert),
            "--tls-key-file",
            str(pki.server_key),
            "--client-ca-file",
            str(pki.ca_file),
        ),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO) as process:
        try:
            assert process.stderr is not None
            port = None
            for line in process.stderr:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # not a log line (a warning printed by the interpreter)
                if entry.get("msg") == "serving":
                    assert entry["scheme"] == "https"
                    assert entry["clientCertificates"] is True
                    port = int(entry["listen"].rsplit(":", 1)[1])
                    break
            assert port is not None, "the server never said it was serving"
            status, answer = asyncio.run(_post_filter(port, _client_context(pki, pki.client_cert)))
            assert status == 200
            assert sorted(answer["NodeNames"]) == ["gvisor-1", "gvisor-2"]  # in any order
            with pytest.raises(REFUSED):
                asyncio.run(_post_filter(port, _client_context(pki, None)))
        finally:
            process.terminate()
            process.wait(timeout=30)


def _write_leaf(cert: trustme.LeafCert, cert_path: Path, key_path: Path) -> None:
    # Write-then-rename, as the kubelet's atomic Secret update does.
    for target, pems in ((cert_path, cert.cert_chain_pems), (key_path, [cert.private_key_pem])):
        scratch = target.with_suffix(".new")
        scratch.write_bytes(b"".join(pem.bytes() for pem in pems))
        scratch.replace(target)


async def test_rotated_certificate_is_served_without_restart(
    aiohttp_server: Any, pki: Pki, tmp_path: Path
) -> None:
    files = TLSFiles(str(pki.server_cert), str(pki.server_key))
    context = server_context(files)
    app = create_app(state=load_cluster_file(EXAMPLE_CLUSTER), policy=load_policy())
    # The background reloader starts and stops with the app (its interval is long:
    # this test drives the checks itself).
    attach_certificate_reloader(app, context, files, interval=3600)
    server = await aiohttp_server(app, ssl=context)
    reloader = CertificateReloader(context, files)
    old_ca = _client_context(pki, None)
    assert (await _post_filter(server.port, old_ca))[0] == 200
    assert reloader.check() is False  # nothing changed

    new_ca = trustme.CA()
    new_ca_file = tmp_path / "new-ca.crt"
    new_ca.cert_pem.write_to_path(str(new_ca_file))
    _write_leaf(new_ca.issue_cert("127.0.0.1"), pki.server_cert, pki.server_key)
    assert reloader.check() is True

    assert (await _post_filter(server.port, ssl.create_default_context(cafile=str(new_ca_file))))[0] == 200
    with pytest.raises(REFUSED):
        await _post_filter(server.port, old_ca)


async def test_unloadable_new_files_keep_the_old_certificate(
    aiohttp_server: Any, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    files = TLSFiles(str(pki.server_cert), str(pki.server_key))
    context = server_context(files)
    server = await _serve_context(aiohttp_server, context)
    reloader = CertificateReloader(context, files)
    # A new certificate whose key has not arrived yet: a pair that does not match.
    new_leaf = trustme.CA().issue_cert("127.0.0.1")
    pki.server_cert.write_bytes(b"".join(pem.bytes() for pem in new_leaf.cert_chain_pems))
    with caplog.at_level(logging.WARNING, logger="extender.tls"):
        assert reloader.check() is False
    assert "keeping the current certificate" in caplog.text
    assert (await _post_filter(server.port, _client_context(pki, None)))[0] == 200
    # Once the key arrives the pair loads.
    new_leaf.private_key_pem.write_to_path(str(pki.server_key))
    assert reloader.check() is True


async def _serve_context(aiohttp_server: Any, context: ssl.SSLContext) -> Any:
    app = create_app(state=load_cluster_file(EXAMPLE_CLUSTER), policy=load_policy())
    return await aiohttp_server(app, ssl=context)
