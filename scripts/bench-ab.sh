#!/usr/bin/env bash
# A/B of two skuldd binaries on the single-node claim path, paired run by
# run so that the machine's drift cancels out:
#
#   scripts/bench-ab.sh OLD NEW [RUNS]   # default 9 runs of each, A B A B ...
#
# Each run starts a fresh node of one binary on one core (GOMAXPROCS=1),
# enqueues 100,000 tasks, and measures 100,000 claim+complete at 64
# clients: ops/s, and the node's own CPU over the phase (its utime +
# stime from /proc, in clock ticks). The load generator is OLD's `skuldd
# bench` for both, so a change in the client side of the wire code does
# not move the figures. It prints every run and the medians; compare the
# CPU per phase (steady within a few percent) more than the ops/s.
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2") runs=${3:-9}
port=${SKULD_BENCH_PORT:-13990}
work=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# ready: the node on $port serves: /readyz says so, or (a build from
# before /readyz, which answers it 404) /healthz does.
ready() {
	local code
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" 2>/dev/null) || return 1
	[ "$code" = 200 ] || { [ "$code" = 404 ] && curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; }
}

# one BIN: prints "ops/s ticks" of one run.
one() {
	local bin=$1 dir=$work/data out t0 t1
	rm -rf "$dir"
	GOMAXPROCS=1 "$bin" --bind "127.0.0.1:$port" --data-dir "$dir" --log-level warn &
	pid=$!
	for _ in $(seq 1 200); do
		ready && break
		sleep 0.05
	done
	GOMAXPROCS=1 "$old" bench --addr "127.0.0.1:$port" -n 100000 -c 64 --phases enqueue --queue ab >/dev/null
	t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	out=$(GOMAXPROCS=1 "$old" bench --addr "127.0.0.1:$port" -n 100000 -c 64 --phases claim --queue ab --json)
	t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	echo "$(echo "$out" | sed -n 's/.*"ops_per_sec":\([0-9.]*\).*/\1/p' | cut -d. -f1) $((t1 - t0))"
}

: >"$work/old" && : >"$work/new"
for r in $(seq 1 "$runs"); do
	o=$(one "$old") n=$(one "$new")
	echo "run $r: old $o, new $n (claim+complete ops/s, node CPU ticks)"
	echo "$o" >>"$work/old"
	echo "$n" >>"$work/new"
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for side in old new; do
	echo "$side: median $(cut -d' ' -f1 "$work/$side" | median) ops/s, $(cut -d' ' -f2 "$work/$side" | median) ticks"
done
