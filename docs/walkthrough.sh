#!/bin/sh
# The live walkthrough: a coordinator and two edges on one machine, on one
# clock running 360 times faster than real time (an hour of tide every ten
# seconds), and a training job, submitted while the edges are busy, that the
# scheduler plans into their forecast idle window for the night and that
# starts and finishes there, by its deadline.
# docs/walkthrough.md explains each step; tests/tests/walkthrough.rs runs this
# file. Run it from an empty directory after `cargo build --workspace`; B
# names the directory of the binaries.
set -eu
B=${B:-$(cd "$(dirname "$0")/.." && pwd)/target/x86_64-unknown-linux-gnu/debug}
pids=""
trap 'kill $pids 2>/dev/null; wait' EXIT
# Retries a command (quietly, every half second, for at most a minute).
retry() {
    n=0
    until "$@" >/dev/null 2>&1; do
        n=$((n + 1))
        [ "$n" -lt 120 ] || { echo "gave up waiting for: $*" >&2; exit 1; }
        sleep 0.5
    done
}

# 1. One clock: the coordinator and every edge count accelerated time from
#    the same anchor (Unix ms), so a plan's times mean the same everywhere.
#    Rounds every minute of tide (a config key, set here from the
#    environment), so that the fast clock does not make them continuous.
#    The data dir is the default, ./tidemill-cloud-data: the coordinator
#    writes its admin API token there (0600), and the CLI reads it from there.
SPEED=360
A=$(($(date +%s) * 1000))
TIDEMILL_ROUND_INTERVAL_SECS=60 \
    "$B/tidemill-cloud" serve --speed $SPEED --clock-anchor $A &
pids="$pids $!"
retry "$B/tidemill-cloud" nodes
T=$("$B/tidemill-cloud" token create --ttl 1h --uses 2 | tail -1)

# 2. Two edges that replay a synthetic tidal trace (busy by day, idle by
#    night; it starts at 17:00, busy) instead of sampling this host, a sample
#    every minute of tide. Each joins
#    with the token (from the environment, so that it stays out of `ps`),
#    primes its forecaster with the trace's past days, and forecasts its own
#    idle windows.
"$B/tidemill-sim" gen-trace --nodes 2 --days 7 --start-s 1704128400 --out trace.csv.gz
for i in 0 1; do
    TIDEMILL_TOKEN=$T "$B/tidemill-edge" run --node-id e$i --data-dir edge-e$i \
        --replay trace.csv.gz --replay-node node-00$i --sample-interval 60 \
        --speed $SPEED --clock-anchor $A &
    pids="$pids $!"
done
retry "$B/tidemill-cloud" forecast e0
retry "$B/tidemill-cloud" forecast e1
"$B/tidemill-cloud" nodes                   # busy now; each edge's next idle window
"$B/tidemill-cloud" forecast e0 --json > e0-forecast.json
"$B/tidemill-cloud" forecast e1 --json > e1-forecast.json

# 3. A training job for a model the default throughput tables know
#    (deepspeech2: 0.0301 iterations/s on a CPU box), 60 iterations (about
#    35 minutes of tide), due 8 hours of tide from now. The trainer stands in
#    for a real one: it steps at that rate on the accelerated clock and
#    checkpoints to, and resumes from, $TIDEMILL_CHECKPOINT_DIR (its step in
#    tidemill-step, the file tidemill reads to move a checkpoint).
TRAINER=$(cat <<'SH'
ck="$TIDEMILL_CHECKPOINT_DIR/tidemill-step"; i=$(cat "$ck" 2>/dev/null || echo 0)
[ "$i" -eq 0 ] || echo "resumed at $i"
trap 'echo "$i" > "$ck"; echo "checkpointed at $i"; exit 0' TERM
while [ "$i" -lt "$1" ]; do sleep "$2" & wait $!; i=$((i + 1)); echo "$i" > "$ck"; done
echo "trained $i iterations on $TIDEMILL_NODE_ID"
SH
)
STEP=$(awk "BEGIN { print 1 / (0.0301 * $SPEED) }")
NOW=$((A / 1000 + ($(date +%s) - A / 1000) * SPEED))
cat > job.toml <<TOML
name = "tide-demo"
command = ["sh", "-c", '''$TRAINER''', "trainer", "60", "$STEP"]
deadline = "$(date -u -d "@$((NOW + 8 * 3600))" +%Y-%m-%dT%H:%M:%SZ)"
[work]
model = "deepspeech2"
iterations = 60
global_batch = 57
TOML
id=$("$B/tidemill-cloud" jobs submit --file job.toml)
"$B/tidemill-cloud" jobs show "$id"         # the plan: where, when, and why

# 4. Wait for it to end, then look: its node, start, finish and deadline.
"$B/tidemill-cloud" jobs wait "$id" --timeout-secs 600 --json > job.json
"$B/tidemill-cloud" jobs show "$id"
