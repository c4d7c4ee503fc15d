#!/usr/bin/env bash
# A three-organisation federation on one host, with only the commands the
# README documents: peer init, peer run (in the background), peer invite,
# peer submit, peer tasks, peer status, peer members, peer limit set, peer ledger and
# peer leave.
#
#   make build && bash examples/federation.sh [WORKDIR]
#
# WORKDIR (default: a new temporary directory) receives the three data
# directories (uni-a, uni-b, uni-c), their machines files, the copy of the
# federation secret and each peer's log; it is kept afterwards so that you
# can look around. The peers are stopped when the script exits, whatever
# happens.
#
# Environment:
#   PEER=/path/to/peer   the binary (default: bin/peer of this repository)
#   BASE_PORT=9440       uni-a listens on BASE_PORT (libp2p) and BASE_PORT+1
#                        (API), uni-b on +10/+11, uni-c on +20/+21
#   TIMEOUT=180          seconds to wait for the peers and for the jobs
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PEER=${PEER:-$here/../bin/peer}
BASE_PORT=${BASE_PORT:-9440}
TIMEOUT=${TIMEOUT:-180}
ORGS=(uni-a uni-b uni-c)

if [[ ! -x $PEER ]]; then
	echo "federation.sh: no peer binary at $PEER: run 'make build' first, or set PEER=/path/to/peer" >&2
	exit 2
