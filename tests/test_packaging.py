"""What a first-time user or a packager looks for: the license, the typing marker, the changelog."""

from __future__ import annotations

import importlib.resources
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_license_is_the_apache_2_text_the_metadata_names():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    for clause in (
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "2. Grant of Copyright License.",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
    ):
        assert clause in text


def test_package_is_marked_typed():
    """PEP 561: type checkers read jax_fa4's annotations only when the package holds py.typed
    (the wheel ships the whole jax_fa4 directory: `wheel.packages` in pyproject.toml)."""
    assert importlib.resources.files("jax_fa4").joinpath("py.typed").is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["tool"]["scikit-build"]["wheel"]["packages"] == ["jax_fa4"]


def test_changelog_has_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog")
    assert "keepachangelog.com" in text
    unreleased = text.split("## [Unreleased]", 1)[1]
    assert "### Added" in unreleased.split("\n## ", 1)[0]
