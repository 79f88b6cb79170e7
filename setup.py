"""Packages of the distribution: ``hasp`` and its subpackages, and the repository's ``flows/`` and
``tasks/`` folders installed as ``hasp.flows`` and ``hasp.tasks``, so an installed HASP adds no
top-level import name beyond ``hasp``. Everything else is in ``pyproject.toml``."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["hasp", "hasp.*"]), "hasp.flows", "hasp.tasks"],
      package_dir={"hasp.flows": "flows", "hasp.tasks": "tasks"})
