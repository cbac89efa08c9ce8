#!/usr/bin/env bash
# The GPU check kit: one command, ends by itself in under 8 minutes on one H200.
#
#   tools/gpu_check.sh [OUT_DIR] [--dry-run]      (OUT_DIR default: gpu_report)
#
# 1. installs the carried wheels (.whl/, from `make gpu-wheels`) into a temporary target with
#    pip --no-index (no network) and puts it and src/ on PYTHONPATH;
# 2. runs tools/gpu_check.py: a random-weight Qwen3-VL with the real 2B architecture, 64-frame
#    448x252 synthetic videos and their cache; RL steps (bf16, gradient checkpointing, torchrun
#    --nproc-per-node 1, NCCL + FSDP2) from the cache, then decoding on the fly; the synthetic
#    benchmark with the HF engine;
# 3. writes OUT_DIR/gpu_report.json, OUT_DIR/gpu_report.md and OUT_DIR/logs/<phase>.log (7 files),
#    and exits non-zero if any phase failed (a CUDA error in a log counts as a failure).
#
# --dry-run: the same phases and commands on a CPU with tiny shapes and gloo (the test suite's run).
# Environment: GPU_CHECK_PYTHON (default python3), GPU_CHECK_WHEELS (default .whl),
# GPU_CHECK_WORK (scratch for the model, videos, cache and runs; default a new /tmp directory,
# removed at the end unless GPU_CHECK_KEEP_WORK=1).
set -uo pipefail
started=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

out=gpu_report
extra=()
dry=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) extra+=(--dry-run); dry=1 ;;
    --steps=*) extra+=(--steps "${arg#--steps=}") ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $arg" >&2; exit 2 ;;
    *) out=$arg ;;
  esac
done
mkdir -p "$out/logs" || exit 2
out=$(cd "$out" && pwd)
py=${GPU_CHECK_PYTHON:-python3}
wheels=${GPU_CHECK_WHEELS:-$root/.whl}
work=${GPU_CHECK_WORK:-$(mktemp -d /tmp/easyvideor1_gpu_check.XXXXXX)}
mkdir -p "$work" || exit 2
site="$work/site"
log="$out/logs/install.log"

cleanup() {
  if [ "${GPU_CHECK_KEEP_WORK:-0}" != 1 ] && [ -z "${GPU_CHECK_WORK:-}" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

# 1. the carried wheels: every dependency the GPU image lacks, installed without the network.
#    --no-deps: the image's own packages (numpy, torch, ...) must not be replaced or re-resolved.
: >"$log"
t_install=$(date +%s)
install=skipped
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "?")
if [ -z "${GPU_CHECK_WHEELS:-}" ] && [ "$dry" = 1 ] && [ "$pyver" != 3.12 ]; then
  # .whl/ holds CPython 3.12 wheels for the GPU machine; a dry run elsewhere uses its own packages
  echo "[gpu_check] dry run on Python $pyver: not installing $wheels (built for Python 3.12)" | tee -a "$log"
elif compgen -G "$wheels/*.whl" >/dev/null; then
  echo "[gpu_check] installing $(ls "$wheels"/*.whl | wc -l) wheels from $wheels into $site" | tee -a "$log"
  if timeout 120 "$py" -m pip install --no-index --no-deps --no-compile --no-cache-dir \
      --disable-pip-version-check --find-links "$wheels" --target "$site" "$wheels"/*.whl >>"$log" 2>&1; then
    install=ok
  else
    install=failed
    echo "[gpu_check] FAILED: pip could not install the wheels; see $log" >&2
    tail -n 5 "$log" >&2
  fi
else
  echo "[gpu_check] no wheels in $wheels: using the environment's packages as they are" | tee -a "$log"
fi
export PYTHONPATH="$site:$root/src${PYTHONPATH:+:$PYTHONPATH}"
export GPU_CHECK_SITE="$site" GPU_CHECK_WHEELS_DIR="$wheels"
extra+=(--install "$install" --install-seconds "$(( $(date +%s) - t_install ))")

# 2./3. the phases and the report (each phase has its own limit inside an overall deadline)
"$py" "$root/tools/gpu_check.py" --out "$out" --work "$work" --started "$started" "${extra[@]}"
