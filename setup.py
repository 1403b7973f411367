"""Package discovery for setuptools; everything else is in pyproject.toml.

pyproject's `[tool.setuptools.packages.find]` cannot name `control_plane`: it only finds folders by their own
name, and the control plane's folder is platform/ (mapped in `[tool.setuptools.package-dir]`; see the README).
So the packages are found here, by include pattern, and control_plane is added to them.

One module is compiled (Cython, a build requirement in pyproject.toml): broker_core/tracing/_parts.pyx, the
trace columns of a publish batch (broker_core.tracing.records falls back to Python where it is not built).
"""

from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

FOUND = ["apps", "apps.*", "broker_core", "broker_core.*", "spark_jobs", "spark_jobs.*", "devstack", "devstack.*"]

setup(packages=[*find_packages(include=FOUND), "control_plane"],
      ext_modules=cythonize([Extension("broker_core.tracing._parts", ["broker_core/tracing/_parts.pyx"])],
                            compiler_directives={"language_level": 3}))
