#!/usr/bin/env bash
# One swarm measurement point: a release coordinator on 127.0.0.1:7900 and N
# simulated edges (`tidemill-sim swarm`) sampling every S seconds. After the
# edges have ramped up and settled, it measures for D seconds and prints one
# table row. Run from the repository root after
# `cargo build --release -p tidemill-cloud -p tidemill-sim`.
#
# Usage: docs/swarm/measure.sh N [S=10] [D=60]
set -euo pipefail
N=${1:?usage: docs/swarm/measure.sh EDGES [SAMPLE_INTERVAL_S] [MEASURE_S]}
S=${2:-10}
D=${3:-60}
B=${B:-target/x86_64-unknown-linux-gnu/release}
RAMP=$(( N / 200 + 5 ))      # handshakes spread at 200 per second
SETTLE=$(( RAMP + 2 * ${S%.*} + 10 ))
W=$(mktemp -d)
trap 'kill -9 $CP $SP 2>/dev/null || true; rm -rf "$W"' EXIT

# The whole fleet shares one source address here, which [quic]
# max_unadmitted_per_address (32) caps for real deployments.
TIDEMILL_QUIC__MAX_UNADMITTED_PER_ADDRESS=512 \
RUST_LOG=info,tidemill_cloud::round=debug "$B/tidemill-cloud" serve --data-dir "$W/cloud" \
    --quic-listen 127.0.0.1:7900 --api-listen 127.0.0.1:7980 > "$W/cloud.log" 2>&1 &
CP=$!
for _ in $(seq 50); do [ -s "$W/cloud/ca.pem" ] && break; sleep 0.2; done
T=""
for _ in $(seq 50); do
    T=$("$B/tidemill-cloud" token create --api http://127.0.0.1:7980 --data-dir "$W/cloud" 2>/dev/null | tail -1)
    case "$T" in K10*) break ;; esac
    sleep 0.2
done
kill -0 "$CP" 2>/dev/null || { echo "the coordinator did not start (is 127.0.0.1:7900 still held by an earlier run?):"; tail -3 "$W/cloud.log"; exit 1; }
"$B/tidemill-sim" swarm --coordinator 127.0.0.1:7900 --token "$T" --edges "$N" \
    --sample-interval "$S" --stats-every 5 --ramp "$RAMP" > "$W/swarm.log" 2>&1 &
SP=$!
sleep "$SETTLE"

ticks() { awk '{print $14 + $15}' "/proc/$CP/stat"; }
bytes() { du -sb "$W/cloud" | cut -f1; }
t0=$(ticks); b0=$(bytes); l0=$(wc -l < "$W/swarm.log"); r0=$(grep -c "round done" "$W/cloud.log" || true)
sleep "$D"
t1=$(ticks); b1=$(bytes)
HZ=$(getconf CLK_TCK)
cores=$(echo "($t1 - $t0) / $HZ / $D" | bc -l)
rss_mb=$(awk '/VmRSS/ {print $2 / 1024}' "/proc/$CP/status")
fds=$(ls "/proc/$CP/fd" | wc -l)
load=$(cut -d' ' -f1 /proc/loadavg)
# The swarm's lines in the window: connected edges, ack p50/p99 (ms), uplink.
window=$(tail -n +"$((l0 + 1))" "$W/swarm.log" | grep -E '^[0-9]')
connected=$(echo "$window" | tail -1 | cut -d' ' -f2)
p50=$(echo "$window" | awk '{print $6}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
p99=$(echo "$window" | awk '{print $7}' | sort -n | tail -1)
uplink=$(echo "$window" | tail -1 | cut -d' ' -f8)
rounds=$(grep "round done" "$W/cloud.log" | tail -n +"$((r0 + 1))" | sed 's/.*elapsed_us=\([0-9]*\).*/\1/' | sort -n)
nr=$(echo "$rounds" | grep -c . || true)
round_p50=$(echo "$rounds" | awk -v n="$nr" 'NR == int((n + 1) / 2) {print $1 / 1000}')
round_max=$(echo "$rounds" | tail -1 | awk '{print $1 / 1000}')
per_day=$(echo "($b1 - $b0) / $N / $D * 86400" | bc -l)
printf '| %s | %s s | %s | %.2f | %.0f | %s | %s / %s | %s rounds, p50 %s ms, max %s ms | %.0f | %s | %s |\n' \
    "$N" "$S" "$connected" "$cores" "$rss_mb" "$fds" "$p50" "$p99" "$nr" "$round_p50" "$round_max" "$per_day" "$uplink" "$load"
