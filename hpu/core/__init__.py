"""The hybrid core: runtime, model, split search, one driver and the trace. It knows no workload.

Modules
-------
:mod:`~hpu.core.profile`
    :class:`Profile` (p, g, gamma, transfer and launch costs, per-workload
    cost curves), its versioned files, the shipped and cached profiles.
:mod:`~hpu.core.model`
    The HPU model of López-Ortiz et al. 2014 (sections 3 and 5):
    :class:`Recurrence`, level sums, :class:`Split`, the basic and advanced
    splits.  numpy and scipy only.
:mod:`~hpu.core.costs`
    :class:`CostCurves` (measured seconds of a workload's steps over sizes)
    and the one versioned JSON format every calibration writes.
:mod:`~hpu.core.runtime`
    Device choice, :class:`Runtime` (shared by any number of threads),
    :class:`DeviceLease` (one call's queues and buffers), the locked
    :class:`ResourceCache`, and the lazily created default runtime.
:mod:`~hpu.core.hybrid`
    :func:`run_hybrid`, the one driver: a CPU share and a device share of a
    call at once, with fallback and :class:`DeviceFailure`.
:mod:`~hpu.core.trace`
    :class:`Trace`: what each unit did and when.
:mod:`~hpu.core.calibrate`
    p, g, gamma, lambda, delta and launch cost (paper 6.4), and
    :func:`median_time`, the one timer calibrations use.
:mod:`~hpu.core.hostmem`, :mod:`~hpu.core.kernels`, :mod:`~hpu.core.util`
    Recycled (pinned) host memory, kernel sources, small helpers.

The workload contract
---------------------
A workload (the sort in :mod:`hpu.sorting`, tabu search in :mod:`hpu.tabu`, a
user's :class:`hpu.DCSpec` through :mod:`hpu.dc`) supplies:

1. **Its cost model**: closed forms over the profile (a :class:`Recurrence`
   for the paper's splits) and/or :class:`CostCurves` measured by its own
   calibration, stored in the profile under the workload's name
   (:attr:`Profile.curves`) or in a file of the core's versioned format
   (:func:`write_versioned`).  From them it picks its split (the CPU share
   alpha and the device's share and granularity).
2. **A CPU-share runner**: a callable that computes the CPU's share in the
   runtime's thread pool (``runtime.pool``, ``runtime.threads``).
3. **A device-share runner**: a callable taking a :class:`DeviceLease`
   that enqueues the device's share on the lease's own queues and buffers
   (programs from ``lease.program`` / ``lease.build``) and returns when its
   results are on the host.
4. **A redo**: the device share computed on the CPU from the input, for the
   fallback.
5. **Its calibration**: a callable ``measure(runtime, quick, bar) ->
   CostCurves`` that :func:`hpu.core.calibrate.calibrate` runs beside the
   core's microbenchmarks.

The core supplies the :class:`Runtime` (device, context, thread pool,
profile, leases, caches, host memory), the split search of the paper's model,
the driver :func:`run_hybrid` (concurrency of the two shares, conversion of
OpenCL errors into :class:`DeviceFailure`, the CPU fallback, the rebuild of a
faulted context) and the :class:`Trace`.  Every public entry point wraps its
work in ``with runtime.call():`` so that :meth:`Runtime.close` can wait for
it, and the threads of an executor of its own (ones it starts and waits
for) in ``with runtime.helping():``.  No module of the core imports a workload.
"""
