#!/bin/bash
# ring-run.sh N BYTES STEPS: runs `tidemill-sim allreduce` as ranks 0..N-1, one
# per namespace made by ring-netns.sh, and prints each rank's median step.
# B overrides the binary (default: the release build).
n=$1; bytes=$2; steps=$3
B=${B:-target/x86_64-unknown-linux-gnu/release/tidemill-sim}
out=$(mktemp -d)
for i in $(seq $((n-1)) -1 0); do
  ip netns exec ar$i env RANK=$i WORLD_SIZE=$n MASTER_ADDR=10.77.0.1 MASTER_PORT=29555 \
    "$B" allreduce --bytes "$bytes" --steps "$steps" --timeout-s 20 > "$out/$i" 2>&1 &
done
wait
for i in $(seq 0 $((n-1))); do tail -1 "$out/$i"; done
rm -rf "$out"
