#!/usr/bin/env bash
# Measures the shipped (static, dist-profile) tidemill-edge's memory while it
# samples this host every second, journals, reports to a local coordinator and
# forecasts. Prints the peak resident set (VmHWM) and the final VmRSS.
#
#   edge/scripts/measure-rss.sh [SECONDS]    (default 60)
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")/../.."
cargo build -q --profile dist -p tidemill-edge
cargo build -q -p tidemill-cloud
bin=target/x86_64-unknown-linux-gnu
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
port=$((20000 + RANDOM % 20000))
"$bin/debug/tidemill-cloud" serve --data-dir "$tmp/cloud" --quic-listen "127.0.0.1:$port" \
    --api-listen "127.0.0.1:$((port + 1))" 2>"$tmp/cloud.log" &
for _ in $(seq 100); do [ -f "$tmp/cloud/ca.pem" ] && break; sleep 0.1; done
"$bin/dist/tidemill-edge" run --coordinator "127.0.0.1:$port" --ca "$tmp/cloud/ca.pem" \
    --node-id rss-probe --data-dir "$tmp/edge" --sample-interval 1 2>"$tmp/edge.log" &
edge=$!
echo "measuring tidemill-edge (pid $edge, $(stat -c %s "$bin/dist/tidemill-edge") bytes, static) for ${secs}s ..." >&2
sleep "$secs"
grep -E '^(VmHWM|VmRSS)' "/proc/$edge/status"
"$bin/debug/tidemill-cloud" nodes --api "http://127.0.0.1:$((port + 1))"
