"""Imports flow one way: service -> consumers -> learning; learning imports nothing of ours."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "learning": {"consumers", "service", "tests", "bench"},
    "consumers": {"service", "tests", "bench"},
    "service": {"tests", "bench"},
}
LEARNING_NO_IO = {"kafka", "fastapi", "prometheus_client", "socket", "requests", "httpx", "uvicorn"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_flow_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no modules"
    for path in files:
        bad = imported_roots(path) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize(
    ("package", "lower"), [("service", {"consumers", "learning"}), ("consumers", {"learning"})]
)
def test_packages_use_the_layers_below_through_public_modules(
    package: str, lower: set[str]
) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        private = {
            module
            for module in imported_modules(path)
            if module.split(".")[0] in lower
            and any(part.startswith("_") for part in module.split(".")[1:])
        }
        assert not private, f"{path.relative_to(ROOT)} imports private modules {sorted(private)}"


def test_learning_does_no_io() -> None:
    for path in sorted((ROOT / "learning").rglob("*.py")):
        bad = imported_roots(path) & LEARNING_NO_IO
        assert not bad, f"{path.relative_to(ROOT)} imports I/O modules {sorted(bad)}"
