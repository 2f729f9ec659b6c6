"""Lazy top-level imports: the model needs numpy and scipy only, and ``import hpu`` alone pulls in nothing heavy.

Each check runs in a fresh interpreter (``sys.executable -c``), since this test
process has long since imported pyopencl and the runtime.  The optional
dependencies are blocked by a ``sys.meta_path`` finder placed first, which
raises ImportError for them and records every attempt, so that an import
swallowed by a ``try: ... except`` still counts.  The control cases run the
same harness on code that does import the runtime, to show the checks can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKED = ("pyopencl", "platformdirs", "matplotlib")

# Prepended to the code under test; prints one JSON line that _run parses.
HARNESS = textwrap.dedent("""
    import importlib.abc, json, sys
    BLOCKED = {blocked!r}
    ATTEMPTS = []

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                ATTEMPTS.append(name)
                raise ImportError(f"{{name}} is blocked by tests/test_imports.py")
            return None

    if {block!r}:
        sys.meta_path.insert(0, Blocker())
    RESULT = {{}}
    try:
    {body}
        RESULT["error"] = None
    except Exception as e:
        RESULT["error"] = f"{{type(e).__name__}}: {{e}}"
    RESULT["attempts"] = ATTEMPTS
    RESULT["modules"] = sorted(m for m in sys.modules
                               if m.split(".")[0] in BLOCKED or m.startswith("hpu."))
    print("RESULT " + json.dumps(RESULT))
""")

WORKED_EXAMPLE = """
from hpu import Profile, Recurrence, advanced_split, basic_split, reference_profile
s = advanced_split(Recurrence(a=2, b=2, f=1), 2**24, Profile(p=4, g=2**12, gamma=1/160))
b = basic_split(Recurrence(a=2, b=2, f=1), 2**24, reference_profile("hpu1"))
RESULT["split"] = {"alpha": s.alpha, "transfer_level": s.transfer_level, "y": s.y,
                   "gpu_work_fraction": s.gpu_work_fraction, "basic_transfer_level": b.transfer_level}
"""


def _run(body: str, *, block: bool = True) -> dict:
    """Run ``body`` in a fresh interpreter under the harness; return what it found."""
    code = HARNESS.format(blocked=BLOCKED, block=block, body=textwrap.indent(body.strip(), "    "))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"subprocess failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


def _heavy(found: dict) -> list[str]:
    return [m for m in found["modules"] if m.split(".")[0] in BLOCKED] + found["attempts"]


def test_model_needs_no_opencl_platformdirs_or_matplotlib():
    found = _run(WORKED_EXAMPLE)
    assert found["error"] is None, found
    assert _heavy(found) == [], f"the model imported or tried to import {_heavy(found)}"
    assert "hpu.core.runtime" not in found["modules"]
    # Paper 5.2.2, as tests/test_model.py::test_paper_worked_example asserts it.
    s = found["split"]
    assert s["alpha"] == pytest.approx(0.16, abs=0.005)
    assert s["transfer_level"] == 10
    assert 9 < s["y"] <= 10
    assert s["gpu_work_fraction"] == pytest.approx(0.52, abs=0.005)
    assert s["basic_transfer_level"] == 10


def test_import_hpu_alone_imports_neither_pyopencl_nor_the_runtime():
    found = _run("import hpu", block=False)
    assert found["error"] is None, found
    assert "pyopencl" not in found["modules"]
    assert "hpu.core.runtime" not in found["modules"]
    assert not any(m.split(".")[0] in BLOCKED for m in found["modules"]), found["modules"]


def test_control_an_eager_runtime_import_is_caught():
    # What hpu/__init__.py importing hpu.core.runtime eagerly would do: both checks above must see it.
    blocked = _run("import hpu.core.runtime\n" + WORKED_EXAMPLE)
    assert blocked["error"] is not None or _heavy(blocked), blocked
    assert "pyopencl" in blocked["attempts"] or "platformdirs" in blocked["attempts"], blocked
    free = _run("import hpu\nimport hpu.core.runtime", block=False)
    assert "hpu.core.runtime" in free["modules"] and "pyopencl" in free["modules"], free
