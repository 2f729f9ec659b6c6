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


# -- the command line and the install script (README's set-up) ---------------------------------------------------

REPO = HPU.parent


@pytest.mark.parametrize("argv, message", [
    (["sort", "--n", "0"], "hpu sort: error: --n must be >= 1"),
    (["sort", "--seed", "-1"], "hpu sort: error: --seed must be >= 0"),
    (["sort", "--mode", "paper", "--strategy", "keyrange"], "hpu sort: error: --strategy keyrange"),
    (["sort", "--output", "/nonexistent-hpu-dir/out.npy"], "hpu sort: error: --output"),
    (["sort", "--gantt", "/nonexistent-hpu-dir/g.png"], "hpu sort: error: --gantt"),
    (["sort", "--dtype", "int8"], "hpu sort: error: argument --dtype"),
    (["calibrate", "--threads", "0"], "hpu calibrate: error: threads must be an integer >= 1"),
    (["bogus"], "hpu: error: argument command"),
])
def test_cli_usage_errors_exit_2_without_traceback(argv, message, capsys):
    from hpu.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err, err


@pytest.mark.parametrize("content, message", [("2-D", "1-D"), ("int8", "int8"), ("text", "is not a .npy file"),
                                              ("objects", "cannot load")])
def test_cli_sort_input_it_cannot_sort_is_a_usage_error(tmp_path, content, message, capsys):
    import numpy as np

    from hpu.cli import main

    path = tmp_path / "a.npy"
    if content == "text":
        path.write_text("not an array")
    elif content == "objects":  # a .npy file of pickled objects: numpy's refusal, named
        np.save(path, np.array([1, "a"], dtype=object), allow_pickle=True)
    else:
        np.save(path, np.zeros((3, 3), np.int32) if content == "2-D" else np.zeros(4, np.int8))
    with pytest.raises(SystemExit) as e:
        main(["sort", "--input", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "hpu sort: error:" in err and message in err, err


def test_cli_sort_offers_every_sort_strategy(capsys):
    from hpu.cli import main
    from hpu.sorting.mergesort import SORT_STRATEGIES

    with pytest.raises(SystemExit) as e:
        main(["sort", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "{" + ",".join(SORT_STRATEGIES) + "}" in out.replace("\n", "").replace(" ", ""), out


# install.sh run with stand-ins on PATH: ``python3`` runs only the Python the script pipes to it (its PEP 668
# check), with the interpreter's stdlib directory and virtual environment faked; apt-get and sudo do nothing.  So
# nothing is installed whatever the script does.
FAKE_PYTHON = """#!/bin/sh
exec {real} -c '
import os, sys, sysconfig
_get = sysconfig.get_path
sysconfig.get_path = lambda name, *a, **k: os.environ["FAKE_STDLIB"] if name == "stdlib" else _get(name, *a, **k)
sys.base_prefix = "/fake-base-prefix" if os.environ["FAKE_VENV"] == "1" else sys.prefix
sys.__dict__.pop("real_prefix", None)
print("python3", *sys.argv[1:], file=open(os.environ["FAKE_LOG"], "a"))
code = sys.stdin.read() if sys.argv[1:] == ["-"] else ""
sys.argv = ["-"]
exec(compile(code, "<stdin>", "exec"))
' "$@"
"""


def _install(tmp_path, *, marker: bool, venv: bool = False, override: str = "") -> tuple:
    import os
    import shutil
    import subprocess
    import sys

    bin_dir, stdlib = tmp_path / "bin", tmp_path / "stdlib"
    bin_dir.mkdir()
    stdlib.mkdir()
    if marker:
        (stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=managed by the system\n")
    (bin_dir / "python3").write_text(FAKE_PYTHON.format(real=sys.executable))
    for tool in ("apt-get", "sudo"):
        (bin_dir / tool).write_text('#!/bin/sh\necho "$0 $*" >> "$FAKE_LOG"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_BREAK_SYSTEM_PACKAGES", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", FAKE_STDLIB=str(stdlib), FAKE_LOG=str(log),
               FAKE_VENV="1" if venv else "0")
    if override:
        env["PIP_BREAK_SYSTEM_PACKAGES"] = override
    proc = subprocess.run([shutil.which("bash") or "/bin/bash", str(REPO / "scripts" / "install.sh")], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    return proc, log.read_text()


def test_install_script_stops_early_on_an_externally_managed_python(tmp_path):
    proc, calls = _install(tmp_path, marker=True)
    assert proc.returncode == 1, proc
    assert "PEP 668" in proc.stderr and "python3 -m venv .venv && . .venv/bin/activate" in proc.stderr, proc.stderr
    assert "pip" not in calls and "apt-get" not in calls, calls  # nothing installed, nothing asked of apt


@pytest.mark.parametrize("case", [dict(marker=False), dict(marker=True, venv=True),
                                  dict(marker=True, override="1")], ids=["unmanaged", "venv", "override"])
def test_install_script_goes_on_where_pip_may_install(tmp_path, case):
    proc, calls = _install(tmp_path, **case)
    assert proc.returncode == 0, proc
    assert "python3 -m pip install -q --disable-pip-version-check -e .[test]" in calls, calls
