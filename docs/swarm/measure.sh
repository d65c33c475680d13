#!/usr/bin/env bash
# One swarm measurement point: release coordinators on 127.0.0.1:7900 and up
# and N simulated edges (`tidemill-sim swarm`) sampling every S seconds. After
# the edges have ramped up and settled, it measures for D seconds and prints
# one table row. Run from the repository root after
# `cargo build --release -p tidemill-cloud -p tidemill-sim`.
#
# Usage: docs/swarm/measure.sh N [S=10] [D=60]
# Environment:
#   BACKEND=sqlite (default) or postgres: the store; postgres starts a
#     throwaway PostgreSQL cluster in the work dir (Debian's postgresql
#     package, run as the postgres user when this runs as root).
#   REPLICAS=K (default 1; more needs BACKEND=postgres): K coordinators on
#     the one database, the swarm split evenly among them.
set -euo pipefail
N=${1:?usage: docs/swarm/measure.sh EDGES [SAMPLE_INTERVAL_S] [MEASURE_S]}
S=${2:-10}
D=${3:-60}
B=${B:-target/x86_64-unknown-linux-gnu/release}
BACKEND=${BACKEND:-sqlite}
K=${REPLICAS:-1}
[ "$K" = 1 ] || [ "$BACKEND" = postgres ] || { echo "REPLICAS=$K needs BACKEND=postgres"; exit 2; }
RAMP=$(( N / 200 + 5 ))      # handshakes spread at 200 per second
SETTLE=$(( RAMP + 2 * ${S%.*} + 10 ))
W=$(mktemp -d)
CPS=(); SPS=(); PG=""
stop() {
    { kill -9 "${CPS[@]}" "${SPS[@]}"; wait; } 2>/dev/null || true
    [ -n "$PG" ] && $PG/pg_ctl -D "$W/pg/data" -m immediate stop >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap stop EXIT

if [ "$BACKEND" = postgres ]; then
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    as_pg=""
    if [ "$(id -u)" = 0 ]; then as_pg="runuser -u postgres --"; fi
    PG="$as_pg $bin"
    mkdir -p "$W/pg"
    chmod 755 "$W"
    if [ -n "$as_pg" ]; then chown postgres "$W/pg"; fi
    $PG/initdb -D "$W/pg/data" -A trust -U postgres >/dev/null
    $PG/pg_ctl -D "$W/pg/data" -o "-p 7950 -k $W/pg -c listen_addresses=127.0.0.1 -c max_connections=50" \
        -l "$W/pg/log" -w -t 30 start >/dev/null
    export TIDEMILL_STORE__BACKEND=postgres
    export TIDEMILL_STORE__URL="postgres://postgres@127.0.0.1:7950/postgres?sslmode=disable"
fi

# The whole fleet shares one source address here, which [quic]
# max_unadmitted_per_address (32) caps for real deployments.
for i in $(seq 0 $((K - 1))); do
    if [ "$i" -gt 0 ]; then    # a replica: the first one's shared files
        mkdir -p "$W/cloud$i"
        (cd "$W/cloud0" && cp ca.pem ca-key.pem server.pem server-key.pem quic-reset-key secrets.key admin-token "$W/cloud$i/")
    fi
    TIDEMILL_QUIC__MAX_UNADMITTED_PER_ADDRESS=512 \
    RUST_LOG=info,tidemill_cloud::round=debug "$B/tidemill-cloud" serve --data-dir "$W/cloud$i" \
        --quic-listen 127.0.0.1:$((7900 + i)) --api-listen 127.0.0.1:$((7980 + i)) > "$W/cloud$i.log" 2>&1 &
    CPS+=($!)
    for _ in $(seq 100); do grep -q "tidemill-cloud serving" "$W/cloud$i.log" && break; sleep 0.2; done
done
T=""
for _ in $(seq 50); do
    T=$("$B/tidemill-cloud" token create --api http://127.0.0.1:7980 --data-dir "$W/cloud0" 2>/dev/null | tail -1)
    case "$T" in K10*) break ;; esac
    sleep 0.2
done
for cp in "${CPS[@]}"; do
    kill -0 "$cp" 2>/dev/null || { echo "a coordinator did not start (are ports 7900 and up still held by an earlier run?):"; tail -3 "$W"/cloud*.log; exit 1; }
done
for i in $(seq 0 $((K - 1))); do
    "$B/tidemill-sim" swarm --coordinator 127.0.0.1:$((7900 + i)) --token "$T" --edges $((N / K)) \
        --prefix "swarm-$i-" --sample-interval "$S" --stats-every 5 --ramp "$RAMP" > "$W/swarm$i.log" 2>&1 &
    SPS+=($!)
done
sleep "$SETTLE"

# CPU ticks of the coordinators, and of the database server's processes.
ticks() {
    local t=0
    for cp in "${CPS[@]}"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$cp/stat"))); done
    echo "$t"
}
db_ticks() {
    [ -n "$PG" ] || { echo 0; return; }
    local t=0 pm
    pm=$(head -1 "$W/pg/data/postmaster.pid")
    for p in "$pm" $(pgrep -P "$pm" || true); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
bytes() {
    if [ -n "$PG" ]; then
        psql "$TIDEMILL_STORE__URL" -At -c "SELECT pg_database_size(current_database())"
    else
        du -sb "$W/cloud0" | cut -f1
    fi
}
lines0=(); for i in $(seq 0 $((K - 1))); do lines0+=($(wc -l < "$W/swarm$i.log")); done
leader=$(grep -l "leading: this replica" "$W"/cloud*.log 2>/dev/null | head -1 || true)
leader=${leader:-$W/cloud0.log}
t0=$(ticks); d0=$(db_ticks); b0=$(bytes); r0=$(grep -c "round done" "$leader" || true)
sleep "$D"
t1=$(ticks); d1=$(db_ticks); b1=$(bytes)
HZ=$(getconf CLK_TCK)
cores=$(echo "($t1 - $t0) / $HZ / $D" | bc -l)
db_cores=$(echo "($d1 - $d0) / $HZ / $D" | bc -l)
rss_mb=0
for cp in "${CPS[@]}"; do rss_mb=$(echo "$rss_mb + $(awk '/VmRSS/ {print $2 / 1024}' "/proc/$cp/status")" | bc -l); done
load=$(cut -d' ' -f1 /proc/loadavg)
# The swarms' lines in the window: connected edges, ack p50/p99 (ms), uplink.
connected=0; acks=""; p99=0; uplink=0
for i in $(seq 0 $((K - 1))); do
    window=$(tail -n +"$((lines0[i] + 1))" "$W/swarm$i.log" | grep -E '^[0-9]')
    connected=$((connected + $(echo "$window" | tail -1 | cut -d' ' -f2)))
    acks="$acks$(echo "$window" | awk '{print $6}')"$'\n'
    p99=$(echo "$window" | awk -v m="$p99" '$7 > m {m = $7} END {print m}')
    uplink=$(echo "$uplink + $(echo "$window" | tail -1 | cut -d' ' -f8) / $K" | bc -l)
done
p50=$(echo "$acks" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
rounds=$(grep "round done" "$leader" | tail -n +"$((r0 + 1))" | sed 's/.*elapsed_us=\([0-9]*\).*/\1/' | sort -n)
nr=$(echo "$rounds" | grep -c . || true)
round_p50=$(echo "$rounds" | awk -v n="$nr" 'NR == int((n + 1) / 2) {print $1 / 1000}')
round_max=$(echo "$rounds" | tail -1 | awk '{print $1 / 1000}')
per_day=$(echo "($b1 - $b0) / $N / $D * 86400" | bc -l)
printf '| %s | %s ×%s | %s | %.2f | %.2f | %.0f | %s / %s | %s rounds, p50 %s ms, max %s ms | %.0f | %.1f | %s |\n' \
    "$N" "$BACKEND" "$K" "$connected" "$cores" "$db_cores" "$rss_mb" "$p50" "$p99" "$nr" "$round_p50" "$round_max" "$per_day" "$uplink" "$load"
