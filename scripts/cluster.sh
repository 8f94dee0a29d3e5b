#!/usr/bin/env bash
# A local skuldd cluster on 127.0.0.1, for people and for tests.
#
#   scripts/cluster.sh up N        # start nodes 1..N (node 1 founds, the others join)
#   scripts/cluster.sh status      # one line per node: pid, address, health
#   scripts/cluster.sh kill I      # kill -9 node I
#   scripts/cluster.sh restart I   # start node I again (after kill or stop)
#   scripts/cluster.sh down        # stop every node (SIGTERM); data stays
#
# Node I listens on 127.0.0.1:$((SKULD_CLUSTER_PORT + I - 1)) and keeps its
# data in $SKULD_CLUSTER_DIR/nI, its log in nI.log and its pid in nI.pid.
#
# Environment:
#   SKULD_CLUSTER_DIR   data folder (default ./skuld-cluster)
#   SKULD_CLUSTER_PORT  port of node 1 (default 13100)
#   SKULD_BIN           skuldd binary (default: built into the folder)
#   SKULD_CLUSTER_SECRET_FILE  a cluster secret file every node uses
#   SKULD_CLUSTER_ARGS  extra flags for every node
#   SKULD_CLUSTER_PROCS GOMAXPROCS of each node. Default: the machine's
#                       cores shared out among the nodes (at least 1), as a
#                       container's CPU limit would set it: nodes that each
#                       think they own every core spin for work the others
#                       hold, which cost 8% more CPU per operation with
#                       three nodes on two cores. 0: Go's default (every
#                       core). A GOMAXPROCS in the environment wins.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SKULD_CLUSTER_DIR:-./skuld-cluster}
base=${SKULD_CLUSTER_PORT:-13100}
# wait_secs bounds the wait for a node to serve (a joiner waits for node 1).
wait_secs=${SKULD_CLUSTER_WAIT:-60}

usage() {
	sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

bin() {
	if [ -n "${SKULD_BIN:-}" ]; then
		echo "$SKULD_BIN"
		return
	fi
	if [ ! -x "$dir/skuldd" ]; then
		(cd "$root" && go build -o "$dir/skuldd" .) >&2
	fi
	echo "$dir/skuldd"
}

port() { echo $((base + $1 - 1)); }

# procs: the GOMAXPROCS to give each node ("" for Go's default).
procs() {
	if [ -n "${GOMAXPROCS:-}" ]; then
		echo "$GOMAXPROCS"
		return
	fi
	local p=${SKULD_CLUSTER_PROCS:-}
	if [ -z "$p" ]; then
		local n
		n=$(size)
		[ "$n" -ge 1 ] || n=1 # restart in a folder that never saw `up`
		p=$(($(nproc) / n))
		[ "$p" -ge 1 ] || p=1
	fi
	[ "$p" = 0 ] || echo "$p"
}
size() { cat "$dir/size" 2>/dev/null || echo 0; }
pidof_node() { cat "$dir/n$1.pid" 2>/dev/null || true; }

running() {
	local pid
	pid=$(pidof_node "$1")
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# healthy I: the node answers /readyz with 200 (started, and in reach of
# a quorum). Asked with `skuldd ctl ready`, which speaks HTTPS to a node
# with a cluster secret (checking its certificate against the secret's
# authority), so the script needs nothing but the binary.
healthy() {
	local args=(ctl ready --addr "127.0.0.1:$(port "$1")" --timeout 2s)
	if [ -n "${SKULD_CLUSTER_SECRET_FILE:-}" ]; then
		args+=(--cluster-secret-file "$SKULD_CLUSTER_SECRET_FILE")
	fi
	"$(bin)" "${args[@]}" >/dev/null 2>&1
}

# start I: launch node I and wait until it serves.
start() {
	launch "$1" && wait_healthy "$1"
}

# launch I: start node I in the background, joining through every other
# running node.
launch() {
	local i=$1 b joins=() j
	b=$(bin)
	if running "$i"; then
		echo "node $i is already running (pid $(pidof_node "$i"))" >&2
		return 0
	fi
	for j in $(seq 1 "$(size)"); do
		if [ "$j" != "$i" ] && running "$j"; then
			joins+=(--join "127.0.0.1:$(port "$j")")
		fi
	done
	local args=(--bind "127.0.0.1:$(port "$i")" --data-dir "$dir/n$i" "${joins[@]}")
	if [ -n "${SKULD_CLUSTER_SECRET_FILE:-}" ]; then
		args+=(--cluster-secret-file "$SKULD_CLUSTER_SECRET_FILE")
	fi
	# shellcheck disable=SC2206 # word splitting of extra args is wanted
	args+=(${SKULD_CLUSTER_ARGS:-})
	local p
	p=$(procs)
	if [ -n "$p" ]; then
		GOMAXPROCS=$p nohup "$b" "${args[@]}" >>"$dir/n$i.log" 2>&1 &
	else
		nohup "$b" "${args[@]}" >>"$dir/n$i.log" 2>&1 &
	fi
	echo $! >"$dir/n$i.pid"
}

# wait_healthy I: wait until node I answers /readyz.
wait_healthy() {
	local i=$1
	local deadline=$((SECONDS + wait_secs))
	until healthy "$i"; do
		if ! running "$i"; then
			echo "node $i exited; the end of $dir/n$i.log:" >&2
			tail -20 "$dir/n$i.log" >&2
			return 1
		fi
		if [ $SECONDS -ge $deadline ]; then
			echo "node $i did not become healthy within ${wait_secs}s; see $dir/n$i.log" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "node $i up at 127.0.0.1:$(port "$i") (pid $(pidof_node "$i"))"
}

stop() {
	local i=$1 pid
	pid=$(pidof_node "$i")
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		# A graceful stop takes up to 27 s (in-flight requests 10 s, the
		# hand-off of its partitions 15 s, the gossip leave 2 s): wait 40.
		for _ in $(seq 1 800); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
	fi
	rm -f "$dir/n$i.pid"
}

cmd=${1:-}
case "$cmd" in
up)
	n=${2:-}
	[[ "$n" =~ ^[1-9][0-9]*$ ]] || usage
	[ "$(size)" -gt "$n" ] || echo "$n" >"$dir/size"
	# Launch all, then wait: restarted members of an existing cluster need
	# each other to elect a metadata leader; fresh joiners retry their join
	# until node 1 serves.
	for i in $(seq 1 "$n"); do
		launch "$i"
	done
	for i in $(seq 1 "$n"); do
		wait_healthy "$i"
	done
	;;
down)
	for i in $(seq "$(size)" -1 1); do
		stop "$i"
	done
	echo "stopped; data stays in $dir"
	;;
status)
	for i in $(seq 1 "$(size)"); do
		state=stopped
		if running "$i"; then
			state=running
			if healthy "$i"; then state="running healthy"; else state="running unhealthy"; fi
		fi
		echo "node $i 127.0.0.1:$(port "$i") pid=$(pidof_node "$i") $state"
	done
	;;
kill)
	i=${2:-}
	[[ "$i" =~ ^[1-9][0-9]*$ ]] || usage
	pid=$(pidof_node "$i")
	if [ -n "$pid" ]; then
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$dir/n$i.pid"
		echo "node $i killed (pid $pid)"
	else
		echo "node $i is not running" >&2
	fi
	;;
restart)
	i=${2:-}
	[[ "$i" =~ ^[1-9][0-9]*$ ]] || usage
	stop "$i"
	start "$i"
	;;
*)
	usage
	;;
esac
