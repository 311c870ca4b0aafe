"""Shared test set-up: 8 host devices (sharding tests), float64 oracles, the tolerance rule."""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


def pytest_terminal_summary(terminalreporter):
    from tolerance import WORST

    if WORST:
        ratio, name = max(WORST)
        terminalreporter.write_line(
            f"numerics: {len(WORST)} checks by the error rule of docs/design.md; worst error / "
            f"allowed bound = {ratio:.3f} ({name})"
        )
