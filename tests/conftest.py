import logging
import os

import numpy as np
import pytest

import hpu


@pytest.fixture(scope="session", autouse=True)
def _private_profile_dir(tmp_path_factory):
    """Tests neither read nor write the user's calibrated profiles (notebook kernels inherit this too)."""
    old = os.environ.get("HPU_PROFILE_DIR")
    os.environ["HPU_PROFILE_DIR"] = str(tmp_path_factory.mktemp("profiles"))
    yield
    if old is None:
        os.environ.pop("HPU_PROFILE_DIR", None)
    else:
        os.environ["HPU_PROFILE_DIR"] = old


@pytest.fixture(scope="session")
def runtime():
    """One runtime on the default device (PoCL on CI) with the paper's HPU1 profile, shared by the tests."""
    with hpu.Runtime(profile=hpu.Profile(p=2, g=64, gamma=0.5, cpu_op_seconds=3e-9)) as rt:
        yield rt


@pytest.fixture(scope="session")
def cpu_runtime():
    with hpu.Runtime("none", profile=hpu.Profile(p=2, g=1, gamma=1)) as rt:
        yield rt


@pytest.fixture(autouse=True)
def _quiet_hpu_logs(caplog):
    caplog.set_level(logging.WARNING, logger="hpu")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bit patterns (so -0.0 vs +0.0 and NaN payload order count)."""
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))
