# Sourced by scripts/npu_check.sh and scripts/gpu_check.sh: what a check needs, looked for before its first step
# (`need`, `preflight`), each step run on its own with its own log (`step`: a failed step's log tail is printed and the
# check goes on; a step whose pieces are missing is skipped and says which), and a table of every step's status at the
# end (`report`, whose exit status is 0 only when every step ran and passed). Needs bash 4 (associative arrays).

declare -a STEP_NAMES=() STEP_STATUS=() STEP_SECONDS=() STEP_LOGS=() MISSING=()
declare -A HAVE=()

# need KEY WHAT INSTALL COMMAND...: whether COMMAND succeeds (quietly) says whether piece KEY is here; a missing one is
# named with the command that installs it.
need() {
    local key=$1 what=$2 install=$3
    shift 3
    if "$@" >/dev/null 2>&1; then
        HAVE[$key]=1
    else
        HAVE[$key]=0
        MISSING+=("$what ($key): $install")
    fi
}

# python_has MODULE...: whether the check's python imports every MODULE.
python_has() {
    local module
    for module in "$@"; do
        "$PYTHON" -c "import $module" || return 1
    done
}

# preflight: one line per missing piece, with its install command.
preflight() {
    if [ ${#MISSING[@]} -eq 0 ]; then
        echo "preflight: every piece the steps need is here"
        return 0
    fi
    echo "preflight: ${#MISSING[@]} piece(s) missing; the steps that need them are skipped:"
    printf '  - %s\n' "${MISSING[@]}"
}

# step NAME LOG "KEY..." SHOW COMMAND...: COMMAND (a function: it runs in a subshell with `set -e`, so its first failed
# command ends it) with stdout and stderr in LOG, unless a piece it needs is missing. Then the lines of LOG matching the
# extended regex SHOW (the step's figures), or on failure the last 20 lines of LOG.
step() {
    local name=$1 log=$2 keys=$3 show=$4
    shift 4
    local absent=() key
    for key in $keys; do
        [ "${HAVE[$key]:-0}" = 1 ] || absent+=("$key")
    done
    STEP_NAMES+=("$name")
    STEP_LOGS+=("$log")
    echo "== $name"
    if [ ${#absent[@]} -gt 0 ]; then
        STEP_STATUS+=("skipped (missing: ${absent[*]})")
        STEP_SECONDS+=("-")
        echo "   skipped: missing ${absent[*]}"
        return 0
    fi
    local started=$SECONDS code
    (set -e; "$@") >"$log" 2>&1  # not `|| code=$?`: errexit would be off inside a tested subshell
    code=$?
    STEP_SECONDS+=("$((SECONDS - started))")
    if [ "$code" -eq 0 ]; then
        STEP_STATUS+=("ok")
        grep -E -- "$show" "$log" | sed 's/^/   /' || true
    else
        STEP_STATUS+=("FAILED (exit $code)")
        echo "   FAILED (exit $code); the end of $log:"
        tail -n 20 "$log" | sed 's/^/   | /'
    fi
}

# not_run NAME WHY: a step this machine has nothing to run for (not a failure), in the table with WHY.
not_run() {
    STEP_NAMES+=("$1")
    STEP_STATUS+=("not run ($2)")
    STEP_SECONDS+=("-")
    STEP_LOGS+=("-")
    echo "== $1"
    echo "   not run: $2"
}

# report: every step's status, seconds and log as a markdown table; returns 1 when a step failed or was skipped.
report() {
    local index bad=0
    printf '\n| step | status | seconds | log |\n|---|---|---|---|\n'
    for index in "${!STEP_NAMES[@]}"; do
        printf '| %s | %s | %s | %s |\n' "${STEP_NAMES[$index]}" "${STEP_STATUS[$index]}" "${STEP_SECONDS[$index]}" \
            "${STEP_LOGS[$index]}"
        case "${STEP_STATUS[$index]}" in ok | "not run"*) ;; *) bad=1 ;; esac
    done
    return $bad
}
