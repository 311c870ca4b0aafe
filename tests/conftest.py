"""Shared test set-up: 8 host devices (sharding tests), float64 oracles, the tolerance rule."""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import pytest  # noqa: E402

# Each failure written to $FA4_FAILED_FILE as it happens (tests/failed_file.py).
pytest_plugins = ["failed_file"]

jax.config.update("jax_enable_x64", True)


# How many GPU tests a run without a GPU deselected (pytest_collection_modifyitems).
_GPU_DESELECTED = pytest.StashKey[int]()


def pytest_collection_modifyitems(config, items):
    """Without a GPU, the GPU tests (tests/gpu: each would skip) are deselected instead, so that a
    CPU run reports what it ran rather than a wall of skips; on a GPU machine they all run."""
    if jax.devices()[0].platform == "gpu":
        return
    gpu = {item for item in items if item.path.parent.name == "gpu"}
    if gpu:
        config.hook.pytest_deselected(items=sorted(gpu, key=lambda item: item.nodeid))
        items[:] = [item for item in items if item not in gpu]
        config.stash[_GPU_DESELECTED] = len(gpu)


def pytest_terminal_summary(terminalreporter, config):
    from tolerance import WORST

    if WORST:
        ratio, name = max(WORST)
        terminalreporter.write_line(
            f"numerics: {len(WORST)} checks by the error rule of docs/design.md; worst error / "
            f"allowed bound = {ratio:.3f} ({name})"
        )
    gpu = config.stash.get(_GPU_DESELECTED, 0)
    if gpu:
        terminalreporter.write_line(f"{gpu} GPU tests (tests/gpu) deselected: there is no GPU")
    if config.option.markexpr == "not slow":
        terminalreporter.write_line(
            "slow cases deselected (the default): `pytest -m slow tests` runs them, "
            '`pytest -m "slow or not slow" tests` runs everything'
        )
