#!/usr/bin/env bash
# The single-node benchmark suite: the figures the README and the issue
# notes quote, from a fresh node on this machine's disk.
#
#   scripts/bench.sh [N]        # N tasks per throughput run (default 200000)
#
# Prints, one section at a time: the disk's fsync rate; durable enqueue/s
# and claim+complete/s at 1, 16 and 64 clients with p50/p99/p999; claim
# latency at 1e3..1e6 ready tasks; RSS with 1e6 queued 100-byte tasks; and
# the time from a kill -9 restart to serving with those 1e6 tasks.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
work=$(mktemp -d)
bin=$work/skuldd
port=${SKULD_BENCH_PORT:-13900}
addr=127.0.0.1:$port
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$bin" .

# The machine's CPU, so that figures from sessions that ran on different
# hosts under this VM can be told apart.
echo "== machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), family $(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "== disk: fsync rate (4 KiB writes with O_DSYNC, 2000 of them)"
dd if=/dev/zero of="$work/fsync-probe" bs=4k count=2000 oflag=dsync 2>&1 | tail -1
rm -f "$work/fsync-probe"

start() {
	"$bin" --bind "$addr" --data-dir "$work/data" --log-level warn &
	pid=$!
	local t0
	t0=$(date +%s%N)
	for _ in $(seq 1 600); do
		if curl -sf "http://$addr/readyz" >/dev/null 2>&1; then
			echo "serving after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
			return 0
		fi
		sleep 0.05
	done
	echo "node did not come up" >&2
	exit 1
}

stop9() { kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

rm -rf "$work/data"
start
echo "== throughput: enqueue then claim+complete, $N tasks of 100 B"
for c in 1 16 64; do
	n=$N
	[ "$c" = 1 ] && n=$((N / 10))
	"$bin" bench --addr "$addr" --n "$n" --clients "$c" --size 100 2>/dev/null
done
echo "== worker loop: complete carrying the next claim (one request per task), 64 clients"
"$bin" bench --addr "$addr" --n "$N" --clients 64 --size 100 --phases enqueue,work 2>/dev/null

echo "== claim latency by queue depth (one client)"
"$bin" bench --addr "$addr" --claim-scaling --size 100 2>/dev/null
stop9

echo "== memory and restart with 1e6 queued tasks"
rm -rf "$work/data"
start
"$bin" bench --addr "$addr" --phases enqueue --n 1000000 --batch 500 --clients 16 --size 100 --queue rss 2>/dev/null
echo "RSS with 1e6 queued 100-byte tasks: $(grep VmRSS /proc/$pid/status)"
stop9
echo -n "restart after kill -9 with 1e6 tasks: "
start
"$bin" ctl --addr "$addr" count --queue rss
echo "RSS after restart: $(grep VmRSS /proc/$pid/status)"
