#!/bin/bash
# ring-netns.sh up N RATE | down N: N network namespaces ar0..ar{N-1} (10.77.0.1..N),
# each on a veth into one bridge, each sending through tbf at RATE (e.g. 100mbit):
# one rate-limited link per rank, as the cost model assumes. Needs root; "down"
# removes them. This kernel has no netem, so latency stays at veth speed (~50 us).
set -e
cmd=$1; n=$2; rate=$3
if [ "$cmd" = up ]; then
  ip netns add arhub
  ip -n arhub link add arbr type bridge
  ip -n arhub link set arbr up
  for i in $(seq 0 $((n-1))); do
    ip netns add ar$i
    ip link add arv$i type veth peer name arp$i
    ip link set arv$i netns ar$i
    ip link set arp$i netns arhub
    ip -n arhub link set arp$i master arbr
    ip -n arhub link set arp$i up
    ip -n ar$i addr add 10.77.0.$((i+1))/24 dev arv$i
    ip -n ar$i link set arv$i up
    ip -n ar$i link set lo up
    ip netns exec ar$i tc qdisc add dev arv$i root tbf rate $rate burst 32kbit latency 400ms
  done
else
  for i in $(seq 0 $((n-1))); do ip netns del ar$i 2>/dev/null || true; done
  ip netns del arhub 2>/dev/null || true
fi
