"""Queue slots: each live command queue builds its own programs on a PoCL CPU device before 7.0.

PoCL before 7.0 aborts the process when three command queues or more run one program's kernel at once at different
NDRange widths (its cache of compiled kernels counts an entry down for a command that counted up another; PoCL's
commit "fix dlhandle cache", June 2024).
"""

import gc
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import hpu
from hpu.core.runtime import pocl_shares_kernels_across_queues

cl = pytest.importorskip("pyopencl")

# Four leases of one runtime, each running a kernel it built from one source (new in the process) at once, the
# NDRanges wider one after the other; each writes the sum over j < REPS of j ^ i at i, checked against numpy.
_FOUR_QUEUES = textwrap.dedent('''
    import threading, time
    import numpy as np, pyopencl as cl, hpu
    REPS, N = 200000, 64 * 256
    rt = hpu.Runtime()
    leases = [rt.acquire_lease() for _ in range(4)]
    for trial in range(3):
        src = f"""#define TRIAL {trial}
    __kernel __attribute__((reqd_work_group_size(64, 1, 1))) void spin(__global int *a, int n, int reps)
    {{ int i = get_global_id(0), s = TRIAL; for (int j = 0; j < reps; ++j) s += j ^ i; if (i < n) a[i] = s; }}"""
        out = [np.full(N, -1, np.int32) for _ in leases]

        def run(k, lease):
            spin = cl.Kernel(lease.build(src), "spin")
            buf = cl.Buffer(lease.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=out[k])
            time.sleep(0.2 + 0.02 * k)
            spin(lease.queue, (64 * 64 * (k + 1),), (64,), buf, np.int32(N), np.int32(REPS))
            cl.enqueue_copy(lease.queue, out[k], buf, is_blocking=True)

        threads = [threading.Thread(target=run, args=(k, lease)) for k, lease in enumerate(leases)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        j = np.arange(REPS, dtype=np.int64)
        for k, o in enumerate(out):
            width = 64 * 64 * (k + 1)
            for i in (0, 1, width // 2, width - 1):
                want = np.int64(trial + np.bitwise_xor(j, i).sum()).astype(np.uint32).view(np.int32)
                assert o[i] == want, (trial, k, i, o[i], want)
            assert (o[width:] == -1).all()
    [rt.release_lease(lease) for lease in leases]
    rt.close()
    print("ok")
''')


@pytest.fixture
def device_rt():
    with hpu.Runtime() as rt:
        if not rt.has_device:
            pytest.skip("no OpenCL device")
        yield rt


def test_four_queues_running_one_new_kernel_at_once_end_right(device_rt):
    """Without a program of its own per queue, PoCL 3.1 aborts this script (an assertion of its kernel cache) on
    the first or second trial; every device must run it to the end with the right sums."""
    proc = subprocess.run([sys.executable, "-c", _FOUR_QUEUES], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok"], (
        f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}")


def _device(platform: str, version: str, kind: int):
    """A device as pyopencl shows it: PoCL's own version string names no release ("OpenCL 3.0 PoCL HSTR: <target>",
    in 3.1 and 7.x alike), its platform's does."""
    return types.SimpleNamespace(platform=types.SimpleNamespace(name=platform, version=version), type=kind,
                                 version="OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512")


@pytest.mark.parametrize("version, want", [
    ("OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, SPIR, LLVM 15.0.6", True),
    ("OpenCL 3.0 PoCL 6.0  Linux, Release, RELOC, LLVM 18.1.8", True),
    ("OpenCL 3.0 PoCL 7.0  Linux, Release, RELOC, LLVM 19.1.7", False),
    ("OpenCL 3.0 PoCL 7.1-pre main-0-g5066640  Linux", False),
    ("OpenCL 3.0 PoCL 10.2  Linux", False),
    ("OpenCL 3.0 an unknown build", True),
])
def test_which_pocl_releases_share_kernels_across_queues(version, want):
    """PoCL's CPU devices before 7.0 (the release with "fix dlhandle cache"); an unreadable version counts as one."""
    pocl = "Portable Computing Language"
    assert pocl_shares_kernels_across_queues(_device(pocl, version, int(cl.device_type.CPU))) is want
    # PoCL's GPU drivers keep no such cache; other platforms are not PoCL
    assert not pocl_shares_kernels_across_queues(_device(pocl, version, int(cl.device_type.GPU)))
    assert not pocl_shares_kernels_across_queues(_device("NVIDIA CUDA", version, int(cl.device_type.GPU)))
    assert not pocl_shares_kernels_across_queues(None)


