"""The several-machine deployment (docs/deploy.md): the systemd units under deploy/systemd pass systemd's own check
with this checkout standing in for /opt/switchyard, the example broker configuration is one the broker accepts,
and no secret value is written into a unit or an example (only the paths of mode-600 files)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from broker_core.node.options import parse

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
EXAMPLES = ROOT / "deploy" / "examples"


@pytest.fixture
def installed(tmp_path) -> Path:
    """The units as an install would lay them out, with this checkout as /opt/switchyard and the examples as
    /etc/switchyard."""
    etc = tmp_path / "etc"
    shutil.copytree(EXAMPLES, etc)
    shutil.copy(etc / "broker-prod-a-b1.env", etc / "broker-node1.env")
    for unit in UNITS.iterdir():
        text = unit.read_text().replace("/opt/switchyard", str(ROOT)).replace("/etc/switchyard", str(etc))
        (tmp_path / unit.name).write_text(text.replace("/var/lib/switchyard", str(tmp_path / "var")))
    return tmp_path


def test_every_unit_passes_systemd_analyze_verify(installed):
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install Debian's systemd package (./dev does)")
    names = [u.name.replace("@.service", "@node1.service") for u in sorted(UNITS.iterdir())]
    assert "switchyard-broker@node1.service" in names and "switchyard-web.service" in names
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", *[f"./{n}" for n in names]],
                            cwd=installed, capture_output=True, text=True)
    # a wrong key or section is only a warning for systemd: every line it prints is a finding
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_example_broker_configuration_is_accepted_by_the_broker():
    options = parse(["--config", str(EXAMPLES / "broker-prod-a-b1.toml"), "--node-id", "prod-a-b1"], environ={})
    assert options.cluster == "prod-a" and options.node_id == "prod-a-b1"
    assert options.zk_hosts.count(",") == 2 and options.zk_chroot == "/switchyard/prod-a"
    assert str(options.trace_dir).startswith("/srv/switchyard-trace/")


SECRET_NAMES = re.compile(r"(SECRET|PASSWORD|TOKEN|AUTH|KEY)[A-Z_]*=", re.I)


def test_units_and_examples_name_secret_files_never_secret_values():
    for path in [*UNITS.iterdir(), *EXAMPLES.iterdir()]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.lstrip().startswith("#"):
                continue
            for match in SECRET_NAMES.finditer(line):
                assert line[:match.end()].rstrip("=").endswith("_FILE"), f"{path.name}:{number}: {line}"
