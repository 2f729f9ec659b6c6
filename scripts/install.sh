#!/usr/bin/env bash
# Install hpu and what it needs on a Debian-like machine, into the python3 on PATH.
# An OpenCL driver comes from Debian's pocl-opencl-icd when none is registered
# (the pocl-binary-distribution wheel fails on some CPUs: "unknown target CPU 'generic'").
# Debian's own Python is "externally managed" (PEP 668): pip refuses to install into it, so there the script
# stops before installing anything and says how to make and activate a virtual environment to run it in.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null 2>&1; then
    echo "error: no python3 on PATH (on Debian: sudo apt-get install python3 python3-venv)" >&2
    exit 1
fi
# PEP 668's rule, as pip applies it: an EXTERNALLY-MANAGED file in the interpreter's stdlib directory, outside a
# virtual environment, makes pip refuse (unless PIP_BREAK_SYSTEM_PACKAGES overrides it, as it does pip's check).
if ! python3 - <<'EOF'
import os, sys, sysconfig
in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix) or hasattr(sys, "real_prefix")
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
override = os.environ.get("PIP_BREAK_SYSTEM_PACKAGES", "").strip().lower() in ("1", "true", "yes", "on")
sys.exit(1 if os.path.isfile(marker) and not in_venv and not override else 0)
EOF
then
    cat >&2 <<EOF
error: $(command -v python3) is the system's Python, externally managed (PEP 668): pip will not install into it.
Make a virtual environment, activate it, and run this script again:

    python3 -m venv .venv && . .venv/bin/activate && bash scripts/install.sh

(On Debian, python3 -m venv needs the python3-venv package: sudo apt-get install python3-venv.)
Then activate it (. .venv/bin/activate) in each new shell before using hpu.
EOF
    exit 1
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "error: $(command -v python3) has no pip; use a virtual environment (python3 -m venv .venv && . .venv/bin/activate)" >&2
    exit 1
fi

if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        sudo=""
        [ "$(id -u)" -ne 0 ] && sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq pocl-opencl-icd >/dev/null
    else
        echo "warning: no OpenCL driver found and no apt-get; hpu will run in CPU-only mode" >&2
    fi
fi
python3 -m pip install -q --disable-pip-version-check -e ".[test]"
