"""The build backend: setuptools, run in a temporary copy of this folder.

setuptools writes ``build/`` and ``*.egg-info`` beside the sources; building from a copy leaves the
folder as it was after ``pip install ./this-folder`` (or ``python -m build``). Editable installs
(``pip install -e``) build in place, since they must point at these sources.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401 - editable installs build in place
    build_editable,
    get_requires_for_build_editable,
    prepare_metadata_for_build_editable,
)

_LITTER = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".git", ".pytest_cache")


@contextlib.contextmanager
def _in_a_copy() -> Iterator[None]:
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="videorl-build-") as tmp:
        copy = os.path.join(tmp, os.path.basename(here))
        shutil.copytree(here, copy, ignore=_LITTER)
        os.chdir(copy)
        try:
            yield
        finally:
            os.chdir(here)


def _copied(hook: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        # output directories may be relative to this folder: resolve them before moving to the copy
        args = tuple(os.path.abspath(a) if isinstance(a, str) else a for a in args)
        kwargs = {k: os.path.abspath(v) if isinstance(v, str) else v for k, v in kwargs.items()}
        with _in_a_copy():
            return hook(*args, **kwargs)

    run.__name__ = run.__qualname__ = hook.__name__
    return run


get_requires_for_build_wheel = _copied(_setuptools.get_requires_for_build_wheel)
get_requires_for_build_sdist = _copied(_setuptools.get_requires_for_build_sdist)
prepare_metadata_for_build_wheel = _copied(_setuptools.prepare_metadata_for_build_wheel)
build_wheel = _copied(_setuptools.build_wheel)
build_sdist = _copied(_setuptools.build_sdist)
