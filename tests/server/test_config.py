"""Configuration: flags > environment > TOML file > defaults, every limit a setting, every mistake named."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from runstate.actors import Limits
from runstate.server.config import LIMIT_DOCS, SETTINGS, ConfigError, load


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "runstate.toml"
    path.write_text(text)
    return str(path)


def test_defaults_are_the_published_ones():
    """With nothing given, the settings are the defaults and every source says so."""
    loaded = load({}, {}, None)
    assert loaded.settings.port == 8080 and loaded.settings.host == "127.0.0.1"
    assert loaded.settings.limits == Limits()
    assert set(loaded.sources.values()) == {"default"}


def test_every_limit_is_a_setting_with_a_flag_a_variable_a_toml_name_and_a_description():
    """A field added to Limits becomes a setting by itself; it still needs a line in LIMIT_DOCS."""
    by_name = {setting.name: setting for setting in SETTINGS}
    for field in fields(Limits):
        setting = by_name[field.name]
        assert setting.limit and setting.flag == "--" + field.name.replace("_", "-")
        assert setting.env == "RUNSTATE_" + field.name.upper() and setting.toml == "limits." + field.name
        assert field.name in LIMIT_DOCS


def test_precedence_flags_over_environment_over_file_over_defaults(tmp_path):
    """The same three settings given at several levels: the highest level wins for each, and the source says which."""
    path = write(tmp_path, 'port = 7001\nlog_format = "text"\n[limits]\nlease_s_max = 100\nwait_ms_max = 1000\n')
    environ = {"RUNSTATE_PORT": "7002", "RUNSTATE_LEASE_S_MAX": "200"}
    loaded = load({"port": "7003"}, environ, path)
    settings = loaded.settings
    assert settings.port == 7003 and loaded.sources["port"] == "--port"
    assert settings.limits.lease_s_max == 200 and loaded.sources["lease_s_max"] == "RUNSTATE_LEASE_S_MAX"
    assert settings.limits.wait_ms_max == 1000 and loaded.sources["wait_ms_max"] == f"{path} [limits] wait_ms_max"
    assert settings.log_format == "text" and loaded.sources["log_format"] == f"{path} log_format"
    assert settings.limits.lease_s_min == 5 and loaded.sources["lease_s_min"] == "default"


def test_the_file_can_come_from_the_environment_and_the_flag_wins(tmp_path):
    """RUNSTATE_CONFIG names a file; --config names another, which is the one read."""
    env_file = write(tmp_path, "port = 7001\n")
    flag_file = tmp_path / "other.toml"
    flag_file.write_text("port = 7002\n")
    assert load({}, {"RUNSTATE_CONFIG": env_file}, None).settings.port == 7001
    assert load({}, {"RUNSTATE_CONFIG": env_file}, str(flag_file)).settings.port == 7002


def test_types_are_converted_from_text_and_booleans_read_as_people_write_them():
    """Numbers, floats and booleans from variables; empty variables count as unset."""
    environ = {
        "RUNSTATE_METRICS_PUBLIC": "yes",
        "RUNSTATE_SHUTDOWN_GRACE_S": "2.5",
        "RUNSTATE_BACKOFF_MAX_S": "30",
        "RUNSTATE_API_KEY": "",
        "RUNSTATE_BASE_URL": "http://elsewhere:1",  # a client's variable: ignored, not an error
    }
    settings = load({"metrics_public": False}, environ, None).settings
    assert settings.metrics_public is False  # the flag wins
    assert load({}, environ, None).settings.metrics_public is True
    assert settings.shutdown_grace_s == 2.5 and settings.limits.backoff_max_s == 30.0
    assert settings.api_key is None


@pytest.mark.parametrize(
    ("flags", "environ", "toml", "message"),
    [
        ({}, {"RUNSTATE_LEASE_MAX": "10"}, None, "unknown setting in the environment: RUNSTATE_LEASE_MAX (did you mean RUNSTATE_LEASE_S_MAX?)"),
        ({}, {}, "prot = 1\n", "unknown setting prot (did you mean port?)"),
        ({}, {}, "[limits]\nlease_max = 1\n", "unknown setting limits.lease_max (did you mean lease_s_max?)"),
        ({}, {}, "lease_s_max = 100\n", "unknown setting lease_s_max (limits go in the [limits] table: limits.lease_s_max)"),
        ({}, {"RUNSTATE_PORT": "eighty"}, None, "setting port (from RUNSTATE_PORT): expected an integer, got 'eighty'"),
        ({"wait_ms_max": "1.5"}, {}, None, "setting wait_ms_max (from --wait-ms-max): expected an integer, got '1.5'"),
        ({}, {}, 'port = "8080"\n', "expected an integer, got '8080'"),
        ({}, {}, "[limits]\nlease_s_max = true\n", "expected an integer, got True"),
        ({}, {"RUNSTATE_METRICS_PUBLIC": "maybe"}, None, "setting metrics_public (from RUNSTATE_METRICS_PUBLIC): expected true or false"),
        ({"port": "70000"}, {}, None, "setting port (from --port): must be at most 65535, got 70000"),
        ({"lease_s_min": "0"}, {}, None, "setting lease_s_min (from --lease-s-min): must be at least 1, got 0"),
        ({"log_format": "xml"}, {}, None, "setting log_format (from --log-format): must be one of json, text, got 'xml'"),
        ({"fsync": "sometimes"}, {}, None, "must be one of always, batch, off"),
        ({"space_id": "a b"}, {}, None, "setting space_id (from --space-id): must be 1-64 characters"),
        ({}, {"RUNSTATE_ADMIN_KEY": "short"}, None, "setting admin_key (from RUNSTATE_ADMIN_KEY): must be at least 16 characters"),
        (
            {"lease_s_default": "900"}, {}, None,
            "settings lease_s_default = 900 (from --lease-s-default) and lease_s_max = 600 (from default) do not fit",
        ),
        ({}, {"RUNSTATE_BACKOFF_BASE_S": "90"}, None, "settings backoff_base_s = 90.0 (from RUNSTATE_BACKOFF_BASE_S) and backoff_max_s"),
        (
            {"wait_ms_max": "120000"}, {}, None,
            "settings read_timeout_s = 90.0 (from default) and wait_ms_max = 120000 (from --wait-ms-max) do not fit",
        ),
        ({"keep_alive_s": "nan"}, {}, None, "setting keep_alive_s (from --keep-alive-s): must be a finite number, got nan"),
        ({}, {"RUNSTATE_BACKOFF_MAX_S": "inf"}, None, "setting backoff_max_s (from RUNSTATE_BACKOFF_MAX_S): must be a finite number, got inf"),
        ({}, {}, "fsync_slow_ms = inf\n", "fsync_slow_ms): must be a finite number, got inf"),
        ({}, {}, "[limits]\nbackoff_base_s = nan\n", "must be a finite number, got nan"),
        (
            {"etcd": "http://127.0.0.1:2", "data_dir": "node", "port": "0"}, {}, None,
            "setting etcd (from --etcd) with port 0 (from --port): the other nodes cannot reach a port chosen at start: give --advertise",
        ),
        (
            {"body_bytes_in_flight_max": "4096"}, {}, None,
            "settings request_bytes_max = 1048576 (from default) and body_bytes_in_flight_max = 4096 (from --body-bytes-in-flight-max) "
            "do not fit: request_bytes_max must not exceed body_bytes_in_flight_max",
        ),
        ({}, {}, "port = \n", "not valid TOML"),
        ({}, {}, "limits = 3\n", "'limits' must be a table"),
    ],
)
def test_a_wrong_setting_is_refused_with_its_name_and_source(tmp_path, flags, environ, toml, message):
    """Unknown names (with the nearest known one), wrong types, out of range, bad combinations, a broken file."""
    path = write(tmp_path, toml) if toml is not None else None
    with pytest.raises(ConfigError) as caught:
        load(flags, environ, path)
    assert message in str(caught.value)


def test_a_missing_file_is_named(tmp_path):
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="config file .*nope.toml: not found"):
        load({}, {}, missing)


def test_connection_settings_reach_hypercorn():
    """The listen backlog, keep-alive and read timeout are handed to hypercorn as given."""
    from runstate.server.serve import hypercorn_config

    settings = load({"backlog": "2048", "keep_alive_s": "7", "read_timeout_s": "60"}, {}, None).settings
    config = hypercorn_config(settings)
    assert (config.backlog, config.keep_alive_timeout, config.read_timeout) == (2048, 7.0, 60.0)
    assert hypercorn_config(load({}, {}, None).settings).backlog == 1024


def test_the_servers_key_and_space_have_variables_of_their_own():
    """RUNSTATE_API_KEY and RUNSTATE_SPACE_ID are the clients' variables: in a client's shell the server
    took the client's key as its own. The server reads RUNSTATE_SERVER_API_KEY and
    RUNSTATE_SERVER_SPACE_ID; the old names still work, with a warning, only when the new are unset."""
    new = load({}, {"RUNSTATE_SERVER_API_KEY": "rs_server", "RUNSTATE_SERVER_SPACE_ID": "research",
                    "RUNSTATE_API_KEY": "rs_client", "RUNSTATE_SPACE_ID": "other"}, None)
    assert (new.settings.api_key, new.settings.space_id) == ("rs_server", "research") and new.warnings == []
    assert new.sources["api_key"] == "RUNSTATE_SERVER_API_KEY"
    old = load({}, {"RUNSTATE_API_KEY": "rs_client", "RUNSTATE_SPACE_ID": "other"}, None)
    assert (old.settings.api_key, old.settings.space_id) == ("rs_client", "other")
    assert old.sources["space_id"] == "RUNSTATE_SPACE_ID"
    assert len(old.warnings) == 2 and "RUNSTATE_API_KEY is taken as the server's api_key (deprecated" in old.warnings[0]
    assert "set RUNSTATE_SERVER_API_KEY for the server" in old.warnings[0]
    flagged = load({"space_id": "flagged"}, {"RUNSTATE_SPACE_ID": "other"}, None)
    assert flagged.settings.space_id == "flagged"
