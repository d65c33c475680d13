#!/usr/bin/env bash
# Measures the shipped (static, dist-profile) tidemill-edge's memory while it
# samples this host every second, journals, reports to a local coordinator and
# forecasts. Prints the peak resident set (VmHWM) and the final VmRSS, split
# into RssAnon (the heap and stacks) and RssFile (pages of the binary itself,
# clean and shared with the page cache).
#
#   edge/scripts/measure-rss.sh [SECONDS] [primed]    (default 60)
#
# With `primed`, the edge replays a synthetic 15-day trace (`tidemill-sim
# gen-trace`) and primes its forecaster with the 14 days before the start, so
# that its first forecast already reads a full history; it forecasts every
# 60 s instead of every 900 s, so that a few minutes see several refreshes.
set -euo pipefail
secs=${1:-60}
mode=${2:-}
cd "$(dirname "$0")/../.."
cargo build -q --profile dist -p tidemill-edge
cargo build -q -p tidemill-cloud
bin=target/x86_64-unknown-linux-gnu
tmp=$(mktemp -d)
# As root, tasks run as a uid of their own: it must pass through to the
# checkpoint dir, as it does through an operator's data dir's parents.
chmod 711 "$tmp"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
port=$((20000 + RANDOM % 20000))
"$bin/debug/tidemill-cloud" serve --data-dir "$tmp/cloud" --quic-listen "127.0.0.1:$port" \
    --api-listen "127.0.0.1:$((port + 1))" 2>"$tmp/cloud.log" &
cloud() { "$bin/debug/tidemill-cloud" "$@" --api "http://127.0.0.1:$((port + 1))" --data-dir "$tmp/cloud"; }
# A join token for the edge, in a private file (never on a command line).
for _ in $(seq 100); do
    cloud token create --description rss-probe 2>/dev/null | tail -n 1 >"$tmp/token" && [ -s "$tmp/token" ] && break
    sleep 0.1
done
[ -s "$tmp/token" ] || { echo "the coordinator made no join token:" >&2; cat "$tmp/cloud.log" >&2; exit 1; }
replay=()
refresh=900
if [ "$mode" = primed ]; then
    refresh=60
    cargo build -q -p tidemill-sim
    "$bin/debug/tidemill-sim" gen-trace --nodes 1 --days 15 --gpu-share 1 --out "$tmp/trace.csv.gz" 2>/dev/null
    replay=(--replay "$tmp/trace.csv.gz" --replay-node node-000)
fi
TIDEMILL_TASKS__CHECKPOINT_DIR="$tmp/checkpoints" TIDEMILL_FORECAST_REFRESH_SECS=$refresh \
    "$bin/dist/tidemill-edge" run \
    --coordinator "127.0.0.1:$port" --ca "$tmp/cloud/ca.pem" --token-file "$tmp/token" \
    --node-id rss-probe --data-dir "$tmp/edge" --sample-interval 1 "${replay[@]}" 2>"$tmp/edge.log" &
edge=$!
echo "measuring tidemill-edge (pid $edge, $(stat -c %s "$bin/dist/tidemill-edge") bytes, static) for ${secs}s ..." >&2
sleep "$secs"
grep -E '^(VmHWM|VmRSS|RssAnon|RssFile)' "/proc/$edge/status" || { echo "the edge stopped:" >&2; cat "$tmp/edge.log" >&2; exit 1; }
cloud nodes
