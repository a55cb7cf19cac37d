"""The package metadata is in pyproject.toml. This file only adds one build step: a built wheel
(`pip install .`, `python -m build`) carries the repository's assets/ folder as specviz/assets, so
an installed specviz finds its draft, classifier, datastore, adapter and prompts outside the
checkout. Editable installs (`pip install -e .`) read assets/ in place."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithAssets(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_tree(str(Path(__file__).parent / "assets"), str(Path(self.build_lib) / "specviz" / "assets"))


setup(cmdclass={"build_py": BuildWithAssets})
