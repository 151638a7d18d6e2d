#!/usr/bin/env bash
# Stops the ovnkube processes started by contrib/demo.sh (pidfiles in $CLUSTER_STATE/demo).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
demo=${CLUSTER_STATE:-$root/_output/cluster}/demo
shopt -s nullglob
pids=()
for f in "$demo"/*.pid; do
  pid=$(cat "$f"); kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  # ip netns exec replaces itself with ovnkube: the pid is ovnkube's.
  rm -f "$f"
done
for i in $(seq 1 50); do
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [[ $alive == 0 ]] && break; sleep 0.1
done
for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
rm -rf "$demo"
((${#pids[@]})) && echo "demo: stopped ${#pids[@]} ovnkube processes"
exit 0
