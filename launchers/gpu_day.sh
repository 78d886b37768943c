#!/usr/bin/env bash
# The GPU day in one go: what a GPU user's first hour runs, on a CUDA image as it is (the one bench met:
# python 3.12, torch 2.11, torchvision 0.26, no hydra/omegaconf/mlflow, no network) plus an offline kit
# of what it lacks (python -m bench.tools.kit; docs/deploy.md, "Air-gapped cluster").
#
#   bash launchers/gpu_day.sh [--rehearse] [--kit DIR] [--part day|fast] [--steps A,B] [OUT_DIR]
#
# --part day (default), one device call of at most 10 minutes (GPU_DAY_TOTAL_S, default 550 s):
#   kit        pip's offline check of the kit (--dry-run --no-index), then its wheels into a site folder
#   gpu_check  python -m bench.tools.gpu_check --budget-s 185        every GPU path, pass/fail
#   card       python -m bench +experiment=a100_bf16                  the card's command
#   sweep      python -m bench -m +experiment=a100_bf16 data.batch_size=128,256 precision=bf16,amp_fp16
#   doctor     python -m bench.doctor +experiment=a100_bf16 doctor.budget_s=30
#   pytest_gpu python -m pytest -m gpu (the files that hold gpu-marked tests, but the fast preset's)
#   (the limits, 30+200+60+110+70+80 s, add up to the total: every step gets its own; on the H200 of
#   2026-11-30 the steps took 7, ~180, 36-45, ~100, 52 and 56 s)
# --part fast, a second call, in a second session's 15 device minutes (GPU_DAY_TOTAL_S default 540 s): the fast preset against the eager one on
#   the same GPU, A-B-B-A in fresh processes (tests/e2e/test_fast_preset.py: >= 1.25x is its claim)
# --steps A,B: only those steps of the part (the kit's install always runs: a fresh machine needs it), the
#   others a 'skipped' row: a second call re-runs what the first cut short.
# --rehearse: every step on the CPU at tiny sizes (CI: .ci/gpu_day, offline), under the same limits times
#   GPU_DAY_SCALE (default 1; CI's 2-core CPU pays each step's start-up, imports and MLflow store without
#   a GPU's speed, and uses 4).
#
# Each step runs under `timeout` (SIGTERM, SIGKILL 20 s later) and never past the total; its output
# goes to OUT_DIR/<step>.{out,err}, and OUT_DIR/summary.md gets a row (exit, seconds) and the step's
# key lines (summary-fast.md for --part fast). Exit 0 when every step exited 0, else 1, 2 for a bad
# argument. OUT_DIR: the argument, else $OUT, else ./gpu-day.
# The kit: --kit DIR, else ./bench-kit at the project's root when it is there, else none (bench and
# its dependencies installed already). It is installed once per machine into GPU_DAY_SITE (default
# /tmp/bench-site; --target, so a read-only image works) and put first on PYTHONPATH.
#
# Here (with the index), from the project's root (35.7 MiB; git-ignored; the GPU machine takes 64 MiB
# with the 2 MB tree):
#     python -m bench.tools.kit --have launchers/cuda_image_packages.txt --out bench-kit
# On the GPU machine (the device tool: carry ["bench-kit"], timeout_s 360), from the project's root:
#     bash launchers/gpu_day.sh "$OUT"                    # then, in a second call: --part fast "$OUT"
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rehearse=0 part=day kit="" out="" only=""
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) rehearse=1 ;;
    --kit) kit=${2:-}; shift ;;
    --part) part=${2:-}; shift ;;
    --steps) only=${2:-}; shift ;;
    -*) echo "[ERROR] $1 is not an option: accepted --rehearse, --kit DIR, --part day|fast, --steps A,B, OUT_DIR" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
case $part in day) default_total=550 part_steps=(kit gpu_check card sweep doctor pytest_gpu) ;;
  fast) default_total=540 part_steps=(kit fast_preset fast_abba) ;;
  *) echo "[ERROR] --part $part is not valid: accepted day (the GPU day) or fast (the fast preset's A-B-B-A)" >&2; exit 2 ;;
