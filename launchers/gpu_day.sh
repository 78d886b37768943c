#!/usr/bin/env bash
# The GPU day in one go (issue 27 §6): what a GPU user's first hour runs, on the CUDA image as it is
# (python 3.12, torch 2.11, torchvision 0.26) plus the offline kit of what it lacks:
#   1. python -m bench.tools.gpu_check --budget-s 140          every GPU path, pass/fail, <= 120 s wanted
#   2. python -m bench +experiment=a100_bf16                    the card's command (MLflow on, if the kit has it)
#   3. python -m bench -m +experiment=a100_bf16 data.batch_size=128,256 precision=bf16,amp_fp16 \
#          train.steps_per_epoch=40                             a 2x2 sweep
#   4. python -m bench.doctor +experiment=a100_bf16 doctor.budget_s=60
#   5. python -m pytest -m gpu                                  <= 90 s wanted
# Each step runs under `timeout` (SIGTERM to its process group, SIGKILL 20 s later), inside a total of
# GPU_DAY_TOTAL_S (default 540 s: under the 10 minutes one device command may take). Every step's
# stdout/stderr, its exit code and seconds go to OUT_DIR/<step>.{out,err}; OUT_DIR/summary.md has the
# table and each step's key lines. Exit 0 when every step exited 0, else 1.
#
# Here (with network), from the project's root, after committing (the kit holds the committed tree):
#     bash ../shared/gpu/make_kit.sh --mlflow
# On the GPU machine (the device tool: carry [".gpukit"], timeout_s 600), from the project's root:
#     bash launchers/gpu_day.sh "$OUT"          # OUT_DIR: the argument, else $OUT, else ./gpu-day
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-${OUT:-./gpu-day}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
total_s=${GPU_DAY_TOTAL_S:-540}
start=$SECONDS
summary="$out/summary.md"
status=0

if [ -f "$root/.gpukit/setup.sh" ]; then
  bash "$root/.gpukit/setup.sh" || { echo "[ERROR] the kit did not install" | tee "$summary"; exit 1; }
  export PYTHONPATH="$root:/tmp/site:/tmp/mlsite${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # bench and its dependencies already installed
fi
export PYTHONUNBUFFERED=1
tracking=()
if ! python3 -c "import mlflow" 2>/dev/null; then
  tracking=(tracking.enabled=false)  # a kit without --mlflow: the runs still measure, nothing is logged
fi

{
  echo "# GPU day: $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader 2>&1 | sed 's/^/    /'
  python3 -c "import sys, torch, torchvision; print('    python', sys.version.split()[0], '| torch', torch.__version__,
'| torchvision', torchvision.__version__, '| CUDA', torch.version.cuda, '| cuDNN', torch.backends.cudnn.version(),
'| NCCL', '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else '-')" 2>&1
  [ ${#tracking[@]} -eq 0 ] || echo "    (no mlflow in this kit: tracking.enabled=false)"
  echo
  echo "| step | exit | seconds | command |"
  echo "|---|---|---|---|"
} > "$summary"

# step NAME LIMIT_S DIR COMMAND...: run COMMAND in DIR under timeout (the smaller of LIMIT_S and what is
# left of the total), its output in OUT_DIR/NAME.out|.err, one row in the summary
step() {
  local name=$1 limit=$2 dir=$3; shift 3
  local left=$((total_s - (SECONDS - start)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "| $name | not run | 0 | $* (the total of ${total_s} s is spent) |" >> "$summary"; status=1; return
  fi
  mkdir -p "$dir"
  local began=$SECONDS code
  echo "== $name (limit ${limit} s): $*"
  (cd "$dir" && timeout --kill-after=20s "${limit}s" "$@") > "$out/$name.out" 2> "$out/$name.err"
  code=$?
  [ "$code" -eq 124 ] && code="124 (timed out)"
  [ "$code" = 0 ] || status=1
  echo "| $name | $code | $((SECONDS - began)) | \`$*\` |" >> "$summary"
  echo "   exit $code after $((SECONDS - began)) s"
}

work="$out/work"
step gpu_check 170 "$work/gpu_check" python3 -m bench.tools.gpu_check --budget-s 140 --keep "$work/gpu_check/runs"
step card 100 "$work/card" python3 -m bench +experiment=a100_bf16 "${tracking[@]}"
step sweep 160 "$work/sweep" python3 -m bench -m +experiment=a100_bf16 data.batch_size=128,256 \
  precision=bf16,amp_fp16 train.steps_per_epoch=40 "${tracking[@]}"
step doctor 100 "$work/doctor" python3 -m bench.doctor +experiment=a100_bf16 doctor.budget_s=60 "${tracking[@]}"
# the files that hold gpu-marked tests (collecting the whole suite imports what the CUDA image may lack)
step pytest_gpu 120 "$root" python3 -m pytest -q -m gpu -p no:cacheprovider --durations=10 tests/e2e/test_gpu.py \
  tests/unit/test_measure_deeper.py

{
  echo
  echo "total: $((SECONDS - start)) s"
  echo
  echo "## gpu_check"
  echo
  sed -n '/^| check |/,$p' "$out/gpu_check.out"
  grep -h "\[ERROR\]" "$out/gpu_check.err" | tail -n 3 | sed 's/^/    /'
  echo
  echo "## the card's command: its headline and final line"
  echo
  grep -h "images/s" "$out/card.out" "$out/card.err" 2>/dev/null | tail -n 2 | sed 's/^/    /'
  tail -n 1 "$out/card.out" | cut -c1-400 | sed 's/^/    /'
  grep -h "\[ERROR\]" "$out/card.err" | tail -n 3 | sed 's/^/    /'
  echo
  echo "## the 2x2 sweep: each job's headline, then the sweep's report"
  echo
  grep -h "images/s\|\[ERROR\]" "$out/sweep.out" "$out/sweep.err" 2>/dev/null | tail -n 12 | sed 's/^/    /'
  echo
  echo "## the doctor"
  echo
  tail -n 25 "$out/doctor.out" | sed 's/^/    /'
  grep -h "\[ERROR\]" "$out/doctor.err" | tail -n 3 | sed 's/^/    /'
  echo
  echo "## pytest -m gpu"
  echo
  grep -E "passed|failed|skipped|error|^[0-9.]+s (call|setup)" "$out/pytest_gpu.out" | tail -n 16 | sed 's/^/    /'
} >> "$summary"
cat "$summary"
exit $status
