"""The one packaging rule pyproject.toml cannot say: every code package below app/ and sim/, found as they are added,
plus the checkout's templates/ and static/ as the data packages app.web.templates and app.web.static (mapped to
their folders by [tool.setuptools.package-dir] in pyproject.toml, where everything else about the build lives)."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["app", "app.*", "sim", "sim.*"]) + ["app.web.static", "app.web.templates"])
