#!/usr/bin/env bash
# The images' entrypoint: the original Radix CLI flags, or `python -m bench` with Hydra overrides.
#
#   docker run bench --lr 0.1 --batch-size 128 --epochs 1 --steps-per-epoch 200 [overrides]  -> python -m bench.radix ...
#   docker run bench +experiment=a100_bf16 data.batch_size=64                                 -> python -m bench ...
#   docker run bench --help            (also Hydra's flags: --cfg job, -m, --info, ...)
#
# When the first argument is one of the Radix flags (--lr --batch-size --epochs
# --steps-per-epoch --allow-cpu) the run goes to `python -m bench.radix`; anything else goes to
# `python -m bench`. A flag neither accepts is refused here in one [ERROR] line (exit 2).
#
# Environment:
#   BENCH_PYTHON       the interpreter (default: python)
#   BENCH_STDOUT_LAST  1: hold bench's stdout (the final {"radix_metrics": ...} line) until bench
#                      ends, then print it, so it is the last line of a log that merges stdout and
#                      stderr (kubectl logs, docker logs); bench logs a line or two to stderr after
#                      the final line. SIGTERM and SIGINT are passed on to bench. Default 0: exec.
# This script never prints its environment or its arguments' values: credentials arrive
# through the environment (AWS_*, MLFLOW_TRACKING_*).
set -uo pipefail

PYTHON=${BENCH_PYTHON:-python}
RADIX_FLAGS="--lr --batch-size --epochs --steps-per-epoch --allow-cpu"

error() {
    printf '[ERROR] %s\n' "$1" >&2
    exit 2
}

usage() {
    cat <<EOF
usage: <image> [--lr LR] [--batch-size N] [--epochs N] [--steps-per-epoch N] [--allow-cpu] [key=value ...]
       <image> [Hydra flags] [key=value ...]

The first form is the original Radix CLI (python -m bench.radix: ResNet-50 on synthetic data;
$RADIX_FLAGS), the second python -m bench
(any config; +experiment=NAME for a preset, -m for a sweep, --cfg job to print the config).
stdout is one {"radix_metrics": ...} line per run; logs go to stderr; results and mlflow.db
to the working directory (/results: mount a volume there).

EOF
}

# takes_value MODE FLAG: 0 when FLAG is followed by its value, 1 for a switch, 2 when MODE does
# not accept FLAG at all.
takes_value() {
    case "$1:$2" in
        radix:--lr | radix:--batch-size | radix:--epochs | radix:--steps-per-epoch) return 0 ;;
        radix:--allow-cpu | radix:-h | radix:--help) return 1 ;;
        radix:--lr=* | radix:--batch-size=* | radix:--epochs=* | radix:--steps-per-epoch=*) return 1 ;;
        hydra:--cfg | hydra:-c | hydra:--package | hydra:-p | hydra:--config-path | hydra:-cp) return 0 ;;
        hydra:--config-name | hydra:-cn | hydra:--config-dir | hydra:-cd | hydra:--experimental-rerun) return 0 ;;
        hydra:-h | hydra:--help | hydra:--hydra-help | hydra:--version | hydra:--resolve) return 1 ;;
        hydra:--run | hydra:-r | hydra:--multirun | hydra:-m | hydra:--shell-completion | hydra:-sc) return 1 ;;
        hydra:--info | hydra:-i | hydra:--info=* | hydra:--cfg=* | hydra:--package=*) return 1 ;;
        hydra:--config-path=* | hydra:--config-name=* | hydra:--config-dir=* | hydra:--experimental-rerun=*) return 1 ;;
        # a dotted config key as a flag (--data.batch_size=8, --data.batch_size 8): python -m bench reads it as key=value
        hydra:--[A-Za-z_]*.*=*) return 1 ;;
        hydra:--[A-Za-z_]*.*) return 0 ;;
    esac
    return 2
}

# check_flags MODE ARGS...: every argument that looks like a flag is one MODE accepts.
check_flags() {
    local mode=$1 arg expects
    shift
    while (($#)); do
        arg=$1
        shift
        [[ $arg == -* ]] || continue
        takes_value "$mode" "$arg"
        expects=$?
        if ((expects == 2)); then
            if [[ $mode == radix ]]; then
                error "$arg is not valid: accepted the Radix flags $RADIX_FLAGS, then Hydra overrides key=value"
            fi
            error "$arg is not valid: accepted the Radix flags $RADIX_FLAGS first, or Hydra's flags (--help, --cfg job, -m, --info, ...) and overrides key=value"
        fi
        if ((expects == 0)); then
            (($#)) || error "$arg is not valid without a value: accepted $arg VALUE"
            shift  # the value, which may start with '-' (--lr -1 is bench.radix's to refuse)
        fi
    done
}

# run ARGS...: "$PYTHON" ARGS, exec'ed (bench is the container's PID 1), or with stdout held.
run() {
    if [[ ${BENCH_STDOUT_LAST:-0} != 1 ]]; then
        exec "$PYTHON" "$@"
    fi
    local held child="" stop="" status
    held=$(mktemp "${TMPDIR:-/tmp}/bench-stdout.XXXXXX") || error "BENCH_STDOUT_LAST=1 needs a writable \$TMPDIR (or /tmp)"
    # the traps first: a signal that lands while bench starts is passed on once it has started
    trap 'stop=TERM; [[ -z $child ]] || kill -TERM "$child" 2>/dev/null' TERM
    trap 'stop=INT; [[ -z $child ]] || kill -INT "$child" 2>/dev/null' INT
    set -m  # bench runs in a job of its own: a background process would otherwise ignore SIGINT
    "$PYTHON" "$@" >"$held" &
    child=$!
    [[ -z $stop ]] || kill -"$stop" "$child" 2>/dev/null
    wait "$child"
    status=$?
    while kill -0 "$child" 2>/dev/null; do  # a trapped signal ended the wait, not bench
        wait "$child"
        status=$?
    done
    cat "$held"
    rm -f "$held"
    exit "$status"
}

first=${1:-}
case "$first" in
    -h | --help)
        usage
        exec "$PYTHON" -m bench --help
        ;;
    --lr | --lr=* | --batch-size | --batch-size=* | --epochs | --epochs=* | --steps-per-epoch | --steps-per-epoch=* | --allow-cpu)
        check_flags radix "$@"
        run -m bench.radix "$@"
        ;;
    *)
        check_flags hydra "$@"
        run -m bench "$@"
        ;;
esac
