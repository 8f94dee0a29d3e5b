#!/usr/bin/env bash
# Throughput of shell workers: `skuldd ctl work` running a trivial command
# (true) once per task, on a fresh node, beside the Go Worker with a no-op
# handler on the same node for scale.
#
#   scripts/bench-shell-worker.sh [N] [CONCURRENCY...]   # default 5000 tasks; 16 64
#
# For each concurrency it enqueues N tasks, starts ctl work, and times
# from its start until the node counts all N completed; tasks/s is N over
# that time (a process start, its stdin and its exit per task dominate).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-5000}
shift || true
CONC=("$@")
[ ${#CONC[@]} -gt 0 ] || CONC=(16 64)
work=$(mktemp -d)
bin=$work/skuldd
port=${SKULD_BENCH_PORT:-13950}
addr=127.0.0.1:$port
pid=
wpid=
cleanup() {
	for p in $wpid $pid; do
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$bin" .
"$bin" --bind "$addr" --data-dir "$work/data" --log-level warn &
pid=$!
for _ in $(seq 1 600); do
	curl -sf "http://$addr/readyz" >/dev/null 2>&1 && break
	sleep 0.05
done

# completed Q prints how many tasks of queue Q are completed.
completed() {
	"$bin" ctl --addr "$addr" queues | sed -n "s/.*\"queue\":\"$1\".*\"completed\":\([0-9]*\).*/\1/p"
}

for c in "${CONC[@]}"; do
	q=shell-$c
	"$bin" bench --addr "$addr" --phases enqueue --n "$N" --clients 16 --size 100 --queue "$q" >/dev/null 2>&1
	t0=$(date +%s%N)
	"$bin" ctl --addr "$addr" work --queue "$q" --concurrency "$c" -- true >/dev/null 2>&1 &
	wpid=$!
	until [ "$(completed "$q")" = "$N" ]; do sleep 0.05; done
	t1=$(date +%s%N)
	kill -INT "$wpid"
	wait "$wpid" 2>/dev/null || true
	wpid=
	echo "ctl work -- true, concurrency $c: $N tasks in $(( (t1 - t0) / 1000000 )) ms: $(( N * 1000000000 / (t1 - t0) )) tasks/s"
done
echo "== for scale: the Go Worker, a no-op handler, 64 handlers, $N tasks"
"$bin" bench --addr "$addr" --n "$N" --clients 64 --size 100 --phases enqueue,worker 2>/dev/null | grep -i worker
