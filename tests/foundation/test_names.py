"""The folder platform/ must not shadow the standard library's `platform` (design.md, "Names")."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_from_root(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_import_uuid_and_platform_from_repo_root():
    result = run_from_root("import uuid, platform; print(platform.system(), uuid.uuid4().version)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Linux", "4"]


def test_control_plane_package_maps_to_platform_folder():
    result = run_from_root("import control_plane.settings as s; print(s.__file__)")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == ROOT / "platform" / "settings.py"


def test_local_spark_session_starts_from_repo_root():
    code = (
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.master('local[1]').config('spark.ui.enabled','false').getOrCreate()\n"
        "print(s.range(5).count()); s.stop()\n"
    )
    result = run_from_root(code, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "5"
