#!/usr/bin/env bash
# Runs benchmark stages on the H100 benchmark machine (a bare machine with python3 3.12, no pyopencl).
#
#   bash experiments/device_run.sh STAGE... (cpusort | pipeline | pipeline-parts | sort | sort-check | keyrange |
#                                            stress | default-runtime | kept | tests | argsort | argsort-check | dask |
#                                            tabu | tabu-more | tabu-resident | tabu-large | tabu-many | tabu-gantt |
#                                            sort-tests | rows | rows-kv | two-gpu | multi-device | pipeline-tasks |
#                                            pipeline-waves | glibc | bus | model-check | streaming |
#                                            keyrange-cap | work-group | tile-radix | pinned | pinned-pipeline |
#                                            pause | steady | keyrange-tests | ring | rows-share-trace | large |
#                                            review-tests | model-large | bus-gpus | floors |
#                                            staging-floor | call-gap | latency | ab | loop |
#                                            upload-chain | host-ptr | native-staging | onesweep | slices |
#                                            last-wave | model-rounds | ab-rows | staging-gap)
#
# Needs the wheels of pyopencl and its dependencies for that python in .whl/ (git-ignored; for the dask stage on a
# machine without dask, those of dask, distributed, partd, locket, tblib, tornado and zict too) and writes results
# to $OUT (default ./out).  PROFILE=FILE skips the calibration with a profile calibrated earlier on that kind of machine.
# cpusort: bench_cpusort (variants of the CPU share's parallel sort against numpy.sort).
# pipeline: bench_pipeline and bench_host_memory (where a device-only sort spends its time).
# pipeline-parts: bench_pipeline's key-value part (2^24 int32 keys, int64 values) and rows part (2^14 x 2^10
#                 float32), then the sort at 2^24 for scale: where each one's time goes.
# pipeline-tasks: bench_pipeline's sort, rows and key-value parts at 2^24 with the most staging tasks varied, medians
#                 of 15 calls; then the same with glibc's memcpy using non-temporal stores from 256 KiB on
#                 (GLIBC_TUNABLES; the machine's own threshold: stage glibc).
# native-staging: bench_pipeline's sort, rows and key-value parts at 2^24 with the pieces staged by hpu's compiled
#                 stager (hpu.core.streaming.NativeStaging) and by its Python pool's tasks, back to back and after
#                 20 ms idle.
# slices: bench_pipeline's sort (8 and 12 pieces a sort wave), rows and key-value parts at 2^24 with each staged piece
#         copied by all the compiled stager's threads in slices (PipelineOptions.staging_slices, the default) and by
#         one thread a piece (staging_slices=1), after 20 ms idle, each fastest call's pieces listed.
# last-wave: bench_pipeline's sort and key-value parts at 2^24 with the last two sort waves' pieces shared out as they
#            come (PipelineOptions.last_wave 0.5) and with the last a quarter (0.25, the default) and an eighth of
#            them, after 20 ms idle and back to back.
# onesweep: the one-pass-a-digit radix sort (DeviceSorter(algorithm="onesweep")): tests/test_fastsort.py on the GPU,
#           bench_fastsort (resident, 2^16-2^26) against the merge and tile radix sorts, bench_pipeline's sort and
#           key-value parts at 2^24 with it and the merge sort.
# streaming: the host's copies by streaming stores (hpu.core.streaming) against numpy.copyto: bench_bus's staging
#            copies (8 tasks), then bench_pipeline's sort, rows and key-value parts at 2^24 with each.
# ring: bench_bus's staged copies up through a ring of 2, 4 or 8 pinned pieces against the whole array's pinned
#       memory, after the idle pause, after 512 MiB of other work (cold caches) and back to back.
# rows-share-trace: bench_pipeline's rows (2^14 x 2^10 float32) with CPU shares of the rows (ROW_SHARES) and 4 or 8
#                   staging tasks, back to back and after 20 ms idle: where each phase starts and ends.
# large: check_large.py, 2^31 + 3 int32 keys (past 32-bit indices) sorted four ways on the GPU against numpy.sort.
# glibc: glibc's memcpy thresholds and the cache sizes it derives them from (ld.so --list-tunables, getconf).
# pipeline-waves: bench_pipeline's sort (2^24, 2^26) and key-value part (2^24) with the pieces per sort wave varied.
# sort: calibrate the GPU's profile, then bench_mergesort (fast mode).
# model-rounds: a fresh calibration up to 2^CAL_MAX_LOG (28), then bench_mergesort's default and device alone
#               2^22-2^28 without cupy's baselines in the rounds and with numpy.sort in rounds of its own (--no-cupy
#               --numpy-apart), 2^22-2^24 with both in the rounds, each against the model (model_vs_measured.py).
# sort-check: bench_mergesort at 2^24 only (the README's figure), with the same profile.
# keyrange: bench_mergesort 2^22-2^28 with the key-range split (the model's shares and forced CPU shares) beside the
#           device alone and the default, after tests/test_keyrange.py on the GPU; then 2^30 int32 with the device
#           capped at 1 GiB (sorted in pieces).  MIN_LOG, MAX_LOG and STRATEGIES override the first run's.
# stress: tests/test_stress.py as a script (16 threads x 100 calls on one runtime with the calibrated profile).
# default-runtime: bench_default_runtime (calls without runtime= against an explicit runtime; the uncalibrated default).
# kept: the calls part of bench_default_runtime at 2^24 (40 calls, 8 results kept) and 2^28 (8 calls, 4 kept): results
#       kept alive against results recycled, with a fresh calibration (the kept_pinned / kept_plain curves).
# argsort: bench_argsort (hpu.argsort, hpu.sort_by_key, 2-D hpu.sort against numpy, cupy and torch), 2^22-2^26.
# argsort-check: bench_argsort at 2^24 only (the issue's figures), then tests/test_argsort.py and tests/test_rowsort.py
#                on the GPU.
# tests: the test suite with the GPU as hpu's default device (PYOPENCL_CTX=gpu; notebooks left out: no Jupyter
#        kernel there).
# dask: bench_dask_partition (one block partitioned both ways on the GPU), then bench_dask, $DASK_WORKERS workers
#       (default 1,2; a GPU each where there are several, 8 threads each) against dask.dataframe's sort_values,
#       2^26-2^28 int64 keys (MIN_LOG, MAX_LOG, DASK_ROUNDS override), into bench_dask_w$DASK_WORKERS.json and .log
#       (its first comma a dash: bench_dask_w1-2.json)
#       (one call per worker count fits the 10-minute limit; on nvidia-h200-x2 both GPUs share one cached
#       profile: they have one name).  DASK_SECONDS: the run's limit (default 540); DASK_ARGS: more arguments of
#       bench_dask.py; DASK_PARTITION=0 skips bench_dask_partition.
# tabu: bench_tabu on the QAP and HW/SW instances of issue 5 (the tabu split has its own calibration).
# tabu-more: bench_tabu on flow shop, permuted perceptron and the hybrid EA.
# tabu-resident: the tabu tests on the GPU, then bench_tabu_resident (iterations resident on the device, K per round
#                trip, against the host loop and one numpy core).
# tabu-many: tests/test_tabu_many.py on the GPU, then bench_tabu_many (64 searches batched, on the CPU's threads, the
#            model's division and forced ones, against the same searches one after another on the device);
#            TABU_MANY_INSTANCES (default tai30a) and TABU_MANY_ROUNDS (default 2).
# tabu-gantt: sweep_tabu_gantt on tai100a (traced host loop and resident blocks: where an iteration's time goes),
#             2048 iterations in blocks of 1024, then 32 in blocks of 8 (in k8/).
# tabu-large: bench_tabu_resident on the largest instances of the papers' tables at the model's level only: PPP
#             1301-1317 with Hamming 1 (256 iterations), then Hamming 2 and ta111 (64 iterations, 280 s each).
# bus: bench_bus (the PCIe copies from and to pinned and pageable memory and the staging copies, cupy's copies
#      beside), 64 MiB, after idle pauses and back to back.
# bus-gpus: nvidia-smi topo -m, then bench_bus with every GPU's copies at once from one thread, from a thread each,
#           from a process each, and by cupy, beside one GPU's (one GPU: its two directions from a process each).
# work-group: kernel_work_group (the largest work-group the driver reports for a kernel, against a launch).
# keyrange-cap: bench_mergesort of 2^30 int32 on the device with hpu allowed 1 GiB of it (sorted in key ranges).
# keyrange-tests: tests/test_keyrange.py, tests/test_cpusort.py and tests/test_hostmem.py on the GPU.
# model-check: calibrate (fresh unless PROFILE), then bench_mergesort's default, device, CPU and key-range
#              strategies, 2^16-2^28, each beside the model's prediction.
# rows: bench_argsort's rows part alone (2^14 x 2^10 float32), CPU shares ROW_ALPHAS (default 0.05-0.5) forced.
# model-large: a calibration with the sort's curves up to 2^CAL_MAX_LOG keys (default 28; its time logged),
#              bench_mergesort's default and device alone at 2^22-2^28 with it, and model_vs_measured with it and with
#              PROFILE (default the committed results/h100/profile_direct.json, curves up to 2^26).
# rows-kv: bench_argsort's rows (2^14 x 2^10 float32) and key-value (2^24 int32 keys, int64 values) parts alone.
# two-gpu: on a machine of two GPUs (nvidia-h100-x2, nvidia-h200-x2): how they are linked, the exchange and key-range
#          tests on the GPU, then bench_mergesort over every GPU (gpu: the first alone; exchange, keyrange, auto: all)
#          at 2^24-2^28 int32 and a Gantt chart of one exchange sort at 2^28 (both GPUs share one cached profile:
#          they have one name).  MIN_LOG and MAX_LOG override the sizes.
# floors: on a machine of two GPUs, what bounds the issues' two-GPU targets, all into floors.log: bench_mergesort at
#         2^28 int32 (the first GPU alone, the exchange sort over both, the default; cupy's and numpy's sorts), then
#         bench_bus --only at 1 GiB with 8 and 16 staging threads a GPU (bench_bus_floors_t{8,16}.json): staged
#         copies there and back on one GPU and split between two (a thread each; a process each, also gathered into
#         one shared block) and the pinned copies up and down on both GPUs (one thread, a thread each, a process
#         each, cupy's), and bench_dask at 2^28 int64 (bench_dask_floors.json: one worker's hpu.dask.sort; two
#         workers' and their exchange of n/4 keys each way; FLOORS_DASK=0 leaves it out).
# staging-floor: on a machine of two GPUs, bench_mergesort at 2^28 int32 (the first GPU alone, the exchange sort over
#                both), then bench_bus: 1 GiB of pageable memory staged into pinned memory by 8, 16 and 32 tasks, and
#                512 MiB copied down from one GPU into pinned memory (a GPU's half of the result), into
#                staging_floor.log: what any two-GPU sort of a pageable array into host memory pays at least.
# staging-gap: on a machine of two GPUs, bench_bus's staged copies of 1 GiB (8 tasks: one GPU's copies up; both GPUs'
#              halves, up alone and up then down), then bench_mergesort at 2^27 and 2^28 int32 (the first GPU alone,
#              the exchange sort over both, the default) and a Gantt chart of the exchange at 2^28 (in gantt/): the
#              sorts beside the least their copies take.
# multi-device: bench_multi_device on every GPU (each one's copy rates from and to each kind of host memory, then
#               gpu against the exchange sort's two routes, call by call).
# tile-radix: the device's sorts, merge sort against the GPU-shaped radix sort: their tests on the GPU, bench_fastsort
#             resident (int32, 2^16-2^26), then bench_pipeline's sort and key-value parts at 2^24 with each (waves on
#             and off; medians of 15 interleaved calls).
# pinned: inputs in hpu's pinned memory (not staged) beside pageable ones at 2^24: bench_mergesort's gpu, gpu+pinned
#         and auto strategies, then bench_argsort's int32 parts (its "pinned" variants beside cupy's).
# pinned-pipeline: bench_pipeline's sort (pieces per wave varied), rows and key-value parts at 2^24 from pageable and
#                  from pinned inputs, medians of 15 interleaved calls.
# pause: bench_pipeline's sort and rows parts at 2^24 back to back and with 200 ms idle before each call (as between
#        a program's calls, or bench_mergesort's and bench_argsort's rounds with numpy), medians of 15.
# call-gap: bench_pipeline's sort and rows parts at 2^24 back to back and after 20 ms idle (bench_common's pause), with
#           Python's switch interval and with 0.5 ms: the time by the call's trace against the caller's clock; then
#           bench_mergesort (2^24 int32: gpu, auto) and bench_argsort's rows part after idle pauses, with the profile.
# latency: bench_latency (the OpenCL and pool round trips of a device sort, and hpu's device sort at 2^10-2^24,
#          after idle pauses and back to back).
# upload-chain: bench_upload_chain (the staged pieces' copies up behind user events, enqueued by the staging tasks,
#               in slices), 64 MiB in pieces of 4 MiB, then 192 MiB in pieces of 8 MiB (the key-value sort's).
# host-ptr: bench_host_ptr (USE_HOST_PTR buffers over the caller's pageable array against hpu's staging), 64 and
#           256 MiB.
# ab: bench_targets and bench_latency with hpu as it is and with AB_PATCH (a git diff, e.g. of one commit against
#     its parent) reversed, in AB_ROUNDS (default 3) interleaved rounds (each side first in every other round),
#     after an untimed bench_targets, with the profile; bench_latency's device sorts at AB_LATENCY_LOGS (default
#     10,16,20).
# ab-rows: bench_pipeline's rows (2^14 x 2^10 float32, 4 MiB pieces, medians of 21 calls after 20 ms idle and back
#          to back) with hpu as it is and with AB_PATCH reversed, in AB_ROUNDS (default 3) interleaved rounds; then
#          bench_targets so in 2 rounds, after an untimed one, with the profile.
# loop: bench_loop (loops of LOOP_CALLS calls, default 400, of hpu.sort, hpu.argsort, hpu.sort_by_key and rows at
#       2^24, results dropped and each kept until the next call returns), with the profile; with AB_PATCH also with
#       that diff reversed, in AB_ROUNDS (default 2) interleaved rounds.  Then bench_small (the calls on small arrays).
# steady: bench_mergesort (2^24 int32: gpu, gpu+pinned, auto) and bench_argsort (2^24 int32: argsort, kv, rows) with
#         each call after an idle pause (their default) and back to back (--back-to-back), with the profile.
# review-tests: tests/test_hostmem.py, test_faults.py, test_keyrange.py, test_exchange.py, test_model.py and
#               test_rowsort.py on the GPU (the files of the last review's fixes; REVIEW_TESTS names others).
# sort-tests: tests/test_fastsort.py, tests/test_argsort.py and tests/test_rowsort.py on the GPU (both device sorts,
#             merge and radix).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" /tmp/icd
cp /etc/OpenCL/vendors/*.icd /tmp/icd/ 2>/dev/null || true
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site HPU_PROFILE_DIR=/tmp/hpu-profiles
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
profile=$OUT/h100.json
calibrate() {  # into the user cache too (HPU_PROFILE_DIR), where Runtime("gpu") finds it
    [ -f "$profile" ] && return
    if [ -n "${PROFILE:-}" ]; then  # a profile calibrated earlier on this kind of machine
        mkdir -p "$HPU_PROFILE_DIR"
        cp "$PROFILE" "$profile"
        cp "$PROFILE" "$(python3 -c "from hpu.core.runtime import default_profile_path as p, select_device as d
print(p(d('gpu')))")"
        return
    fi
    python3 -m hpu.calibrate --device gpu --no-progress --force 2>&1 | tee "$OUT/calibrate.log"
    cp "$HPU_PROFILE_DIR"/*.json "$profile"
}
ab_rounds() {  # ab_rounds ROUNDS FN: FN ROUND SIDE for each side of each round, hpu as it is ("after") and with
               # AB_PATCH (a git diff) reversed ("before"), each side first in every other round (no AB_PATCH: "after"
               # alone); hpu's C libraries built again for each side where the patch changes their sources
    local rebuild=true round side sides
    if [ -f "${AB_PATCH:-}" ] && grep -q '^diff --git a/.*\.c ' "$AB_PATCH"; then
        rebuild="python3 -m pip install -q --no-deps --no-build-isolation -e ."
    fi
    for round in $(seq "$1"); do
        sides="after"
        if [ -f "${AB_PATCH:-}" ]; then
            sides="after before"
            [ $((round % 2)) = 0 ] && sides="before after"
        fi
        for side in $sides; do
            if [ $side = before ]; then patch -R -s -p1 < "$AB_PATCH"; fi
            $rebuild >/dev/null
            "$2" "$round" "$side"
            # not an && list: last in the loop, a false test failed the stage
            if [ $side = before ]; then patch -s -p1 < "$AB_PATCH"; fi
        done
    done
}
keyrange_cap() {  # 2^30 int32 with hpu allowed 1 GiB of the device: CAP_STRATEGIES (default gpu: in key ranges),
                  # CAP_REPEATS timed calls each (default 1)
    python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log 30 --max-log 30 \
        --repeats "${CAP_REPEATS:-1}" --strategies "${CAP_STRATEGIES:-gpu}" --device-memory-limit $((1 << 30)) \
        --json "$OUT/bench_keyrange_cap.json" 2>&1 | tee "$OUT/bench_keyrange_cap.log"
}
for stage in "$@"; do
    case $stage in
    cpusort)
        python3 experiments/bench_cpusort.py --log 22,24,26,28 --threads 16 --rounds 5 --json "$OUT/bench_cpusort.json"
        ;;
    pipeline)
        python3 experiments/bench_pipeline.py --device gpu --json "$OUT/pipeline.json"
        python3 experiments/bench_host_memory.py --device gpu --json "$OUT/host_memory.json"
        ;;
    pipeline-parts)
        for part in kv rows sort; do
            python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 \
                --chunks-mib "${CHUNKS_MIB:-2,4,8,16}" --waves on --repeats 5 --json "$OUT/pipeline_$part.json" \
                2>&1 | tee "$OUT/pipeline_$part.log"
        done
        ;;
    pipeline-tasks)
        for nt in "" glibc.cpu.x86_non_temporal_threshold=0x40000; do
            for part in sort rows kv; do
                GLIBC_TUNABLES=$nt python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 \
                    --max-log 24 --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --tasks 4,6,8,16 --waves on \
                    --repeats 15
            done 2>&1 | tee "$OUT/pipeline_tasks${nt:+_nt}.log"
        done
        ;;
    slices)  # each staged piece copied by all the stager's threads in slices (ending in order) against a piece a
             # thread: a sort (8 and 12 pieces a sort wave), rows and a key-value sort at 2^24, medians of 15
             # interleaved calls after 20 ms idle, the fastest call's pieces listed
        for part in sort rows kv; do
            python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 --waves on \
                --streams on --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --slices auto,1 --repeats 15 \
                --pause-ms 20 --pieces --wave-pieces "$([ $part = sort ] && echo auto,12 || echo auto)" \
                --json "$OUT/pipeline_slices_$part.json"
        done 2>&1 | tee "$OUT/slices.log"
        ;;
    last-wave)  # the last two sort waves' pieces shared out again (PipelineOptions.last_wave): a sort and a key-value
                # sort at 2^24, medians of 15 interleaved calls after 20 ms idle and back to back
        for pause in 20 0; do
            for part in sort kv; do
                python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 --waves on \
                    --streams on --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --last-wave 0.5,0.25,0.125 \
                    --repeats 15 --pause-ms $pause --json "$OUT/pipeline_last_wave_${part}_p$pause.json"
            done
        done 2>&1 | tee "$OUT/last_wave.log"
        ;;
    native-staging)  # the pieces staged by hpu's compiled stager against its Python pool's tasks: a sort, rows and a
                     # key-value sort at 2^24, medians of 15 interleaved calls, back to back and after 20 ms idle
        { python3 -c "from hpu.core.streaming import native_staging_available as s; print('stager built:', s())"
          for pause in 0 20; do
              for part in sort rows kv; do
                  python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 \
                      --waves on --streams on --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --native on,off \
                      --repeats 15 --pause-ms $pause --json "$OUT/pipeline_native_${part}_p$pause.json"
              done
          done
        } 2>&1 | tee "$OUT/native_staging.log"
        ;;
    streaming)  # the host's copies by streaming stores against numpy.copyto: 64 MiB staged alone (bench_bus), then
                # a sort, rows and a key-value sort at 2^24 with each (stream_copies), medians of 15 interleaved calls
        { python3 -c "from hpu.core.streaming import streaming_available as s; print('streaming copies built:', s())"
          timeout 300 python3 experiments/bench_bus.py --device gpu --tasks 8 --json "$OUT/bench_bus_streaming.json"
          for part in sort rows kv; do
              python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 --waves on \
                  --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --streams on,off --repeats 15 \
                  --json "$OUT/pipeline_streaming_$part.json"
          done
        } 2>&1 | tee "$OUT/streaming.log"
        ;;
    onesweep)  # the one-pass-a-digit radix sort: its tests on the GPU, resident against the merge and tile radix
               # sorts, then in the pipeline at 2^24 (sort and key-value sort) against the merge sort
        { PYOPENCL_CTX=gpu timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_fastsort.py 2>&1 | tail -5
          python3 experiments/bench_fastsort.py --device gpu --sizes 16-26 --algorithms merge,tile-radix,onesweep \
              --no-baselines --json "$OUT/fastsort_onesweep.json"
          for part in sort kv; do
              python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 --waves on,off \
                  --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --streams on --device-sorts merge,onesweep \
                  --repeats 15 --json "$OUT/pipeline_onesweep_$part.json"
          done
        } 2>&1 | tee "$OUT/onesweep.log"
        ;;
    tile-radix)
        { PYOPENCL_CTX=gpu timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_fastsort.py \
              tests/test_faults.py tests/test_mergesort.py tests/test_argsort.py \
              -k "fastsort or waves or fault_mid or keyed_sort_on_the_device" 2>&1 | tail -5
          python3 experiments/bench_fastsort.py --device gpu --sizes 16-26 --algorithms merge,tile-radix \
              --json "$OUT/fastsort_tile_radix.json"
          for part in sort kv; do
              python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 --waves on,off \
                  --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --streams on --device-sorts merge,tile-radix \
                  --repeats 15 --json "$OUT/pipeline_tile_radix_$part.json"
          done
        } 2>&1 | tee "$OUT/tile_radix.log"
        ;;
    glibc)
        { ldd --version | sed -n 1p  # sed reads to the end: no SIGPIPE under pipefail
          /lib64/ld-linux-x86-64.so.2 --list-tunables | grep -E "non_temporal|rep_movsb|cache_size" || true
          getconf -a | grep -E "LEVEL[123]_D?CACHE_SIZE" || true
        } 2>&1 | tee "$OUT/glibc_tunables.txt"
        ;;
    pipeline-waves)
        for part in sort kv; do
            python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 \
                --max-log "$([ $part = kv ] && echo 24 || echo 26)" \
                --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --wave-pieces auto,4,2,1 --waves on --repeats 15
        done 2>&1 | tee "$OUT/pipeline_waves.log"
        ;;
    sort)
        calibrate
        python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log 16 --max-log 27 \
            --repeats 11 --variants 24 --json "$OUT/bench_mergesort_fast.json" 2>&1 | tee "$OUT/bench_mergesort.log"
        ;;
    model-check)
        calibrate
        python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log 16 --max-log 28 \
            --strategies auto,gpu,cpu,keyrange --repeats 7 --slow 2 --json "$OUT/bench_mergesort_model.json" 2>&1 \
            | tee "$OUT/bench_mergesort_model.log"
        ;;
    model-large)  # the sort's curves calibrated up to 2^28 keys (--max-log), then the model against measurement
        t0=$(date +%s)
        python3 -m hpu.calibrate --device gpu --no-progress --force --max-log "${CAL_MAX_LOG:-28}" \
            --out "$OUT/profile_large.json" 2>&1 | tee "$OUT/calibrate_large.log"
        echo "calibration: $(($(date +%s) - t0)) s" | tee -a "$OUT/calibrate_large.log"
        python3 experiments/bench_mergesort.py --device gpu --profile "$OUT/profile_large.json" --min-log 22 \
            --max-log 28 --strategies auto,gpu --repeats 5 --slow 2 --json "$OUT/bench_mergesort_large.json" 2>&1 \
            | tee "$OUT/bench_mergesort_large.log"
        for prof in "$OUT/profile_large.json" "${PROFILE:-experiments/results/h100/profile_direct.json}"; do
            python3 experiments/model_vs_measured.py "$OUT/bench_mergesort_large.json" "$prof"
        done 2>&1 | tee "$OUT/model_vs_measured_large.log"
        ;;
    model-rounds)  # the model against measurement with the baselines kept out of hpu's rounds and in them
        t0=$(date +%s)
        python3 -m hpu.calibrate --device gpu --no-progress --force --max-log "${CAL_MAX_LOG:-28}" \
            --out "$OUT/profile_large.json" 2>&1 | tee "$OUT/calibrate_large.log"
        echo "calibration: $(($(date +%s) - t0)) s" | tee -a "$OUT/calibrate_large.log"
        python3 experiments/bench_mergesort.py --device gpu --profile "$OUT/profile_large.json" --min-log 22 \
            --max-log 28 --strategies auto,gpu --repeats 5 --slow 2 --no-cupy --numpy-apart \
            --json "$OUT/bench_mergesort_nocupy.json" 2>&1 | tee "$OUT/bench_mergesort_nocupy.log"
        python3 experiments/bench_mergesort.py --device gpu --profile "$OUT/profile_large.json" --min-log 22 \
            --max-log 24 --strategies auto,gpu --repeats 5 --json "$OUT/bench_mergesort_cupy.json" 2>&1 \
            | tee "$OUT/bench_mergesort_cupy.log"
        for run in nocupy cupy; do
            python3 experiments/model_vs_measured.py "$OUT/bench_mergesort_$run.json" "$OUT/profile_large.json"
        done 2>&1 | tee "$OUT/model_vs_measured.log"
        ;;
    pinned)
        calibrate
        { python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log 24 --max-log 24 \
              --repeats 11 --strategies gpu,gpu+pinned,auto --json "$OUT/bench_mergesort_pinned.json"
          python3 experiments/bench_argsort.py --device gpu --profile "$profile" --min-log 24 --max-log 24 --slow 5 \
              --dtypes int32 --json "$OUT/bench_argsort_pinned.json"
        } 2>&1 | tee "$OUT/pinned.log"
        ;;
    pinned-pipeline)
        for part in sort rows kv; do
            python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 --waves on \
                --chunks-mib "$([ $part = kv ] && echo 8 || echo 4)" --streams on --memory pageable,pinned \
                --wave-pieces "$([ $part = sort ] && echo auto,4,2 || echo auto)" --repeats 15 \
                --json "$OUT/pipeline_pinned_$part.json"
        done 2>&1 | tee "$OUT/pipeline_pinned.log"
        ;;
    pause)
        for pause in 0 200; do
            for part in sort rows; do
                python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 --waves on \
                    --chunks-mib 4 --streams on --memory pageable,pinned --repeats 15 --pause-ms $pause \
                    --json "$OUT/pipeline_pause${pause}_$part.json"
            done
        done 2>&1 | tee "$OUT/pipeline_pause.log"
        ;;
    ab)
        [ -f "${AB_PATCH:-}" ] || { echo "stage ab needs AB_PATCH, a git diff to reverse" >&2; exit 2; }
        calibrate
        # untimed: a fresh machine's first calls are slow, and would count against the side that comes first
        python3 experiments/bench_targets.py --device gpu --profile "$profile" --repeats 3 >/dev/null 2>&1
        ab_side() {
            echo "## round $1: $2"
            python3 experiments/bench_targets.py --device gpu --profile "$profile" \
                --json "$OUT/ab_targets_$2.json"  # the last round's (a call brings back 8 files)
            python3 experiments/bench_latency.py --device gpu --profile "$profile" \
                --logs "${AB_LATENCY_LOGS:-10,16,20}" --repeats 11
        }
        ab_rounds "${AB_ROUNDS:-3}" ab_side 2>&1 | tee "$OUT/ab.log"
        ;;
    ab-rows)
        [ -f "${AB_PATCH:-}" ] || { echo "stage ab-rows needs AB_PATCH, a git diff to reverse" >&2; exit 2; }
        rows_side() {
            for pause in 20 0; do
                echo "## round $1: $2, pause $pause"
                python3 experiments/bench_pipeline.py --device gpu --part rows --min-log 24 --max-log 24 \
                    --chunks-mib 4 --waves on --streams on --pause-ms $pause --repeats 21 \
                    --json "$OUT/pipeline_rows_$2_p$pause.json" 2>&1 | grep -v '^#'
            done
        }
        ab_rounds "${AB_ROUNDS:-3}" rows_side 2>&1 | tee "$OUT/ab_pipeline.log"
        calibrate
        python3 experiments/bench_targets.py --device gpu --profile "$profile" --repeats 3 >/dev/null 2>&1
        targets_side() {
            echo "## round $1: $2"
            python3 experiments/bench_targets.py --device gpu --profile "$profile" --json "$OUT/targets_$2.json"
        }
        ab_rounds 2 targets_side 2>&1 | tee "$OUT/ab_targets.log"
        ;;
    loop)
        calibrate
        loop_side() {
            echo "## round $1: $2"
            python3 experiments/bench_loop.py --device gpu --profile "$profile" --calls "${LOOP_CALLS:-400}" \
                --json "$OUT/bench_loop_$2_$1.json"
        }
        ab_rounds "${AB_ROUNDS:-2}" loop_side 2>&1 | tee "$OUT/loop.log"
        python3 experiments/bench_small.py --json "$OUT/bench_small.json" 2>&1 | tee "$OUT/small.log"
        ;;
    latency)
        python3 experiments/bench_latency.py --device gpu --logs ${LATENCY_LOGS:-10,16,20,24} \
            --json "$OUT/bench_latency.json" 2>&1 | tee "$OUT/latency.log"
        ;;
    upload-chain)
        python3 experiments/bench_upload_chain.py --device gpu --json "$OUT/bench_upload_chain.json" 2>&1 \
            | tee "$OUT/upload_chain.log"
        python3 experiments/bench_upload_chain.py --device gpu --mib 192 --piece-mib 8 --slices-mib 2,1 \
            --tasks 12 --json "$OUT/bench_upload_chain_kv.json" 2>&1 | tee -a "$OUT/upload_chain.log"
        ;;
    host-ptr)
        { python3 experiments/bench_host_ptr.py --device gpu --json "$OUT/bench_host_ptr.json"
          python3 experiments/bench_host_ptr.py --device gpu --mib 256 --repeats 5 --json "$OUT/bench_host_ptr_256.json"
        } 2>&1 | tee "$OUT/host_ptr.log"
        ;;
    call-gap)
        calibrate
        for pause in 0 20; do
            for part in sort rows; do
                for si in 0.005 0.0005; do
                    python3 experiments/bench_pipeline.py --device gpu --part $part --min-log 24 --max-log 24 \
                        --waves on --chunks-mib 4 --streams on --repeats 15 --pause-ms $pause --switch-interval $si \
                        --json "$OUT/pipeline_gap_pause${pause}_${part}_si${si}.json"
                done
            done
        done 2>&1 | tee "$OUT/call_gap.log"
        python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log 24 --max-log 24 \
            --repeats 11 --strategies gpu,auto --json "$OUT/bench_mergesort_gap.json" 2>&1 | tee -a "$OUT/call_gap.log"
        python3 experiments/bench_argsort.py --device gpu --profile "$profile" --parts rows --slow 5 --repeats 7 \
            --json "$OUT/bench_argsort_gap.json" 2>&1 | tee -a "$OUT/call_gap.log"
        ;;
    steady)
        calibrate
        for mode in pauses back-to-back; do
            flag=$([ $mode = back-to-back ] && echo --back-to-back || true)
            python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log 24 --max-log 24 \
                --repeats 11 --strategies gpu,gpu+pinned,auto $flag --json "$OUT/bench_mergesort_$mode.json"
            python3 experiments/bench_argsort.py --device gpu --profile "$profile" --min-log 24 --max-log 24 \
                --dtypes int32 --slow 5 --repeats 7 $flag --json "$OUT/bench_argsort_$mode.json"
        done 2>&1 | tee "$OUT/steady.log"
        ;;
    sort-check)
        calibrate
        python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log 24 --max-log 24 \
            --repeats 11 --variants 24 --json "$OUT/bench_mergesort_check.json" 2>&1 | tee "$OUT/bench_mergesort_check.log"
        ;;
    keyrange)
        calibrate
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider tests/test_keyrange.py 2>&1 | tail -3 | tee "$OUT/tests_keyrange.log"
        python3 experiments/bench_mergesort.py --device gpu --profile "$profile" --min-log "${MIN_LOG:-22}" \
            --max-log "${MAX_LOG:-28}" --repeats 5 \
            --strategies "${STRATEGIES:-gpu,auto,keyrange,keyrange@0.05,keyrange@0.1,keyrange@0.2,advanced}" \
            --json "$OUT/bench_keyrange.json" 2>&1 | tee "$OUT/bench_keyrange.log"
        keyrange_cap
        ;;
    keyrange-cap)
        calibrate
        keyrange_cap
        ;;
    stress)
        calibrate
        python3 tests/test_stress.py --threads 16 --calls 100 --device gpu 2>&1 | tee "$OUT/stress.log"
        ;;
    default-runtime)
        calibrate
        python3 experiments/bench_default_runtime.py --machine h100 --parts calls --use-cached-profile \
            --out "$OUT/default_runtime_calls.json" 2>&1 | tee "$OUT/default_runtime.log"
        python3 experiments/bench_default_runtime.py --machine h100 --parts uncalibrated \
            --out "$OUT/default_runtime_uncalibrated.json" 2>&1 | tee -a "$OUT/default_runtime.log"
        ;;
    kept)
        calibrate
        for spec in 24:40:8 28:8:4; do
            IFS=: read -r L C K <<< "$spec"
            python3 experiments/bench_default_runtime.py --machine h100 --parts calls --use-cached-profile \
                --calls-log "$L" --calls "$C" --call-rounds 4 --keep "$K" --first-repeats 1 \
                --out "$OUT/default_runtime_kept_2e$L.json" 2>&1 | tee "$OUT/default_runtime_kept_2e$L.log"
        done
        ;;
    argsort)
        calibrate
        python3 experiments/bench_argsort.py --device gpu --profile "$profile" --min-log 22 --max-log 26 --slow 1.5 \
            --json "$OUT/bench_argsort.json" 2>&1 | tee "$OUT/bench_argsort.log"
        ;;
    argsort-check)
        calibrate
        python3 experiments/bench_argsort.py --device gpu --profile "$profile" --min-log 24 --max-log 24 --slow 5 \
            --json "$OUT/bench_argsort_check.json" 2>&1 | tee "$OUT/bench_argsort_check.log"
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider tests/test_argsort.py tests/test_rowsort.py 2>&1 \
            | tail -15 | tee "$OUT/tests_argsort.log"
        ;;
    rows-kv)
        calibrate
        python3 experiments/bench_argsort.py --device gpu --profile "$profile" --parts rows,kv --dtypes int32 \
            --min-log 24 --max-log 24 --slow 5 --json "$OUT/bench_argsort_rows.json" 2>&1 | tee "$OUT/bench_argsort_rows.log"
        ;;
    work-group)
        python3 experiments/kernel_work_group.py --device gpu --json "$OUT/kernel_work_group.json" 2>&1 \
            | tee "$OUT/kernel_work_group.log"
        ;;
    bus)
        timeout 300 python3 experiments/bench_bus.py --device gpu --json "$OUT/bench_bus.json" 2>&1 \
            | tee "$OUT/bench_bus.log"
        timeout 300 python3 experiments/bench_bus.py --device gpu --pause 0 --json "$OUT/bench_bus_back_to_back.json" \
            2>&1 | tee "$OUT/bench_bus_back_to_back.log"
        ;;
    bus-gpus)  # the GPUs' links, then bench_bus's copies on every GPU at once (OpenCL from one thread, a thread each
        # and a process each, and cupy's) beside one GPU's, after pauses
        nvidia-smi topo -m 2>&1 | tee "$OUT/topo_gpus.log"
        timeout 300 python3 experiments/bench_bus.py --device gpu --tasks 8 --ring "" --rounds 11 \
            --json "$OUT/bench_bus_gpus.json" 2>&1 | tee "$OUT/bench_bus_gpus.log"
        ;;
    ring)  # staging through a ring of pinned pieces against pinned memory the array's size (bench_bus), after the
           # idle pause, after 512 MiB of other work (cold caches) and back to back
        for run in "pause:" "flush:--flush-mib 512" "back_to_back:--pause 0"; do
            timeout 300 python3 experiments/bench_bus.py --device gpu --tasks 8 --ring 2,4,8 --rounds 11 ${run#*:} \
                --json "$OUT/bench_bus_ring_${run%%:*}.json" 2>&1 | tee "$OUT/bench_bus_ring_${run%%:*}.log"
        done
        ;;
    large)  # past 2^31 keys: 2^31 + 3 int32 sorted by default, on the device alone, and with the device capped at
            # 1 GiB (by default and on the device in key ranges), each checked against numpy.sort
        calibrate
        python3 experiments/check_large.py --device gpu --log 31 --extra 3 --strategies auto,gpu,capped,capped-gpu \
            --cap-gib 1 2>&1 | tee "$OUT/check_large.log"
        ;;
    rows-share-trace)  # where a CPU share of the rows goes: bench_pipeline's rows with the CPU's share and the staging
                       # tasks varied, back to back and after 20 ms idle
        for pause in 0 20; do
            python3 experiments/bench_pipeline.py --device gpu --part rows --min-log 24 --max-log 24 --chunks-mib 4 \
                --waves on --streams on --tasks 4,8 --cpu-rows "${ROW_SHARES:-0,0.05,0.1,0.2,0.3}" --repeats 9 \
                --pause-ms $pause --json "$OUT/pipeline_rows_share_pause$pause.json"
        done 2>&1 | tee "$OUT/pipeline_rows_share.log"
        ;;
    rows)
        calibrate
        python3 experiments/bench_argsort.py --device gpu --profile "$profile" --parts rows --slow 5 \
            --row-alphas "${ROW_ALPHAS:-0.05,0.1,0.2,0.3,0.4,0.5}" --json "$OUT/bench_argsort_rows_share.json" 2>&1 \
            | tee "$OUT/bench_argsort_rows_share.log"
        ;;
    dask)
        calibrate
        w=${DASK_WORKERS:-1,2}
        if [ "${DASK_PARTITION:-1}" != 0 ]; then
            python3 experiments/bench_dask_partition.py --min-log 22 --max-log 24 --threads 8 \
                --json "$OUT/bench_dask_partition.json" 2>&1 | tee "$OUT/bench_dask_partition.log"
        fi
        # shellcheck disable=SC2086
        timeout "${DASK_SECONDS:-540}" python3 experiments/bench_dask.py --workers "$w" --threads 8 \
            --min-log "${MIN_LOG:-26}" --max-log "${MAX_LOG:-28}" --chunk 16777216 --rounds "${DASK_ROUNDS:-2}" \
            ${DASK_ARGS:-} --json "$OUT/bench_dask_w${w/,/-}.json" 2>&1 | grep -v WARNING \
            | tee "$OUT/bench_dask_w${w/,/-}.log"
        ;;
    floors)  # on a machine of two GPUs: the least the host does for the issues' two-GPU targets, beside one GPU
        calibrate
        { python3 experiments/bench_mergesort.py --devices all --profile "$profile" --min-log 28 --max-log 28 \
              --repeats 5 --strategies gpu,exchange,auto 2>&1
          for t in 8 16; do
              python3 experiments/bench_bus.py --device gpu --mib 1024 --tasks "$t" --ring '' --rounds 7 \
                  --only "stage + h2d + d2h,h2d + d2h x" --json "$OUT/bench_bus_floors_t$t.json" 2>&1
          done
          if [ "${FLOORS_DASK:-1}" != 0 ]; then
              python3 experiments/bench_dask.py --workers 1,2 --threads 8 --min-log 28 --max-log 28 \
                  --chunk 16777216 --rounds 3 --variants hpu,exchange --json "$OUT/bench_dask_floors.json" 2>&1 \
                  | grep -v WARNING
          fi
        } | tee "$OUT/floors.log"
        ;;
    staging-floor)  # the host's side of a sort of 2^28 int32 from pageable memory on two GPUs, beside the sorts
        calibrate
        { python3 experiments/bench_mergesort.py --devices all --profile "$profile" --min-log 28 --max-log 28 \
              --repeats 5 --strategies gpu,exchange 2>&1
          python3 experiments/bench_bus.py --device gpu --mib 1024 --tasks 8,16,32 --ring '' --rounds 7 \
              --only "stage 8 tasks,stage 16 tasks,stage 32 tasks" --json "$OUT/bench_bus_stage_1gib.json" 2>&1
          python3 experiments/bench_bus.py --device gpu --mib 512 --tasks 8 --ring '' --rounds 7 --only "d2h pinned" \
              --json "$OUT/bench_bus_d2h_512mib.json" 2>&1
        } | tee "$OUT/staging_floor.log"
        ;;
    staging-gap)  # on two GPUs: bench_bus's staged copies of 1 GiB with nothing else (up alone; up, then down) beside
                  # hpu's sorts of 2^27 and 2^28 int32 (one GPU, the exchange, the default) and the exchange's Gantt
        calibrate
        { python3 experiments/bench_bus.py --device gpu --mib 1024 --tasks 8 --ring '' --rounds 7 \
              --only "stage + h2d 8 tasks,shares on x2 GPUs, a thread each" --json "$OUT/bench_bus_gap.json" 2>&1
          python3 experiments/bench_mergesort.py --devices all --profile "$profile" --min-log 27 --max-log 28 \
              --repeats 5 --strategies gpu,exchange,auto --no-cupy --json "$OUT/bench_two_gpu.json" 2>&1
          python3 experiments/sweep_gantt.py --devices all --strategies exchange --log-n 28 --repeats 3 \
              --machine two-gpu --no-progress --out "$OUT/gantt" 2>&1
        } | tee "$OUT/staging_gap.log"
        ;;
    tests)
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider --ignore tests/test_notebooks.py 2>&1 | tee "$OUT/tests.log"
        ;;
    tabu-resident)
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider tests/test_tabu_resident.py tests/test_tabu_faults.py \
            tests/test_tabu_search.py tests/test_tabu_pfsp.py 2>&1 | tee "$OUT/tests_tabu.log"
        python3 experiments/bench_tabu_resident.py --device gpu --rounds 3 --json "$OUT/bench_tabu_resident.json" 2>&1 \
            | tee "$OUT/bench_tabu_resident.log"
        ;;
    tabu-gantt)  # the model's K (tai100a: 1024) and, in k8/, blocks of 8 (round trips in sight)
        python3 experiments/sweep_tabu_gantt.py --device gpu --machine h100 --no-progress --iterations 2048 \
            --block 1024 --out "$OUT" 2>&1 | tee "$OUT/tabu_gantt.log"
        mkdir -p "$OUT/k8"
        python3 experiments/sweep_tabu_gantt.py --device gpu --machine h100 --no-progress --out "$OUT/k8" 2>&1 \
            | tee "$OUT/k8/tabu_gantt.log"
        ;;
    tabu-large)
        python3 experiments/bench_tabu_resident.py --device gpu --instances ppp1301-1317-1 \
            --iterations 256 --rounds 3 --no-level0 --json "$OUT/bench_tabu_resident_large.json" 2>&1 \
            | tee "$OUT/bench_tabu_resident_large.log"
        for inst in ppp1301-1317-2 ta111; do  # one at a time, shorter: each has its own file even if one is cut
            timeout 280 python3 experiments/bench_tabu_resident.py --device gpu --instances $inst --iterations 64 \
                --rounds 2 --no-level0 --json "$OUT/bench_tabu_resident_$inst.json" 2>&1 \
                | tee "$OUT/bench_tabu_resident_$inst.log" || true
        done
        ;;
    two-gpu)
        calibrate
        { nvidia-smi topo -m
          PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider tests/test_exchange.py tests/test_keyrange.py 2>&1 \
              | tail -3
          python3 experiments/bench_mergesort.py --devices all --profile "$profile" --min-log "${MIN_LOG:-24}" \
              --max-log "${MAX_LOG:-28}" --repeats 5 --strategies gpu,exchange,keyrange,auto \
              --json "$OUT/bench_two_gpu.json" 2>&1
          python3 experiments/sweep_gantt.py --devices all --strategies exchange --log-n 28 --repeats 3 \
              --machine two-gpu --no-progress --out "$OUT/gantt_two_gpu" 2>&1
        } | tee "$OUT/two_gpu.log"
        ;;
    multi-device)
        python3 experiments/bench_multi_device.py --json "$OUT/bench_multi_device.json" 2>&1 \
            | tee "$OUT/multi_device.log"
        ;;
    keyrange-tests)
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider tests/test_keyrange.py tests/test_cpusort.py \
            tests/test_hostmem.py 2>&1 | tail -3 | tee "$OUT/tests_keyrange.log"
        ;;
    review-tests)  # the test files of the last review's fixes on the GPU (REVIEW_TESTS: other files)
        # shellcheck disable=SC2086
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider ${REVIEW_TESTS:-tests/test_hostmem.py \
            tests/test_faults.py tests/test_keyrange.py tests/test_exchange.py tests/test_model.py \
            tests/test_rowsort.py} 2>&1 | tail -3 | tee "$OUT/tests_review.log"
        ;;
    sort-tests)
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider tests/test_fastsort.py tests/test_argsort.py \
            tests/test_rowsort.py 2>&1 \
            | tail -3 | tee "$OUT/tests_sort.log"
        ;;
    tabu-many)
        PYOPENCL_CTX=gpu python3 -m pytest -q -p no:cacheprovider tests/test_tabu_many.py 2>&1 \
            | tee "$OUT/tests_tabu_many.log"
        python3 experiments/bench_tabu_many.py --device gpu --instances "${TABU_MANY_INSTANCES:-tai30a}" \
            --rounds "${TABU_MANY_ROUNDS:-2}" --json "$OUT/bench_tabu_many.json" 2>&1 | tee "$OUT/bench_tabu_many.log"
        ;;
    tabu)
        python3 experiments/bench_tabu.py --device gpu --json "$OUT/bench_tabu.json" 2>&1 | tee "$OUT/bench_tabu.log"
        ;;
    tabu-more)
        # Most telling instances first, and a time cap: the results are written after each instance.
        # TABU_MORE_INSTANCES overrides the list (e.g. the ones a capped run did not reach).
        all=ta001,ta031,ta061,ta091,ta111,ea-tai30a,ea-tai40a,ea-tai50a,ea-tai60a,ppp73-73-h1,ppp73-73-h2,\
ppp401-417-h1,ppp401-417-h2,ppp1301-1317-h1,ppp1301-1317-h2,ppp101-117-h1,ppp101-117-h2,ppp201-217-h1,\
ppp201-217-h2,ppp801-817-h1,ppp801-817-h2,ta081
        timeout "${TABU_MORE_SECONDS:-360}" python3 experiments/bench_tabu.py --device gpu --json "$OUT/bench_tabu_more.json" \
            --instances "${TABU_MORE_INSTANCES:-$all}" 2>&1 | tee "$OUT/bench_tabu_more.log"
        ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