def test_each_live_queue_builds_its_own_programs(device_rt):
    rt = device_rt
    if not pocl_shares_kernels_across_queues(rt.device):
        assert rt.queue_slot is None
        lease = rt.acquire_lease()
        assert lease.queue_slot is None and lease.build("__kernel void k() {}") is rt.build("__kernel void k() {}")
        rt.release_lease(lease)
        return
    leases = [rt.acquire_lease() for _ in range(3)]
    slots = [rt.queue_slot] + [lease.queue_slot for lease in leases]
    assert len(set(slots)) == 4 and all(isinstance(s, int) and s >= 0 for s in slots)
    src = "__kernel void k(__global int *a) { a[0] = 1; }"
    programs = [rt.build(src)] + [lease.build(src) for lease in leases]
    assert len({p.int_ptr for p in programs}) == 4
    assert leases[0].build(src) is programs[1] and rt.build(src) is programs[0]  # still built once per queue
    for slot, prg in zip(slots, programs):
        options = prg.get_build_info(rt.device, cl.program_build_info.OPTIONS)
        assert f"-DHPU_QUEUE_SLOT={slot}" in options.split()
    with pytest.raises(ValueError, match="context or a lease"):
        rt.build(src, context=rt.context, lease=leases[0])
    for lease in leases:
        rt.release_lease(lease)


def test_a_closed_runtime_gives_its_slots_back():
    gc.collect()  # leases and runtimes of earlier tests, collected later, would give lower slots back meanwhile
    with hpu.Runtime() as first:
        if not pocl_shares_kernels_across_queues(first.device):
            pytest.skip("the device needs no queue slots")
        lease = first.acquire_lease()
        held = {first.queue_slot, lease.queue_slot}
        first.release_lease(lease)
    # the smallest free slots are taken first, and nothing else of this test holds one
    with hpu.Runtime() as second:
        again = second.acquire_lease()
        assert {second.queue_slot, again.queue_slot} == held
        second.release_lease(again)


# A Runtime dropped unclosed after lending a lease is a reference cycle (its idle list and lease.runtime): the cyclic
# collector frees it, and the slots' finalizers run on the thread that triggered the collection, which may be inside
# the slots' lock taking one (with a plain lock: a hang for good, and every later lease or runtime with it).  The
# collection falls on the k-th tracked allocation after gc.enable().
_GC_IN_TAKE = textwrap.dedent('''
    import faulthandler, gc, sys
    import hpu
    faulthandler.dump_traceback_later(30, exit=True)
    rt, leases = hpu.Runtime(), []
    for k in range(int(sys.argv[1])):
        gc.collect()
        gc.disable()
        rt0 = hpu.Runtime(); lease0 = rt0.acquire_lease(); rt0.release_lease(lease0)
        del rt0, lease0
        gc.set_threshold(gc.get_count()[0] + k)
        gc.enable()
        leases.append(rt.acquire_lease())  # a new lease each time (none idle): it takes a slot
        gc.set_threshold(700)
    [rt.release_lease(lease) for lease in leases]
    print("ok")
''')


def test_a_collection_inside_taking_a_slot_does_not_hang(device_rt):
    if not pocl_shares_kernels_across_queues(device_rt.device):
        pytest.skip("the device needs no queue slots")
    proc = subprocess.run([sys.executable, "-c", _GC_IN_TAKE, "24"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok"], f"rc {proc.returncode}\n{proc.stderr[-3000:]}"


_SPIN = """__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void spin(__global int *a, int reps)
{ int i = get_global_id(0), s = 0; for (int j = 0; j < reps; ++j) s += j ^ i; a[i] = s; }"""


def test_a_dropped_lease_gives_its_slot_back_once_its_queue_is_idle(device_rt):
    """A lease dropped without being given back frees its slot when collected, and only once its queue has run
    what it was given: the next holder of the slot builds the same programs (the same build hashes)."""
    rt = device_rt
    if not pocl_shares_kernels_across_queues(rt.device):
        pytest.skip("the device needs no queue slots")
    lease = rt.acquire_lease()
    slot, n = lease.queue_slot, 64 * 64 * 4
    buf = cl.Buffer(lease.context, cl.mem_flags.READ_WRITE, 4 * n)
    event = cl.Kernel(lease.build(_SPIN), "spin")(lease.queue, (n,), (64,), buf, np.int32(400_000))
    lease.queue.flush()
    del lease
    gc.collect()
    again = rt.acquire_lease()
    try:
        done = event.command_execution_status == cl.command_execution_status.COMPLETE
        assert again.queue_slot != slot or done, f"slot {slot} lent again while the dropped lease's kernel runs"
    finally:
        event.wait()
        rt.release_lease(again)
