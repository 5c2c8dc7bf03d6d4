"""Calls go one way: api/cli → domain → storage. The domain declares the ports it needs
(`mnemos.domain.ports`) and never imports storage, HTTP or SQL."""

from __future__ import annotations

import ast
from pathlib import Path

import mnemos.domain

FORBIDDEN = ("mnemos.storage", "mnemos.api", "fastapi", "sqlalchemy")


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_domain_imports_no_outer_layer() -> None:
    domain = Path(mnemos.domain.__file__).parent
    wrong = {
        f"{path.name}: {module}"
        for path in domain.glob("*.py")
        for module in imported_modules(path)
        if module.startswith(FORBIDDEN)
    }
    assert not wrong
