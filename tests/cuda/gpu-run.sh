#!/bin/bash
# gpu-run.sh -- run the GPU tests and benchmarks from a gpu-pack directory
# (tests/cuda/gpu-pack.sh) on a machine with an NVIDIA GPU.
#
# Usage: gpu-run.sh STEP...   (logs in $OUT, default /tmp/gpu-run)
#   info      GPU model, driver, memory (nvidia-smi)
#   mps       start the CUDA MPS control daemon, so that servers sharing
#             a GPU (both sides of a one-GPU migration) run concurrently
#   backend   tests/cuda/test-cuda-backend (engines, hashes vs the CPU)
#   migrate   tests/cuda/test-cuda-migrate (byte-exact, cuda<->cuda/cpu)
#   migrate2  the same from GPU 0 to GPU 1 (a machine with two GPUs)
#   qtest     test-mig-basic, test-mig-active, the iterative/hybrid
#             case of test-mig-cpu-writes, and the qtests of the device,
#             its transport, several vGPUs and DMA that gpu-pack.sh
#             packed ($GPU_QTESTS), every server on cuda
#   bench     cuda-bench --size $BENCH_SIZE (16G): hash vs read bandwidth
#   mbench    vgmig-bench $MBENCH_ARGS with the servers on cuda
#   hops      read-hops.py over one 16 GiB idle cell on cuda ($HOPS_ARGS):
#             where each pre-copy read's time goes, hop by hop
#   rbench    restore-bench $RBENCH_ARGS (1G,4G,16G) with the servers on cuda
#   stress    $STRESS (200) migrations under guest CPU writes (CPU backend;
#             $VGMIG_STRESS_SEED picks the sequence)
# Exit status: the number of steps that failed.
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/lib VGMIG_SERVER=$D/bin/vgpu-server \
    VGMIG_QEMU=$D/bin/qemu-system-x86_64 VGMIG_FIRMWARE=$D/fw
OUT=${OUT:-/tmp/gpu-run}
mkdir -p "$OUT"
failed=0

step() {
    local name=$1 limit=$2 start=$SECONDS rc
    shift 2
    echo "=== $name: $*"
    timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
    tail -n "${TAILN:-25}" "$OUT/$name.log"
    [ $rc -eq 0 ] || failed=$((failed + 1))
}

# No step: print the comment block above, up to its first non-comment line.
[ $# -gt 0 ] || { sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 2; }
for s in "$@"; do
    case $s in
    info) nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv ;;
    mps)
        # Without it two processes' CUDA contexts time-slice the GPU.
        if pgrep -f "nvidia-cuda-mps-control -d" >/dev/null; then
            echo "=== mps: the control daemon runs already"
        elif ! nvidia-cuda-mps-control -d; then
            echo "gpu-run: could not start nvidia-cuda-mps-control" >&2
            failed=$((failed + 1))
        fi
        ;;
    backend) step backend 300 "$D/bin/test-cuda-backend" ;;
    migrate) step migrate 500 "$D/bin/test-cuda-migrate" ;;
    migrate2)
        VGMIG_CUDA_BACKEND=cuda:0 VGMIG_CUDA_DST_BACKEND=cuda:1 \
            step migrate2 500 "$D/bin/test-cuda-migrate"
        ;;
    qtest)
        VGMIG_SERVER_BACKEND=cuda step basic 300 "$D/bin/test-mig-basic"
        VGMIG_SERVER_BACKEND=cuda step active 400 "$D/bin/test-mig-active"
        VGMIG_SERVER_BACKEND=cuda step cpu-writes 300 \
            "$D/bin/test-mig-cpu-writes" -p /mig/cpu-writes/iterative/hybrid
        for t in "$D"/bin/test-mig-multi "$D"/bin/test-mig-dma \
            "$D"/bin/test-vgpu-* "$D"/bin/test-server-restart; do
            [ -x "$t" ] && VGMIG_SERVER_BACKEND=cuda step "${t##*/test-}" 300 "$t"
        done
        ;;
    rbench)
        # shellcheck disable=SC2086 # RBENCH_ARGS is a list of options
        VGMIG_SERVER_BACKEND=cuda step rbench 580 "$D/bin/restore-bench" \
            ${RBENCH_ARGS:---sizes 1G,4G,16G}
        ;;
    stress)
        # The guest CPU writes stress on the CPU backend, STRESS migrations.
        VGMIG_STRESS=${STRESS:-200} step stress 590 \
            "$D/bin/test-mig-cpu-writes" -p /mig/cpu-writes/stress
        ;;
    bench) step bench 300 "$D/bin/cuda-bench" --size "${BENCH_SIZE:-16G}" --reps 10 ;;
    mbench)
        # shellcheck disable=SC2086 # MBENCH_ARGS is a list of options
        VGMIG_SERVER_BACKEND=cuda step mbench 3000 "$D/bin/vgmig-bench" \
            ${MBENCH_ARGS:---sizes 16G --workloads idle,inference --modes stop-copy,gmig,ours --big 16G} \
            --out "$OUT/mbench"
        ;;
    hops)
        # shellcheck disable=SC2086 # HOPS_ARGS is a list of options
        VGMIG_SERVER_BACKEND=cuda step hops 300 "$D/bin/read-hops.py" \
            --bench "$D/bin/vgmig-bench" -- \
            ${HOPS_ARGS:---sizes 16G --big 16G --workloads idle --modes ours --prealloc --channels 8}
        ;;
    *) echo "gpu-run: unknown step '$s'" >&2; failed=$((failed + 1)) ;;
    esac
done
exit $failed
