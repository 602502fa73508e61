"""Package list for setuptools (the rest of the metadata is in pyproject.toml).

pyproject.toml cannot combine package discovery with an extra package mapped from another
directory: the shipped config tree lives at the repository root (``configs/``) and installs as
package data under ``lat_core/configs/`` (see ``[tool.setuptools.package-dir]``).
"""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["lat_core*", "lat_tui*"]) + ["lat_core.configs"])
