"""The HPU profile: the parameters of one hybrid processing unit, and its files.

A :class:`Profile` holds the model's parameters (López-Ortiz et al. 2014,
section 3.2: ``p``, ``g``, ``gamma``), the transfer cost ``lambda + delta w``
and launch cost the paper leaves out, and the measured cost curves of each
workload's fast paths (:class:`hpu.core.costs.CostCurves`, keyed by workload
name).  Profiles are saved as versioned JSON (:func:`hpu.core.costs.write_versioned`);
the paper's platforms and calibrated machines ship in ``hpu.models``.

numpy only: usable without OpenCL.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from .costs import CostCurves, ProfileError, check_versioned, read_versioned, write_versioned
from .util import check_nonneg, check_positive

__all__ = ["PROFILE_SCHEMA_VERSION", "REQUIRED_CURVES", "Profile", "ProfileError", "reference_profile"]

#: Version of the JSON layout written by :meth:`Profile.save` (2: ``curves`` per workload; 1 had ``fast``).
PROFILE_SCHEMA_VERSION = 2

#: Per workload, the cost curves that its model cannot do without, and that every calibration of it measures: a
#: file whose curves of that workload lack one is refused (:meth:`Profile.from_dict`).  The sort's split
#: (:func:`hpu.sorting.costs.fast_split`) predicts the CPU's sort and its final merge of two to 16 runs whatever the
#: device; the device's curves are optional (a calibration without a device has none).
REQUIRED_CURVES = {"sort": ("cpu_sort", "merge2", "merge16")}


@dataclasses.dataclass(frozen=True)
class Profile:
    """Parameters of one hybrid processing unit (paper, section 3.2).

    Parameters
    ----------
    p : float
        CPU cores available for tasks (> 0; usually an integer).
    g : float
        Empirical degree of parallelism of the device: the number of
        work-items after which adding more gives no speed-up (> 0; paper,
        section 6.4, fig. 5).
    gamma : float
        Speed of one device work-item relative to one CPU core, in (0, 1]
        (paper, section 3.2; the paper's HPU1 has ``gamma = 1/160``).
    cpu_op_seconds : float
        Seconds one CPU core takes for one operation of the recurrence's
        ``f`` (for mergesort: one merged element).  ``1.0`` (the default)
        makes every predicted time a count of CPU operations, as in the paper.
    h2d_latency, d2h_latency : float
        Transfer latency ``lambda`` in seconds, host to device and back.
    h2d_seconds_per_byte, d2h_seconds_per_byte : float
        Transfer cost ``delta`` in seconds per byte, each direction.
    launch_seconds : float
        Host-side cost of one kernel launch (seconds); the paper neglects it.
    curves : dict
        Measured cost curves of the workloads' fast paths, keyed by workload
        name (``"sort"``: see :mod:`hpu.sorting.costs`); each value is a
        :meth:`hpu.core.costs.CostCurves.to_dict` dict.  Empty when not
        calibrated.
    name, device, host : str
        Free-text descriptions.
    provenance : dict
        How the profile was made (command, date, versions).
    measurements : dict
        Raw calibration measurements and fit residuals.

    Raises
    ------
    ValueError
        If ``p <= 0``, ``g <= 0``, ``gamma`` outside (0, 1],
        ``cpu_op_seconds <= 0``, or a cost is negative or not finite.
    """

    p: float
    g: float
    gamma: float
    cpu_op_seconds: float = 1.0
    h2d_latency: float = 0.0
    d2h_latency: float = 0.0
    h2d_seconds_per_byte: float = 0.0
    d2h_seconds_per_byte: float = 0.0
    launch_seconds: float = 0.0
    curves: dict = dataclasses.field(default_factory=dict)
    name: str = ""
    device: str = ""
    host: str = ""
    provenance: dict = dataclasses.field(default_factory=dict)
    measurements: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in ("curves", "provenance", "measurements"):
            if not isinstance(getattr(self, f), dict):
                raise TypeError(f"{f} must be a dict, got {type(getattr(self, f)).__name__}")
        object.__setattr__(self, "p", check_positive("p", self.p))
        object.__setattr__(self, "g", check_positive("g", self.g))
        gamma = check_positive("gamma", self.gamma)
        if gamma > 1:
            raise ValueError(
                f"gamma must lie in (0, 1] (a device work-item is at most as fast as a "
                f"CPU core; paper section 3.2), got {self.gamma!r}"
            )
        object.__setattr__(self, "gamma", gamma)
        object.__setattr__(self, "cpu_op_seconds", check_positive("cpu_op_seconds", self.cpu_op_seconds))
        for f in ("h2d_latency", "d2h_latency", "h2d_seconds_per_byte", "d2h_seconds_per_byte", "launch_seconds"):
            object.__setattr__(self, f, check_nonneg(f, getattr(self, f)))

    # -- transfers ---------------------------------------------------------
    def h2d_time(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` host to device: ``lambda + delta * w`` (paper, section 3.2)."""
        return self.h2d_latency + self.h2d_seconds_per_byte * nbytes if nbytes > 0 else 0.0

    def d2h_time(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` device to host: ``lambda + delta * w`` (paper, section 3.2)."""
        return self.d2h_latency + self.d2h_seconds_per_byte * nbytes if nbytes > 0 else 0.0

    def replace(self, **changes: Any) -> Profile:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def cost_curves(self, workload: str) -> CostCurves | None:
        """The measured :class:`~hpu.core.costs.CostCurves` of ``workload`` (None if not calibrated).

        Raises
        ------
        ProfileError
            The stored curves are invalid.
        """
        return self._parse_curves(workload, f"profile {self.name!r}")

    def _parse_curves(self, workload: str, source: str) -> CostCurves | None:
        """:meth:`cost_curves`, parsed once per profile (it is frozen); errors name ``source`` (a file, or the
        profile's name) and the workload.  ProfileError as :meth:`cost_curves`."""
        cache = self.__dict__.setdefault("_cost_curves", {})
        if workload not in cache:
            d = self.curves.get(workload)
            cache[workload] = None if d is None else CostCurves.from_dict(d, source=f"{source}, {workload!r} curves")
        return cache[workload]

    # -- persistence -------------------------------------------------------
    def to_dict(self) -> dict:
        """The profile as a JSON-ready dict with ``kind`` and ``schema_version`` keys."""
        return {**dataclasses.asdict(self), "kind": "profile", "schema_version": PROFILE_SCHEMA_VERSION}

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "<dict>") -> Profile:
        """Build a profile from :meth:`to_dict` output or a saved file's dict.

        Schema version 1 (whose sort curves were a ``fast`` field) is read as
        version 2 with ``curves={"sort": fast}``.

        Raises
        ------
        ProfileError
            If the schema version is missing or newer than this code, a
            field (cost curves included) is missing or invalid, or a
            workload's curves lack one of its :data:`REQUIRED_CURVES`.
        """
        d = dict(check_versioned(d, "profile", PROFILE_SCHEMA_VERSION, source=source))
        if d["schema_version"] == 1 and d.get("fast"):
            d["curves"] = {"sort": d["fast"]}
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = [k for k in ("p", "g", "gamma") if k not in d]
        if missing:
            raise ProfileError(f"{source}: missing field(s) {', '.join(missing)}")
        try:
            profile = cls(**{k: v for k, v in d.items() if k in fields})
        except (TypeError, ValueError) as e:
            raise ProfileError(f"{source}: invalid profile: {e}") from None
        for workload in profile.curves:  # parsed now: a bad curve is a bad profile, not a failure of every call
            curves = profile._parse_curves(workload, source)
            lacking = [k for k in REQUIRED_CURVES.get(workload, ()) if curves is not None and k not in curves]
            if lacking:
                raise ProfileError(f"{source}, {workload!r} curves: missing {', '.join(lacking)}; "
                                   "recalibrate (python -m hpu.calibrate)")
        return profile

    def save(self, path: str | os.PathLike) -> Path:
        """Write the profile as versioned JSON, atomically (no half-written file); return the path."""
        return write_versioned(path, "profile", PROFILE_SCHEMA_VERSION, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        """Read a profile written by :meth:`save`.

        Raises
        ------
        ProfileError
            If the file is missing, is not JSON, or does not hold a valid profile.
        """
        return cls.from_dict(read_versioned(path, "profile", PROFILE_SCHEMA_VERSION), source=str(path))


def reference_profile(name: str) -> Profile:
    """One of the profiles shipped in ``models/``: ``"hpu1"``, ``"hpu2"`` (paper, table 2) or a calibrated one.

    Parameters
    ----------
    name : str
        The profile's file name without ``.json``, case-insensitive:
        ``"hpu1"`` and ``"hpu2"`` are the paper's platforms (paper,
        table 2: ``p``, ``g``, ``gamma``, no transfer costs); the others are
        machines calibrated by ``python -m hpu.calibrate``.  The message of
        a wrong name lists the shipped ones.

    Returns
    -------
    Profile
        A new :class:`Profile` read from the shipped file (validated as
        :meth:`Profile.load` does).

    Raises
    ------
    TypeError
        ``name`` is not a string.
    ProfileError
        If no shipped profile has that name, or its file is invalid.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string (e.g. 'hpu1'), got {type(name).__name__}")
    from importlib import resources

    fname = f"{name.lower()}.json"
    res = resources.files("hpu.models").joinpath(fname)
    if not res.is_file():
        avail = sorted(p.name[:-5] for p in resources.files("hpu.models").iterdir() if p.name.endswith(".json"))
        raise ProfileError(f"no shipped profile named {name!r}; available: {', '.join(avail)}")
    with resources.as_file(res) as p:
        return Profile.load(p)

