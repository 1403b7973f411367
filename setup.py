"""Package discovery for setuptools; everything else is in pyproject.toml.

pyproject's `[tool.setuptools.packages.find]` cannot name `control_plane`: it only finds folders by their own
name, and the control plane's folder is platform/ (mapped in `[tool.setuptools.package-dir]`; see the README).
So the packages are found here, by include pattern, and control_plane is added to them.
"""

from setuptools import find_packages, setup

FOUND = ["apps", "apps.*", "broker_core", "broker_core.*", "spark_jobs", "spark_jobs.*", "devstack", "devstack.*"]

setup(packages=[*find_packages(include=FOUND), "control_plane"])