esac
for name in ${only//,/ }; do
  [[ " ${part_steps[*]} " == *" $name "* ]] || {
    echo "[ERROR] --steps: $name is not a step of --part $part: accepted $(IFS=,; echo "${part_steps[*]}")" >&2; exit 2; }
done
[ -z "$kit" ] && [ -f "$root/bench-kit/kit.json" ] && kit=$root/bench-kit
if [ -n "$kit" ] && [ ! -f "$kit/kit.json" ]; then
  echo "[ERROR] --kit $kit is not a kit (no kit.json): build one with python -m bench.tools.kit" >&2; exit 2
fi
out=${out:-${OUT:-./gpu-day}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
scale=${GPU_DAY_SCALE:-1}
total_s=$(( ${GPU_DAY_TOTAL_S:-$default_total} * scale ))
start=$SECONDS
summary="$out/summary.md"
[ "$part" = fast ] && summary="$out/summary-fast.md"
status=0
export PYTHONUNBUFFERED=1

# step NAME LIMIT_S DIR COMMAND...: run COMMAND in DIR under timeout (the smaller of LIMIT_S and what is
# left of the total), its output in OUT_DIR/NAME.out|.err, one row in the summary
step() {
  local name=$1 limit=$(($2 * scale)) dir=$3; shift 3
  if [ -n "$only" ] && [ "$name" != kit ] && [[ ",$only," != *",$name,"* ]]; then
    echo "| $name | skipped | 0 | (--steps $only) |" >> "$summary"; return
  fi
  local left=$((total_s - (SECONDS - start)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "| $name | not run | 0 | $* (the total of ${total_s} s is spent) |" >> "$summary"; status=1; return
  fi
  mkdir -p "$dir"
  local began=$SECONDS code
  echo "== $name (limit ${limit} s): ${label:-$*}"
  (cd "$dir" && timeout --kill-after=20s "${limit}s" "$@") > "$out/$name.out" 2> "$out/$name.err"
  code=$?
  [ "$code" -eq 124 ] && code="124 (timed out)"
  [ "$code" = 0 ] || status=1
  echo "| $name | $code | $((SECONDS - began)) | \`${label:-$*}\` |" >> "$summary"
  echo "   exit $code after $((SECONDS - began)) s"
}
lines() { sed 's/^/    /'; }  # a step's key lines, indented in the summary
# the figures of a run's final line that the day is for (the speed, the GPU's use, the compile)
figures() {
  tail -n 1 "$1" | python3 -c 'import json, sys
line = sys.stdin.read().strip()
if not line.startswith("{"):
    sys.exit("no final line (the run did not end)")
m = json.loads(line)["radix_metrics"]
print(", ".join(f"{k} {m[k]}" for k in ("images_per_second", "step_time_ms_p50", "mfu", "device_name", "precision",
      "channels_last", "fused_optimizer", "compile", "compile_s", "compile_fallback", "fit_to_measure") if k in m))' 2>&1 | lines
}

{
  echo "# GPU day ($part$([ $rehearse = 1 ] && echo ', rehearsed on the CPU')): $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader 2>&1 | lines
  else
    echo "    no nvidia-smi here"
  fi
  [ -n "$kit" ] && python3 -c "import json,sys; k=json.load(open(sys.argv[1])); print(f\"    kit: {len(k['wheels'])} wheels, {k['size_bytes']/2**20:.1f} MiB, Python {k['python']}\")" "$kit/kit.json"
  echo
  echo "| step | exit | seconds | command |"
  echo "|---|---|---|---|"
} > "$summary"
# the machine's packages as the kit's --have wants them: launchers/cuda_image_packages.txt, refreshed
python3 -m pip freeze --all > "$out/freeze.txt" 2>/dev/null

if [ -n "$kit" ]; then
  site=${GPU_DAY_SITE:-${TMPDIR:-/tmp}/bench-site}
  stamp=$(sha256sum "$kit/kit.json" | cut -c1-16)
  # the documented install, checked offline (resolves against this Python's packages), then the kit's
  # wheels into a folder of their own (an image's site-packages may be read-only), once per machine, even
  # when the check fails: each step then says what it cannot import
  label="pip install --dry-run --no-index --find-links $kit bench; pip install --no-index --no-deps --target $site"
  # shellcheck disable=SC2016  # expanded by the inner bash, from its arguments
  step kit 30 "$root" bash -c '
    python3 -m pip install -q --dry-run --no-index --find-links "$1" bench; complete=$?
    [ "$(cat "$2/.kit" 2>/dev/null)" = "$3" ] && exit $complete
    rm -rf "$2" && python3 -m pip install -q --no-index --no-deps --no-compile --target "$2" "$1"/*.whl \
      && echo "$3" > "$2/.kit" && exit $complete' kit "$kit" "$site" "$stamp"
  label=""
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # bench and its dependencies already installed
fi
(cd / && python3 -c "import sys, torch, torchvision, bench; print('    python', sys.version.split()[0], '| torch', torch.__version__,
'| torchvision', torchvision.__version__, '| CUDA', torch.version.cuda, '| bench from', bench.__file__)") >> "$summary" 2>&1
tracking=()
python3 -c "import mlflow" 2>/dev/null || tracking=(tracking.enabled=false)  # a kit without MLflow: runs still measure
[ ${#tracking[@]} -eq 0 ] || echo "    (no mlflow here: tracking.enabled=false)" >> "$summary"

# the GPU's sizes, or on the CPU (--rehearse) the same commands at tiny sizes
small=() batches=128,256 precisions=bf16,amp_fp16 steps=30 budget=185 label=""
if [ $rehearse = 1 ]; then
  small=(allow_cpu=true model=small_cnn data.image_size=32 data.batch_size=4 data.num_classes=10 benchmark.warmup_steps=1
         train.steps_per_epoch=3 benchmark.progress=false)
  batches=4,8 precisions=bf16,fp32 steps=3 budget=$((budget * scale))  # amp_fp16 needs CUDA: bench refuses it on a CPU
fi
check=(python3 -m bench.tools.gpu_check --budget-s "$budget")
[ $rehearse = 1 ] && check+=(--rehearse)
work="$out/work"
if [ "$part" = day ]; then
  step gpu_check 200 "$work/gpu_check" "${check[@]}" --keep "$work/gpu_check/runs"
  step card 60 "$work/card" python3 -m bench +experiment=a100_bf16 "${small[@]}" "${tracking[@]}"
  step sweep 110 "$work/sweep" python3 -m bench -m +experiment=a100_bf16 "${small[@]}" data.batch_size=$batches \
    precision=$precisions train.steps_per_epoch=$steps "${tracking[@]}"
  step doctor 70 "$work/doctor" python3 -m bench.doctor +experiment=a100_bf16 "${small[@]}" doctor.budget_s=30 "${tracking[@]}"
  # the files that hold gpu-marked tests (collecting the whole suite imports what the CUDA image may lack),
  # but the fast preset's (--part fast); rehearsed: their collection, and the CPU-runnable tests beside them
  marks=(-m gpu -n 4)  # four workers: -n auto starts one per core, each with its own CUDA context
  [ $rehearse = 1 ] && marks=(-n 0)  # all of them, in one process: the gpu-marked ones skip on a CPU
  step pytest_gpu 80 "$root" python3 -m pytest -q "${marks[@]}" -p no:cacheprovider --durations=10 tests/e2e/test_gpu.py \
    tests/unit/test_measure_deeper.py
else
  # the fast preset vs the eager one, A-B-B-A in fresh processes; rehearsed: the preset at tiny sizes on the
  # CPU (its compile-mode fallback line, compile_s), then the test file (its GPU test skips there)
  if [ $rehearse = 1 ]; then
    step fast_preset 240 "$work/fast" python3 -m bench +experiment=h100_fast "${small[@]}" "${tracking[@]}"
  fi
  step fast_abba 480 "$root" python3 -m pytest -q -s -p no:cacheprovider -n 0 tests/e2e/test_fast_preset.py
fi

{
  echo
  echo "total: $((SECONDS - start)) s"
  for name in "${part_steps[@]}"; do
    [ -f "$out/$name.out" ] || continue
    echo
    echo "## $name"
    echo
    case $name in
      gpu_check) sed -n '/^| check |/,$p' "$out/$name.out" ;;
      card|fast_preset) grep -h "images/s\|compile" "$out/$name.err" | tail -n 3 | lines; figures "$out/$name.out" ;;
      sweep) grep -h "images/s" "$out/$name.out" "$out/$name.err" | tail -n 12 | lines ;;
      doctor) tail -n 25 "$out/$name.out" | lines ;;
      *) grep -E "passed|failed|skipped|error|round|ratio|^[0-9.]+s (call|setup)" "$out/$name.out" | tail -n 16 | lines ;;
    esac
    grep -h "\[ERROR\]\|^E  \|Error" "$out/$name.err" 2>/dev/null | tail -n 3 | lines
  done
} >> "$summary"
cat "$summary"
exit $status
