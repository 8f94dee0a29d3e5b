#!/usr/bin/env bash
# The cluster benchmark: a local 3-node cluster (N=3, W=2 by default)
# against one node, on this machine's disk, through the real binary.
#
#   scripts/bench-cluster.sh [N]   # N tasks per run (default 100000)
#   SKULD_BENCH_FAILOVER=0 scripts/bench-cluster.sh   # without the failover runs
#   SKULD_BENCH_CLIENT=/path/skuldd scripts/bench-cluster.sh  # this load generator
#   SKULD_BENCH_CLIENT_PROCS=2 scripts/bench-cluster.sh  # its GOMAXPROCS (default 1)
#
# Prints durable enqueue/s and claim+complete/s at 64 clients with
# p50/p99/p999, first for one node, then for three nodes with the clients'
# connections spread over the three. Then the failover figure: the time
# from a crash of a partition leader to the first claim its successor
# serves (go test -bench Failover, gossip with production timing), and
# the same through the real binary: kill -9 of a node under 64 clients'
# enqueue load, until every partition it led has a new leader.
#
# Each node runs with the GOMAXPROCS scripts/cluster.sh gives it: the
# machine's cores shared out among the nodes (one each for three nodes on
# two cores); SKULD_CLUSTER_PROCS=0 gives every node Go's default instead.
#
# The load generator runs with GOMAXPROCS=1 (SKULD_BENCH_CLIENT_PROCS):
# it shares the machine with the nodes, and on one core it spends about a
# quarter less CPU for the same load (no spinning for work), which the
# nodes get instead. It drives 64 clients on one core without being the
# bottleneck: one node serves over 30k enqueues/s either way.
#
# Before each load it prints the disk's fsync rate and the CPU an fsync
# costs (the machine's phase); after it, the CPU the nodes and the load
# generator used. This machine's speed drifts from run to run (the load
# generator's own CPU per op varies by up to 1.7x), so compare builds by
# the ratio of node CPU to load-generator CPU, which stays within a few
# percent, rather than by ops/s alone; and keep the load generator the
# same binary across the builds compared (SKULD_BENCH_CLIENT), since a
# change to the shared wire code makes it cheaper too.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
work=$(mktemp -d)
export SKULD_BIN=$work/skuldd SKULD_CLUSTER_DIR=$work/cluster
port=${SKULD_BENCH_PORT:-13950}
cleanup() {
	SKULD_CLUSTER_PORT=$port scripts/cluster.sh down >/dev/null 2>&1 || true
	SKULD_CLUSTER_PORT=$((port + 10)) SKULD_CLUSTER_DIR=$work/one scripts/cluster.sh down >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$SKULD_BIN" .

tck=$(getconf CLK_TCK)
# nodecpu DIR: CPU ticks the nodes whose pid files are in DIR have used.
nodecpu() {
	local t=0 p
	for f in "$1"/n*.pid; do
		p=$(cat "$f")
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
# load DIR ADDRS: run the bench against ADDRS and report CPU use.
load() {
	local before after TIMEFORMAT
	before=$(nodecpu "$1")
	TIMEFORMAT="%U %S"
	{ time GOMAXPROCS=${SKULD_BENCH_CLIENT_PROCS:-1} "${SKULD_BENCH_CLIENT:-$SKULD_BIN}" bench --addr "$2" -n "$N" -c 64 2>/dev/null >&3; } 3>&1 2>"$work/time"
	after=$(nodecpu "$1")
	awk -v n=$((after - before)) -v tck="$tck" '{ nodes = n / tck; gen = $1 + $2;
		printf "cpu: nodes %.1f s, load generator %.1f s, ratio %.2f\n", nodes, gen, nodes / gen }' "$work/time"
}

# probe: the disk's speed right now, since it sets the phase of this
# machine (README, Benchmarks): 1,000 appending 4 KiB writes with O_DSYNC
# (each a write and an fdatasync), timed for the wall and for the CPU
# they cost, on the filesystem the nodes write to.
probe() {
	local TIMEFORMAT="%R %U %S"
	{ time dd if=/dev/zero of="$work/fsync-probe" bs=4k count=1000 oflag=dsync 2>/dev/null; } 2>"$work/probe"
	rm -f "$work/fsync-probe"
	awk '{ printf "disk: %.0f fsyncs/s, %.0f us of CPU each (1000 x 4 KiB, O_DSYNC)\n", 1000 / $1, ($2 + $3) * 1e3 }' "$work/probe"
}

# placed ADDR: wait until every partition has a cohort of three.
placed() {
	for _ in $(seq 1 600); do
		out=$("$SKULD_BIN" ctl --addr "$1" cluster 2>/dev/null || true)
		# Node ids are JSON strings: "cohort":["1","2","3"].
		total=$({ grep -o '"cohort":\[[0-9,"]*\]' <<<"$out" || true; } | wc -l)
		full=$({ grep -o '"cohort":\["[0-9]*","[0-9]*","[0-9]*"\]' <<<"$out" || true; } | wc -l)
		if [ "$total" -gt 0 ] && [ "$total" = "$full" ]; then
			return 0
		fi
		sleep 0.1
	done
	echo "placement did not settle" >&2
	return 1
}

# gomaxprocs DIR: the GOMAXPROCS of the first node in DIR (from its env).
gomaxprocs() {
	local p
	p=$(cat "$1/n1.pid")
	{ tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^GOMAXPROCS=//p' | grep . || echo "default ($(nproc))"; } | head -1
}

# The machine's CPU, so that figures from sessions that ran on different
# hosts under this VM can be told apart.
echo "== machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), family $(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "== one node, 64 clients"
SKULD_CLUSTER_PORT=$((port + 10)) SKULD_CLUSTER_DIR=$work/one scripts/cluster.sh up 1 >/dev/null
echo "GOMAXPROCS per node: $(gomaxprocs "$work/one")"
probe
load "$work/one" "127.0.0.1:$((port + 10))"
SKULD_CLUSTER_PORT=$((port + 10)) SKULD_CLUSTER_DIR=$work/one scripts/cluster.sh down >/dev/null

echo "== three nodes (N=3, W=2), 64 clients over 3 connections, one per node"
SKULD_CLUSTER_PORT=$port scripts/cluster.sh up 3 >/dev/null
placed "127.0.0.1:$port"
echo "GOMAXPROCS per node: $(gomaxprocs "$work/cluster")"
probe
addrs="127.0.0.1:$port,127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))"
load "$work/cluster" "$addrs"
SKULD_CLUSTER_PORT=$port scripts/cluster.sh down >/dev/null

[ "${SKULD_BENCH_FAILOVER:-1}" = 1 ] || exit 0
echo "== failover: crash of a partition leader to the first claim its successor serves"
go test -run '^$' -bench '^BenchmarkFailover$' -benchtime 3x ./node/ | grep -E 'Benchmark|ok'

# The same through the real binary and under load: kill -9 of node 3
# while 64 clients enqueue through nodes 1 and 2, then the time until
# node 1's view shows none of node 3's partitions still led by it (each
# successor has won its handoff and serves).
echo "== failover under load: kill -9 of a node during 64-client enqueue, until every partition it led has a new leader"
export SKULD_CLUSTER_DIR=$work/failover # a fresh cluster
SKULD_CLUSTER_PORT=$port scripts/cluster.sh up 3 >/dev/null
placed "127.0.0.1:$port"
victim=$("$SKULD_BIN" ctl --addr "127.0.0.1:$((port + 2))" cluster | grep -o '"self":"[0-9]*"' | cut -d'"' -f4)
GOMAXPROCS=${SKULD_BENCH_CLIENT_PROCS:-1} "${SKULD_BENCH_CLIENT:-$SKULD_BIN}" bench --addr "127.0.0.1:$port,127.0.0.1:$((port + 1))" \
	-n 10000000 -c 64 --phases enqueue >/dev/null 2>&1 &
loadpid=$!
sleep 3
began=$(date +%s%N)
SKULD_CLUSTER_PORT=$port scripts/cluster.sh kill 3 >/dev/null
took=""
deadline=$((SECONDS + 30))
while [ $SECONDS -lt $deadline ]; do
	out=$("$SKULD_BIN" ctl --addr "127.0.0.1:$port" --timeout 1s cluster 2>/dev/null || true)
	parts=${out#*\"partitions\":}
	if [ -n "$out" ] && ! grep -qE "\"leader\":\"$victim\"" <<<"$parts"; then
		took=$((($(date +%s%N) - began) / 1000000))
		break
	fi
	sleep 0.05
done
kill "$loadpid" 2>/dev/null || true
wait "$loadpid" 2>/dev/null || true
SKULD_CLUSTER_PORT=$port scripts/cluster.sh down >/dev/null
if [ -z "$took" ]; then
	echo "node 3's partitions still had no new leader 30 s after the crash" >&2
	exit 1
fi
echo "every partition node 3 led had a new leader ${took} ms after kill -9"
