#!/usr/bin/env bash
# A coordinator restart under load: N swarm edges report to a release
# coordinator, which is killed with SIGKILL and started again on the same
# data dir. Prints how long until every edge is back, then checks that no
# report is lost: every node's stored sequence numbers run from 1 to its
# last without a gap, and the swarm's acknowledged count catches up with what
# it journaled. Run from the repository root after
# `cargo build --release -p tidemill-cloud -p tidemill-sim`.
#
# Usage: docs/swarm/restart.sh N [S=10]
set -euo pipefail
N=${1:?usage: docs/swarm/restart.sh EDGES [SAMPLE_INTERVAL_S]}
S=${2:-10}
B=${B:-target/x86_64-unknown-linux-gnu/release}
RAMP=$(( N / 200 + 5 ))
W=$(mktemp -d)
trap 'kill -9 $CP $SP 2>/dev/null || true; rm -rf "$W"' EXIT
serve() {
    "$B/tidemill-cloud" serve --data-dir "$W/cloud" --quic-listen 127.0.0.1:7900 \
        --api-listen 127.0.0.1:7980 >> "$W/cloud.log" 2>&1 &
    CP=$!
}
serve
for _ in $(seq 50); do [ -s "$W/cloud/ca.pem" ] && break; sleep 0.2; done
T=""
for _ in $(seq 50); do
    T=$("$B/tidemill-cloud" token create --api http://127.0.0.1:7980 --data-dir "$W/cloud" 2>/dev/null | tail -1)
    case "$T" in K10*) break ;; esac
    sleep 0.2
done
kill -0 "$CP" 2>/dev/null || { echo "the coordinator did not start (is 127.0.0.1:7900 still held by an earlier run?):"; tail -3 "$W/cloud.log"; exit 1; }
"$B/tidemill-sim" swarm --coordinator 127.0.0.1:7900 --token "$T" --edges "$N" \
    --sample-interval "$S" --stats-every 1 --ramp "$RAMP" > "$W/swarm.log" 2>&1 &
SP=$!
sleep $(( RAMP + 2 * ${S%.*} + 10 ))
connected() { grep -E '^[0-9]' "$W/swarm.log" | tail -1 | cut -d' ' -f2; }
echo "before: $(connected) of $N edges connected"
kill -9 "$CP"; wait "$CP" 2>/dev/null || true
killed=$(date +%s.%N)
serve
# Every edge notices within its idle timeout (30 s), then reconnects.
back=""
for _ in $(seq 1200); do
    sleep 0.1
    if [ "$(connected)" = "$N" ] && [ "$(grep -E '^[0-9]' "$W/swarm.log" | tail -1 | cut -d' ' -f3)" -ge $(( 2 * N )) ]; then
        back=$(echo "$(date +%s.%N) - $killed" | bc -l); break
    fi
done
echo "every edge back ${back:-NOT within 120} s after the SIGKILL"
sleep $(( 2 * ${S%.*} + 5 ))
tail -1 "$W/swarm.log" | awk '{print "swarm: journaled " $4 ", acknowledged " $5}'
kill "$SP"; wait "$SP" 2>/dev/null || true
python3 - "$W/cloud/tidemill.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = db.execute("SELECT node_id, COUNT(*), MIN(seq), MAX(seq) FROM reports GROUP BY node_id").fetchall()
gaps = [r for r in rows if r[2] != 1 or r[1] != r[3]]
print(f"stored: {len(rows)} nodes, {sum(r[1] for r in rows)} reports, {len(gaps)} with a gap")
PY
