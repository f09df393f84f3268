"""Lists every subpackage under the four layer folders (ADR 0001).

setuptools cannot discover packages through a ``package-dir`` mapping by itself, and a
subpackage missing from this list is silently left out of the wheel.
"""

from setuptools import find_packages, setup

LAYERS = {
    "plaita": "public",
    "plaita.domain": "domain",
    "plaita.application": "application",
    "plaita.adapters": "adapters",
    "plaita.entrypoints": "entrypoints",
}

# pyproject.toml maps each layer to its folder; this only enumerates the subpackages.
packages = [
    qualified
    for name, folder in LAYERS.items()
    for qualified in [name, *(f"{name}.{sub}" for sub in find_packages(where=folder))]
]

setup(packages=packages)
