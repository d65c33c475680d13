#!/bin/sh
# Runs tidemill's PyTorch scenarios (tests/tests/pytorch.rs) against release
# builds, with real processes: a coordinator, edges, and train_ddp.py under
# torch with Gloo on CPU. Not part of `cargo test`: torch is 5.3 GB.
#
# The virtualenv with torch is created on first use, or reused, at
# $TIDEMILL_TORCH_VENV (default ~/.cache/tidemill/torch-venv, or
# /var/cache/tidemill/torch-venv when run as root: edges run as root start
# their tasks as `nobody`, which cannot read /root, so the venv and the path
# to it are made world-readable).
#
# `run.sh SCENARIO` runs one scenario: its number (1 to 5) or a part of its
# test name (e.g. drained); `run.sh` alone runs them all.
#
# Exits 0 only when every scenario that can run passes; the last line sums up.
set -eu

case ${1:-} in
    "") filter= ;;
    [1-9]) filter=scenario_$1_ ;;
    -*) echo "usage: $0 [SCENARIO]: a number from 1 to 5 or part of a scenario's name" >&2; exit 2 ;;
    *) filter=$1 ;;
esac

repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" = 0 ]; then
    default_venv=/var/cache/tidemill/torch-venv
else
    default_venv="${XDG_CACHE_HOME:-$HOME/.cache}/tidemill/torch-venv"
fi
venv="${TIDEMILL_TORCH_VENV:-$default_venv}"

# Whether every directory above $1 lets other users through.
passable() {
    dir=$(dirname "$1")
    while [ "$dir" != / ]; do
        case $(stat -c %A "$dir") in
        *x | *t) ;;
        *) return 1 ;;
        esac
        dir=$(dirname "$dir")
    done
}

# The Python a venv is made from: as root, one that `nobody` can run (a
# pyenv under /root is not), since the venv's python links to it.
base=python3
if [ "$(id -u)" = 0 ] && ! passable "$(readlink -f "$(command -v python3)")"; then
    base=/usr/bin/python3
fi

began=$(date +%s)
if "$venv/bin/python" -c 'import torch' 2>/dev/null &&
    { [ "$(id -u)" != 0 ] || passable "$(readlink -f "$venv/bin/python")"; }; then
    echo "reusing the torch virtualenv at $venv"
else
    echo "creating a torch virtualenv at $venv from $base (about 2 minutes, 5.3 GB)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$base" -m venv "$venv"
    "$venv/bin/pip" install --quiet torch numpy
fi
if [ "$(id -u)" = 0 ]; then
    # Tasks run as nobody: the venv must be readable, and every directory
    # above it passable.
    chmod -R a+rX "$venv"
    dir=$(dirname "$venv")
    while [ "$dir" != / ]; do
        chmod a+x "$dir"
        dir=$(dirname "$dir")
    done
fi
echo "torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') ready in $(($(date +%s) - began)) s"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
TIDEMILL_TORCH_VENV="$venv" cargo test --manifest-path "$repo/Cargo.toml" --release \
    -p tidemill-tests --test pytorch -- --ignored --nocapture --test-threads=1 $filter 2>&1 | tee "$out"
status=$?
set -e

# `test result: ok. 3 passed; 0 failed; ...`
summary=$(grep '^test result:' "$out" | tail -n 1)
passed=$(echo "$summary" | sed -n 's/.* \([0-9]*\) passed.*/\1/p')
failed=$(echo "$summary" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
if [ -n "$filter" ] && [ "${passed:-0}" -eq 0 ] && [ "${failed:-0}" -eq 0 ]; then
    echo "no scenario matches '$filter'; give a number from 1 to 5 or part of a scenario's name"
    exit 2
fi
if [ -z "$passed" ] || { [ "$status" -ne 0 ] && [ "${failed:-0}" -eq 0 ]; }; then
    echo "cargo test exited $status before any scenario ran (see above)"
    passed=0 failed=1
fi
# A scenario that cannot run here says `PENDING <why>` and passes: count it
# as pending instead.
pending=$(grep -c '^PENDING ' "$out" || true)
why=$(grep '^PENDING ' "$out" | sed 's/^PENDING //' | paste -sd ';' -)
passed=$((passed - pending))
echo "pytorch scenarios: $passed passed, $failed failed, $pending pending${why:+ ($why)} in $(($(date +%s) - began)) s"
[ "$failed" -eq 0 ]
