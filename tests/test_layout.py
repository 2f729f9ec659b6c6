"""The architecture rules of issue 12, checked on the source of ``hpu/``.

The core (``hpu/core``) and the D&C transformer (``hpu/dc``) import no workload
(``hpu.sorting``, ``hpu.tabu``); no module imports another module's underscore
name; no function has more than 80 lines of code.  (The experiments' rules are
in ``test_sweeps.py``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import long_functions

HPU = Path(__file__).resolve().parents[1] / "hpu"
MODULES = sorted(HPU.rglob("*.py"))
WORKLOADS = ("sorting", "tabu")


def imports(path: Path, root: Path = HPU) -> list[tuple[int, str, str]]:
    """(line, absolute module, name) of every import in ``path``, a module of the package ``root`` (relative
    imports resolved; ``name`` is empty for ``import X``)."""
    package = [root.name, *path.relative_to(root).parent.parts]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out += [(node.lineno, module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, "") for alias in node.names]
    return out


def rel(path: Path) -> str:
    return str(path.relative_to(HPU.parent))


@pytest.mark.parametrize("path", [p for p in MODULES if p.parent.name in ("core", "dc")], ids=rel)
def test_core_and_transformer_import_no_workload(path):
    bad = [f"{line}: {mod}" for line, mod, name in imports(path)
           if any(mod == f"hpu.{w}" or mod.startswith(f"hpu.{w}.") or (mod == "hpu" and name == w) for w in WORKLOADS)]
    assert not bad, f"{rel(path)} imports a workload"


@pytest.mark.parametrize("path", MODULES, ids=rel)
def test_no_private_name_crosses_a_module(path):
    bad = [f"{line}: {mod}.{name}" for line, mod, name in imports(path)
           if mod.startswith("hpu") and name.startswith("_") and not name.startswith("__")]
    assert not bad, f"{rel(path)} imports private names"


@pytest.mark.parametrize("path", MODULES, ids=rel)
def test_functions_are_short(path):
    assert not long_functions(path, 80)


def test_the_checks_can_fail(tmp_path):
    """Control: a planted module's workload import of a private name and its long function are found."""
    planted = tmp_path / "hpu" / "core" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from ..sorting.cpu import _merge\n\n\ndef f():\n" + "    x = 1\n" * 81)
    assert imports(planted, tmp_path / "hpu") == [(1, "hpu.sorting.cpu", "_merge")]
    assert long_functions(planted, 80) == ["planted.py:4 f: 82 lines of code"]
