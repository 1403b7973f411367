"""Broker settings: defaults, config file, environment and command line, later wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.node.options import parse


def test_sources_in_order_of_precedence(tmp_path: Path):
    config = tmp_path / "broker.toml"
    config.write_text('fsync = "interval"\nheartbeat_ms = 2000\nport = 27001\nstorage = "memory"\n')
    env = {"SWITCHYARD_BROKER_HEARTBEAT_MS": "3000", "SWITCHYARD_BROKER_PORT": "27002"}
    opts = parse(["--config", str(config), "--cluster", "prod-a", "--zk", "zk1:2181,zk2:2181/switchyard/prod-a",
                  "--data-dir", str(tmp_path), "--port", "27003", "--no-trace"], environ=env)
    assert opts.fsync == "interval" and opts.storage == "memory"  # from the file
    assert opts.heartbeat_ms == 3000  # the environment beats the file
    assert opts.port == 27003  # the command line beats both
    assert opts.trace is False and opts.data_dir == tmp_path
    assert opts.zk_hosts == "zk1:2181,zk2:2181" and opts.zk_chroot == "/switchyard/prod-a"
    assert opts.advertise_host == "127.0.0.1"


def test_bad_settings_are_refused(tmp_path: Path, capsys):
    with pytest.raises(SystemExit):
        parse(["--cluster", "c", "--zk", "h:1", "--fsync", "sometimes"], environ={})
    assert "fsync must be" in capsys.readouterr().err
    config = tmp_path / "broker.json"
    config.write_text('{"colour": "blue"}')
    with pytest.raises(ValueError, match="unknown settings"):
        parse(["--config", str(config), "--cluster", "c", "--zk", "h:1"], environ={})


def test_trace_roll_settings_are_read_and_bad_ones_refused(capsys):
    opts = parse(["--cluster", "c", "--zk", "h:1", "--trace-roll-mb", "16"], environ={"SWITCHYARD_BROKER_TRACE_ROLL_S": "5"})
    assert (opts.trace_roll_mb, opts.trace_roll_s) == (16, 5.0)
    assert parse(["--cluster", "c", "--zk", "h:1"], environ={}).trace_roll_mb is None
    for flag, value, message in (("--trace-roll-mb", "0", "trace_roll_mb must be"), ("--trace-roll-s", "-1", "trace_roll_s must be")):
        with pytest.raises(SystemExit):
            parse(["--cluster", "c", "--zk", "h:1", flag, value], environ={})
        assert message in capsys.readouterr().err

