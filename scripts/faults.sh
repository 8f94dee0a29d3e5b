#!/usr/bin/env bash
# Run skuldd's fault-injection suite (faults/, TESTING.md sections 5 and 7):
# five skuldd nodes in network namespaces, a workload of worker processes,
# a nemesis schedule drawn from the seed, and a history for the checkers.
#
#   scripts/faults.sh --quick [--seed N] [--out DIR]   every nemesis once, at most 4 minutes
#   scripts/faults.sh --time 30m [--seed N] [--out DIR] a long run, nemeses at random
#   scripts/faults.sh --time 2m --nemeses wipe --w 1    beyond the bounds: W=1 with its replica lost
#   scripts/faults.sh --time 2m --nemeses wipe-majority a majority of a partition lost for good
#   scripts/faults.sh --quick --upgrade [--seed N]      upgrade mode: start on the build faults/upgrade-from
#                                                      names, roll to this one under faults, finalize
#
# --nemeses a,b,c runs only those (the wipes run only when named there);
# --exclude a,b leaves nemeses out.
# Other flags go to the tool (faults --help). Needs root: namespaces, veths,
# a bridge and iptables inside the namespaces, all in 10.77.0.0/24. Builds
# skuldd with -tags skuldtest (the test hooks) and the tool into DIR/bin.
# Everything it sets up is torn down on exit. The output (history.jsonl,
# final.jsonl, run.json, summary.json, leaders.jsonl, periodic.json (the
# schedules), shards.json (the shard members), node logs and data dirs)
# stays in DIR, whatever the outcome (summary.json too when the run fails),
# by default ${TMPDIR:-/tmp}/skuldd-faults/seed-N.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

seed=1
out=
upgrade=
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--seed) seed=$2; args+=("$1" "$2"); shift 2 ;;
	--seed=*) seed=${1#--seed=}; args+=("$1"); shift ;;
	--out) out=$2; shift 2 ;;
	--out=*) out=${1#--out=}; shift ;;
	--upgrade) upgrade=1; shift ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) args+=("$1"); shift ;;
	esac
done
out=${out:-${TMPDIR:-/tmp}/skuldd-faults/seed-$seed}

if [ "$(id -u)" != 0 ]; then
	echo "faults.sh: must run as root (network namespaces, iptables)" >&2
	exit 1
fi
if ! command -v iptables >/dev/null || ! command -v iptables-restore >/dev/null; then
	echo "faults.sh: installing iptables" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >&2
fi

mkdir -p "$out/bin"
out=$(cd "$out" && pwd)
echo "faults.sh: building skuldd (-tags skuldtest) and the tool into $out/bin" >&2
(cd "$root" && go build -tags skuldtest -o "$out/bin/skuldd" . && go build -o "$out/bin/faults" ./faults/cmd/faults)
if [ -n "$upgrade" ]; then
	# Upgrade mode: the older build, from the commit faults/upgrade-from
	# names, built in a worktree of this repository (removed after).
	rev=$(grep -v '^#' "$root/faults/upgrade-from" | head -1)
	if ! git -C "$root" cat-file -e "$rev^{commit}" 2>/dev/null; then
		echo "faults.sh: commit $rev (faults/upgrade-from) is not in this repository (a shallow clone?)" >&2
		exit 1
	fi
	wt=$(mktemp -d "${TMPDIR:-/tmp}/skuldd-upgrade-from.XXXXXX")
	old="$out/bin/skuldd-${rev:0:12}"
	echo "faults.sh: building the older skuldd ($rev) into $old" >&2
	git -C "$root" worktree add --quiet --detach "$wt" "$rev"
	built=0
	(cd "$wt" && go build -tags skuldtest -o "$old" .) && built=1
	git -C "$root" worktree remove --force "$wt"
	[ "$built" = 1 ] || exit 1
	args+=(--upgrade-from "$old")
fi

# The tool tears down what it made; this is the backstop should it die:
# processes left in the namespaces, the namespaces, the veths, the bridge.
cleanup() { "$out/bin/faults" teardown >/dev/null 2>&1 || true; }
trap cleanup EXIT

# The tool runs in the background so that an INT or TERM sent to this
# script reaches it (bash defers its traps while a foreground command
# runs): it then heals, stops and tears down by itself.
"$out/bin/faults" "${args[@]}" --out "$out" --skuldd "$out/bin/skuldd" &
tool=$!
trap 'kill -TERM "$tool" 2>/dev/null || true' INT TERM
status=0
while :; do
	wait "$tool" && status=0 || status=$?
	kill -0 "$tool" 2>/dev/null || break
done
exit "$status"
