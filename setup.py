"""Packages of the distribution: ``hasp`` and its subpackages, and the repository's ``flows/`` and
``tasks/`` folders installed as ``hasp.flows`` and ``hasp.tasks``, so an installed HASP adds no
top-level import name beyond ``hasp``. The folders of data files (prompts, chat formats, seed skills) are
named too, as namespace packages: a folder setuptools finds but ``packages`` does not name is dropped from
future wheels. Everything else is in ``pyproject.toml``."""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["hasp", "hasp.*"], exclude=["*.__pycache__"]),
                "hasp.flows", "hasp.tasks"],
      package_dir={"hasp.flows": "flows", "hasp.tasks": "tasks"})