fi
PEER=$(cd "$(dirname "$PEER")" && pwd)/$(basename "$PEER")
if [[ $# -gt 1 ]]; then
	echo "usage: federation.sh [WORKDIR]" >&2
	exit 2
fi
if [[ $# -eq 1 ]]; then
	WORK=$1
	mkdir -p "$WORK"
else
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/coopgrid-federation.XXXXXX")
fi
WORK=$(cd "$WORK" && pwd)
for org in "${ORGS[@]}"; do
	if [[ -e $WORK/$org ]]; then
		echo "federation.sh: $WORK/$org already exists: give an empty work directory" >&2
		exit 2
	fi
done

# Every peer started is stopped on exit: SIGTERM (a clean stop), then
# SIGKILL for any that is still there after 30 s.
pids=()
cleanup() {
	local code=$?
	trap - EXIT INT TERM
	trap '' PIPE # a closed stdout (| head) must not cut the clean-up short
	local live=()
	for pid in "${pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			live+=("$pid")
		fi
	done
	if [[ ${#live[@]} -gt 0 ]]; then
		echo "== stopping ${#live[@]} peer(s)" >&2
		for _ in $(seq 1 60); do
			local still=()
			for pid in "${live[@]}"; do
				kill -0 "$pid" 2>/dev/null && still+=("$pid")
			done
			[[ ${#still[@]} -eq 0 ]] && break
			sleep 0.5
		done
		for pid in "${live[@]}"; do
			kill -KILL "$pid" 2>/dev/null || true
		done
	fi
	if [[ $code -ne 0 ]]; then
		echo "federation.sh: FAILED (exit $code); the peers' logs are in $WORK/*.log" >&2
	fi
	exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# say prints a step; run prints a command as you would type it, then runs it.
say() { printf '\n== %s\n' "$*"; }
run() {
	local shown=("$@")
	[[ ${shown[0]} == "$PEER" ]] && shown[0]=peer
	printf '$ %s\n' "${shown[*]}"
	"$@"
}
fail() {
	echo "federation.sh: $*" >&2
	exit 1
}

# Ports by arithmetic, not by $(function): see wait_ready on command
# substitutions and a pending Ctrl-C.
listen_addr() { listen="/ip4/127.0.0.1/tcp/$((BASE_PORT + 10 * $1))" api="127.0.0.1:$((BASE_PORT + 10 * $1 + 1))"; }

# wait_ready ORG PID: wait for `ready:` in the peer's output.
wait_ready() {
	local org=$1 pid=$2 log=$WORK/$1.log n
	# An arithmetic loop, not $(seq …): bash 5.2 runs a pending Ctrl-C
	# trap while it expands a command substitution, and then fails to
	# parse the trap ("unexpected EOF while looking for matching `)'",
	# exit 2 instead of 130); this loop is where the script waits, and
	# the commands between two peers' starts use none either.
	for ((n = 0; n < TIMEOUT * 2; n++)); do
		if grep -q '^ready: ' "$log"; then
			sed 's/^/    /' "$log" | grep -v 'level=' || true
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "peer run for $org exited"; }
		sleep 0.5
	done
	cat "$log" >&2
	fail "$org was not ready after ${TIMEOUT}s"
}

# start ORG [ARGS…]: peer run in the background, output in WORK/ORG.log.
start() {
	local org=$1
	shift
	printf '$ peer run --data %s%s > %s 2>&1 &\n' "$WORK/$org" "${*:+ $*}" "$WORK/$org.log"
	"$PEER" run --data "$WORK/$org" "$@" >"$WORK/$org.log" 2>&1 &
	pids+=($!)
	wait_ready "$org" $!
}

echo "coopgrid: a three-organisation federation in $WORK"
echo "peer binary: $PEER"

# 1. Each institution describes the machines it offers. With the process
# executor, tasks run as real processes on this host; the owner allows
# /bin/sh only.
i=0
for org in "${ORGS[@]}"; do
	watts=$((120 - 30 * i)) # uni-c's machines are the most efficient
	cat >"$WORK/$org-machines.yaml" <<EOF
machines:
  - name: ${org#uni-}1
    gflops: 20
    busy_watts: $watts
  - name: ${org#uni-}2
    gflops: 20
    busy_watts: $watts
policy:
  allow: [/bin/sh]
  # A demo on one throw-away host: tasks run as you, and could read the
  # peers' keys. A real peer sets run_as instead (docs/SECURITY.md).
  unsafe_run_as_peer_user: true
  max_wall_clock: 1h
EOF
	i=$((i + 1))
done

say "uni-a starts a new federation"
listen_addr 0
run "$PEER" init --org uni-a --data "$WORK/uni-a" --machines "$WORK/uni-a-machines.yaml" --new-federation \
	--listen "$listen" --api "$api"
start uni-a
BOOT=$(grep -m1 '^listening on ' "$WORK/uni-a.log" | cut -d' ' -f3)
[[ $BOOT == */p2p/* ]] || fail "uni-a printed no bootstrap address"

say "uni-a hands a copy of its federation secret to the others (out of band)"
run cp "$WORK/uni-a/federation.key" "$WORK/federation.key"

for idx in 1 2; do
	org=${ORGS[$idx]}
	say "uni-a invites $org: a signed, single-use invitation, valid 24 h (handed over out of band)"
	run "$PEER" invite "$org" --data "$WORK/uni-a" -o "$WORK/$org.invitation"
	say "$org joins through uni-a's address with its invitation"
	listen_addr "$idx"
	run "$PEER" init --org "$org" --data "$WORK/$org" --machines "$WORK/$org-machines.yaml" \
		--secret "$WORK/federation.key" --listen "$listen" --api "$api"
	start "$org" --bootstrap "$BOOT" --invitation "$WORK/$org.invitation"
done

say "the federation as uni-c sees it"
run "$PEER" status --data "$WORK/uni-c"

say "the Raft members, reachability and last contact as the leader sees them"
run "$PEER" members --data "$WORK/uni-c"

say "uni-c limits its tasks to 80% of its machines' busy power"
run "$PEER" limit set 80% --data "$WORK/uni-c"

say "each organisation submits the parameter sweep (8 tasks, one output file each)"
for org in "${ORGS[@]}"; do
	run "$PEER" submit --data "$WORK/$org" "$here/jobs/sweep.yaml"
done

say "waiting for every task to finish"
for ((n = 1; n <= TIMEOUT * 2; n++)); do
	left=$("$PEER" tasks --data "$WORK/uni-a" --state queued,assigned,running --json)
	[[ $left == "[]" ]] && break
	[[ $n -eq $((TIMEOUT * 2)) ]] && fail "tasks still unfinished after ${TIMEOUT}s: $left"
	sleep 0.5
done
run "$PEER" tasks --data "$WORK/uni-a"
failed=$("$PEER" tasks --data "$WORK/uni-a" --state failed,cancelled --json)
[[ $failed == "[]" ]] || fail "some tasks did not succeed: $failed"

say "the outputs came back to each submitter's data directory"
returned=0
for org in "${ORGS[@]}"; do
	files=("$WORK/$org"/outputs/*/result-*.txt)
	[[ -e ${files[0]} ]] || fail "no outputs in $WORK/$org/outputs"
	[[ ${#files[@]} -eq 8 ]] || fail "$org got ${#files[@]} output files, want 8"
	returned=$((returned + ${#files[@]}))
	printf '$ cat %s/outputs/*/result-*.txt\n' "$WORK/$org"
	cat "${files[@]}" | sort
done

say "the energy ledger: each organisation's tasks (user) and machines (owner)"
run "$PEER" ledger --data "$WORK/uni-b"

say "uni-c and uni-b leave the federation; uni-a stops with SIGTERM on exit"
run "$PEER" leave --data "$WORK/uni-c"
run "$PEER" leave --data "$WORK/uni-b"
run "$PEER" status --data "$WORK/uni-a"

echo
echo "federation.sh: OK: 24 tasks done, $returned output files returned; the data directories and logs are in $WORK"
