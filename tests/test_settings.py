"""Settings of ``serve``: one name across flag, environment and config file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import cli
from extender.settings import ENV_PREFIX, SERVE_SETTINGS, SettingsError, default_serve_settings, resolve
from tests.support.docs import fenced_blocks, page, section
from tests.support.paths import REPO

EXAMPLE_CLUSTER = REPO / "deploy" / "examples" / "cluster.yaml"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    yield


def _resolve(argv: list[str], environ: dict[str, str] | None = None) -> dict[str, Any]:
    namespace = cli.build_parser().parse_args(["serve", *argv])
    return resolve(namespace, SERVE_SETTINGS, environ=environ or {})


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "extender.yaml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    values = _resolve([])
    assert values["port"] == 8888
    assert values["host"] == "0.0.0.0"
    assert values["log_level"] == "info"
    assert values["log_format"] == "text"
    assert values["tls_cert_file"] is None
    assert values["client_ca_file"] is None


def test_precedence_flag_over_env_over_config_over_default(tmp_path: Path) -> None:
    config = _config(tmp_path, "port: 1111\nlog-level: warning\nlog-format: json\n")
    env = {"RUNTIMECLASS_EXTENDER_PORT": "2222", "RUNTIMECLASS_EXTENDER_LOG_LEVEL": "error"}
    values = _resolve(["--config", str(config), "--port", "3333"], env)
    assert values["port"] == 3333  # flag
    assert values["log_level"] == "error"  # env over config
    assert values["log_format"] == "json"  # config over default
    assert values["max_body_bytes"] == 256 * 1024 * 1024  # default

    assert _resolve(["--config", str(config)], env)["port"] == 2222
    assert _resolve(["--config", str(config)])["port"] == 1111
    assert _resolve([])["port"] == 8888


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    config = _config(tmp_path, "tls-cert-file: /etc/tls/tls.crt\ntls-key-file: /etc/tls/tls.key\n")
    values = _resolve([], {"RUNTIMECLASS_EXTENDER_CONFIG": str(config)})
    assert values["tls_cert_file"] == "/etc/tls/tls.crt"
    assert values["tls_key_file"] == "/etc/tls/tls.key"


def test_config_values_of_yaml_types_are_parsed_like_text(tmp_path: Path) -> None:
    config = _config(tmp_path, "port: 9000\nmax-body-bytes: 1048576\n")
    values = _resolve(["--config", str(config)])
    assert values["port"] == 9000
    assert values["max_body_bytes"] == 1048576


def _non_default_value(setting: Any) -> str:
    for candidate in (
        "/tmp/somewhere", "1", "2", "json", "debug", "true", "127.0.0.1", "autoscaling/status", "default-scheduler"
    ):
        try:
            if setting.parse(candidate) != setting.default:
                return candidate
        except ValueError:
            continue
    raise AssertionError(f"no sample value for {setting.name}")


def test_every_setting_has_one_name_everywhere(tmp_path: Path) -> None:
    """A value given as --NAME, RUNTIMECLASS_EXTENDER_NAME or NAME: in the file is the same value."""
    for setting in SERVE_SETTINGS:
        raw = _non_default_value(setting)
        expected = setting.parse(raw)
        assert setting.env == ENV_PREFIX + setting.name.upper().replace("-", "_")
        flag_argv = [f"--{setting.name}"] if setting.is_flag else [f"--{setting.name}", raw]
        config = _config(tmp_path, f"{setting.name}: {raw!r}\n")
        by_flag = _resolve(flag_argv)[setting.attr]
        by_env = _resolve([], {setting.env: raw})[setting.attr]
        by_file = _resolve(["--config", str(config)])[setting.attr]
        assert by_flag == by_env == by_file == expected, setting.name


def test_unknown_config_keys_are_rejected(tmp_path: Path) -> None:
    config = _config(tmp_path, "prot: 8080\nport: 8080\n")
    with pytest.raises(SettingsError, match=r"unknown setting.*prot"):
        _resolve(["--config", str(config)])


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = cli.main(["serve", "--cluster-file", str(EXAMPLE_CLUSTER), *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


def test_invalid_flag_fails_at_start_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _main(["--port", "70000"], capsys)
    assert status == 2
    assert "--port" in err and "70000" in err


def test_invalid_env_fails_at_start_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RUNTIMECLASS_EXTENDER_LOG_LEVEL", "loud")
    status, err = _main([], capsys)
    assert status == 2
    assert "RUNTIMECLASS_EXTENDER_LOG_LEVEL" in err and "loud" in err


def test_invalid_config_value_fails_at_start_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "max-body-bytes: -5\n")
    status, err = _main(["--config", str(config)], capsys)
    assert status == 2
    assert "max-body-bytes" in err and str(config) in err


def test_unknown_config_key_fails_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, "log_level: debug\n")  # underscores are not the setting's name
    status, err = _main(["--config", str(config)], capsys)
    assert status == 2
    assert "log_level" in err


@pytest.mark.parametrize("text", ["- port\n- 8080\n", "port: [8080\n"])
def test_malformed_config_file_fails_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    config = _config(tmp_path, text)
    status, err = _main(["--config", str(config)], capsys)
    assert status == 2
    assert str(config) in err


def test_missing_config_file_fails_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    status, err = _main(["--config", str(missing)], capsys)
    assert status == 2
    assert str(missing) in err


def test_help_shows_every_setting_with_its_env_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["serve", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--config" in out and ENV_PREFIX + "CONFIG" in out
    for setting in SERVE_SETTINGS:
        assert f"--{setting.name}" in out, setting.name
        assert setting.env in out, setting.env


def test_every_setting_is_in_the_reference_table() -> None:
    table = section(page("reference.md"), "## Settings of `serve`")
    missing = [s.name for s in SERVE_SETTINGS if f"| `{s.name}` |" not in table]
    assert not missing, f"settings missing from the settings table of docs/reference.md: {missing}"


def test_the_reference_config_file_example(tmp_path: Path) -> None:
    """docs/reference.md's config file: every key is a setting, read as the page says."""
    (block,) = fenced_blocks(section(page("reference.md"), "### Config file (`--config`)"), "yaml")
    values = _resolve(["--config", str(_config(tmp_path, block))])
    shown = yaml.safe_load(block)
    assert shown and {setting.name for setting in SERVE_SETTINGS} >= set(shown)
    for setting in SERVE_SETTINGS:
        if setting.name in shown:
            assert values[setting.attr] == shown[setting.name], setting.name


