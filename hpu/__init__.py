"""hpu: hybrid CPU + OpenCL execution of divide-and-conquer algorithms.

The work is split between a CPU thread pool and an OpenCL device with the HPU
model of López-Ortiz, Salinger and Suderman (IJNC 4(1), 2014), calibrated on
the machine at hand by ``python -m hpu.calibrate``.
"""

from .dc import DCSpec, Plan, array_sum_spec, mergesort_spec
from .device import DeviceInfo, NoDeviceError, Runtime, list_devices, select_device
from .model import (
    Profile,
    ProfileError,
    Recurrence,
    Split,
    advanced_split,
    basic_split,
    fast_split,
    reference_profile,
)
from .executor import DeviceFailure, Trace, TraceEvent, execute
from .mergesort import hybrid_mergesort

__version__ = "0.1.0"

__all__ = [
    "DCSpec",
    "DeviceFailure",
    "DeviceInfo",
    "NoDeviceError",
    "Plan",
    "Profile",
    "ProfileError",
    "Recurrence",
    "Runtime",
    "Split",
    "Trace",
    "TraceEvent",
    "advanced_split",
    "array_sum_spec",
    "basic_split",
    "execute",
    "fast_split",
    "hybrid_mergesort",
    "list_devices",
    "mergesort_spec",
    "reference_profile",
    "select_device",
]
