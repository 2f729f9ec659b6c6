"""hpu: hybrid CPU + OpenCL execution of divide-and-conquer algorithms.

The work is split between a CPU thread pool and an OpenCL device with the HPU
model of López-Ortiz, Salinger and Suderman (IJNC 4(1), 2014), calibrated on
the machine at hand by ``python -m hpu.calibrate``.
"""

from .device import DeviceInfo, NoDeviceError, Runtime, list_devices, select_device
from .model import (
    Profile,
    ProfileError,
    Recurrence,
    Split,
    advanced_split,
    basic_split,
    reference_profile,
)

__version__ = "0.1.0"

__all__ = [
    "DeviceInfo",
    "NoDeviceError",
    "Profile",
    "ProfileError",
    "Recurrence",
    "Runtime",
    "Split",
    "advanced_split",
    "basic_split",
    "list_devices",
    "reference_profile",
    "select_device",
]