def test_pod_webhook_routing_and_namespace() -> None:
    values = _resolve([])
    assert values["route_pods_to_scheduler"] is None and values["namespace"] is None
    values = _resolve(
        ["--route-pods-to-scheduler", " runtimeclass-scheduler "],
        environ={"RUNTIMECLASS_EXTENDER_NAMESPACE": "runtimeclass-extender"},
    )
    assert values["route_pods_to_scheduler"] == "runtimeclass-scheduler"
    assert values["namespace"] == "runtimeclass-extender"


@pytest.mark.parametrize(("flag", "value"), [("--route-pods-to-scheduler", "a b"), ("--namespace", "")])
def test_pod_webhook_names_must_be_one_name(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = _main([flag, value], capsys)
    assert status == 2
    assert f"{flag}: invalid value" in err and "must be one name without blanks" in err


# ----- what a new user trips on -----------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("RUNTIMECLASS_EXTENDER_PORT", "abc", "must be a port number between 0 and 65535"),
        ("RUNTIMECLASS_EXTENDER_MAX_BODY_BYTES", "1MB", "must be a positive whole number"),
        ("RUNTIMECLASS_EXTENDER_BODY_READ_TIMEOUT", "5s", "must be a positive number"),
    ],
)
def test_a_number_that_is_not_one_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    expected: str,
) -> None:
    monkeypatch.setenv(variable, value)
    status, err = _main([], capsys)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == f"runtimeclass-extender: error: {variable}: invalid value {value!r}: {expected}"
    # Python's own wording names the parser, not what the setting wants.
    assert "invalid literal" not in err and "could not convert" not in err


@pytest.mark.parametrize("given", ["DEBUG", "Debug", "debug", " WARNING "])
def test_log_level_in_any_case(given: str) -> None:
    assert _resolve(["--log-level", given])["log_level"] == given.strip().lower()
    assert _resolve([], {"RUNTIMECLASS_EXTENDER_LOG_LEVEL": given})["log_level"] == given.strip().lower()


def test_log_format_in_any_case() -> None:
    assert _resolve(["--log-format", "JSON"])["log_format"] == "json"


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("clusterFile", "cluster-file"),
        ("cluster_file", "cluster-file"),
        ("maxBodyBytes", "max-body-bytes"),
        ("prot", "port"),
    ],
)
def test_unknown_config_key_suggests_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, suggestion: str
) -> None:
    config = _config(tmp_path, f"{key}: x\n")
    status, err = _main(["--config", str(config)], capsys)
    assert status == 2
    assert f"unknown setting(s) {key} (did you mean {suggestion}?)" in err


def test_unknown_config_key_without_a_close_setting_gets_no_guess(tmp_path: Path) -> None:
    config = _config(tmp_path, "zzzzzz: 1\n")
    with pytest.raises(SettingsError) as error:
        _resolve(["--config", str(config)])
    assert str(error.value).endswith("unknown setting(s) zzzzzz")


def test_cluster_file_given_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["serve", "--cluster-file", "a.yaml", "--cluster-file", "b.yaml"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--cluster-file given twice: it takes one file" in err


def test_other_flags_given_twice_keep_the_last_as_kubectl_does() -> None:
    # pflag's rule for a single-valued flag; only cluster-file, which reads like
    # kubectl's repeatable -f, is refused.
    assert _resolve(["--port", "1", "--port", "2"])["port"] == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"leader_elect": True},
            "--leader-elect needs a live cluster: the replicas compete for a Lease on the API server, "
            "and --cluster-file has none. Drop one of the two.",
        ),
        (
            {"audit_running_pods": True},
            "--audit-running-pods needs a live cluster: it watches running pods through the API server, "
            "and --cluster-file has none to watch (for a file with pods, run runtimeclass-extender audit "
            "--cluster-file). Drop one of the two.",
        ),
        (
            {"label_nodes": True},
            "--label-nodes needs a live cluster: it writes labels on the nodes through the API server, "
            "and --cluster-file has none. Drop one of the two.",
        ),
        (
            {"webhook_certificate_secret": "s", "admission_port": 9443},
            "webhook-certificate-secret needs a live cluster: the certificates are kept in a Secret and "
            "the webhook configurations on the API server, and --cluster-file has none. Set "
            "admission-tls-cert-file and admission-tls-key-file instead.",
        ),
        (
            {"requeue_pending_pods": True},
            "--requeue-pending-pods needs a live cluster: it watches unscheduled pods and patches them "
            "through the API server, which --cluster-file does not provide. Drop one of the two.",
        ),
    ],
)
def test_what_needs_a_live_cluster_is_refused_with_a_cluster_file(
    overrides: dict[str, Any], message: str
) -> None:
    default_serve_settings(**overrides)  # fine with a live cluster
    with pytest.raises(SettingsError) as error:
        default_serve_settings(cluster_file="cluster.yaml", **overrides)
    assert str(error.value) == message
