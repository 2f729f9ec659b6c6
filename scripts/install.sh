#!/usr/bin/env bash
# Install hpu and what it needs on a Debian-like machine.
# An OpenCL driver comes from Debian's pocl-opencl-icd when none is registered
# (the pocl-binary-distribution wheel fails on some CPUs: "unknown target CPU 'generic'").
set -euo pipefail
cd "$(dirname "$0")/.."
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
