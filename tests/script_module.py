"""A script outside any package (benchmarks/, examples/, tests/gpu/cuda/) loaded as a module."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType


def load_script(path: pathlib.Path, name: str | None = None) -> ModuleType:
    """Executes the script at `path` as a fresh module `name` (default: its file name) and returns
    it. The module is registered in sys.modules before it runs (dataclasses look their module up
    by name), and the script's folder goes on sys.path as when the script is run, so its imports
    of sibling scripts resolve."""
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
