#!/usr/bin/env bash
# bash bench/million/run.sh, after make build (issue 17, docs/BENCHMARKS.md):
# N finished tasks through one real peer (`peer run`, simulated executor,
# MACHINES one-slot machines, retention by count: consensus.retention_keep
# KEEP, the new federation's rule), measured at each of the POINTS finished
# tasks: the peer's RSS, the newest Raft snapshot's size (it holds the
# queue, up to AHEAD tasks, besides the KEEP finished ones), raft.db and
# history.db on disk, the mean commit latency of the entries since the
# previous point (coopgrid_commit_seconds: propose to applied on this peer,
# the cost of one apply as the peer's own clients see it) and the rate of
# finished tasks.
# The RSS is also split into its anonymous part (the Go heap and stacks)
# and its file-backed part (bbolt's memory maps of raft.db and history.db).
# The peer's CPU (user + system, /proc/PID/stat) per task finished since the
# previous point is the cost of applying a task, independent of the wait
# for the CPU that the commit latency includes on a loaded host.
# At the end: the peer is killed (SIGKILL: no snapshot at stop, the
# restart replays what was applied since the last snapshot) and started
# again, timed to its `ready:` line and to its first /v1/status answer;
# then stopped (SIGTERM: a clean stop, which snapshots) and started again,
# timed the same way; then stopped and `peer verify` of its data directory
# is timed.
#
#   N=1000000 POINTS="10000 100000 1000000" MACHINES=100 KEEP=1000
#   BATCH=10000 (tasks per submission) AHEAD=20000 (most tasks queued)
#   OUT=bench-million.out (results.tsv, the peer's logs), KEEP_DIR=1
#   CRASH_COPY=DIR: a copy of the data directory just after the SIGKILL,
#   before any restart touched it, for bench/million/restart.sh's trials
#
# Everything started here is a child ended by pid on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
N="${N:-1000000}"
POINTS="${POINTS:-10000 100000 1000000}"
MACHINES="${MACHINES:-100}"
KEEP="${KEEP:-1000}"
BATCH="${BATCH:-10000}"
AHEAD="${AHEAD:-20000}"
OUT="${OUT:-bench-million.out}"
BIN="${BIN:-$repo/bin/peer}"

log() { printf '[bench-million %s] %s\n' "$(date +%T)" "$*" >&2; }
base="$(mktemp -d "${TMPDIR:-/tmp}/coopgrid-bench-million-XXXXXX")"
mkdir -p "$OUT"
PEER_PID=""
stop_peer() {
	if [ -n "$PEER_PID" ] && kill -0 "$PEER_PID" 2>/dev/null; then
		kill -TERM "$PEER_PID" 2>/dev/null || true
		for _ in $(seq 600); do kill -0 "$PEER_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$PEER_PID" 2>/dev/null || true
	fi
	PEER_PID=""
}
cleanup() { local rc=$?; stop_peer; [ -n "${KEEP_DIR:-}" ] || rm -rf "$base"; exit $rc; }
trap cleanup EXIT INT TERM

data="$base/org-a"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
api="127.0.0.1:$port"
{
	echo "machines:"
	for i in $(seq "$MACHINES"); do
		printf '  - name: m%03d\n    gflops: 10\n    busy_watts: 100\n    idle_watts: 20\n' "$i"
	done
	printf 'policy:\n  allow: [/bin/true]\n  unsafe_run_as_peer_user: true\n  max_wall_clock: 10m\n'
} > "$base/machines.yaml"
"$BIN" init --org org-a --data "$data" --listen /ip4/127.0.0.1/tcp/0 --api "$api" --machines "$base/machines.yaml" --new-federation >"$OUT/init.log" 2>&1
# The simulated executor; retention by count only (a federation rule, read
# by the first peer of a new federation).
python3 - "$data/config.yaml" "$KEEP" <<'PY'
import sys, re
p, keep = sys.argv[1], sys.argv[2]
s = open(p).read()
def put(s, section, key, val):
    m = re.search(r'(?m)^%s:\n' % section, s)
    if not m:
        return s + "%s:\n  %s: %s\n" % (section, key, val)
    body_start = m.end()
    km = re.compile(r'(?m)^  %s:.*$' % key)
    nxt = re.search(r'(?m)^\S', s[body_start:])
    end = body_start + (nxt.start() if nxt else len(s) - body_start)
    sec = s[body_start:end]
    if km.search(sec):
        sec = km.sub("  %s: %s" % (key, val), sec, count=1)
    else:
        sec = "  %s: %s\n" % (key, val) + sec
    return s[:body_start] + sec + s[end:]
s = put(s, "executor", "kind", "sim")
s = put(s, "consensus", "retention_after", "0s")
s = put(s, "consensus", "retention_keep", keep)
open(p, "w").write(s)
PY
token="$(cat "$data/api.token")"
call() { curl -sS --max-time 60 -H "Authorization: Bearer $token" "$@"; }

start_peer() {
	local logf="$1"
	"$BIN" run --data "$data" --log-level warn >"$logf.out" 2>"$logf.err" &
	PEER_PID=$!
}
wait_ready() { # prints seconds until ready: and until /v1/status answers
	local t0=$1 tr="" ts=""
	for _ in $(seq 6000); do
		if [ -z "$tr" ] && grep -q '^ready: ' "$2.out" 2>/dev/null; then tr=$(($(date +%s%N) - t0)); fi
		if [ -z "$ts" ] && call -o /dev/null -f "http://$api/v1/status" 2>/dev/null; then ts=$(($(date +%s%N) - t0)); fi
		[ -n "$tr" ] && [ -n "$ts" ] && break
		sleep 0.05
	done
	echo "$(awk -v n="$tr" 'BEGIN{printf "%.2f", n/1e9}') $(awk -v n="$ts" 'BEGIN{printf "%.2f", n/1e9}')"
}

log "starting the peer ($MACHINES simulated machines, keep $KEEP) in $base"
start_peer "$OUT/peer1"
read -r r s < <(wait_ready "$(date +%s%N)" "$OUT/peer1")
log "ready in ${r}s (status ${s}s)"

# One submission body of BATCH `true` tasks of 1 MFLOP.
python3 -c "
import json,sys
n=int(sys.argv[1])
print(json.dumps({'tasks':[{'argv':['/bin/true'],'size_mflop':1,'wall_limit_ms':60000} for _ in range(n)]}))" "$BATCH" > "$base/batch.json"

metric() { # sum of a metric's samples matching a pattern
	call "http://$api/metrics" | awk -v pat="$1" '$0 !~ /^#/ && $1 ~ pat {s += $2} END {printf "%.6f", s}'
}
pending() { # queued + running of org-a
	call "http://$api/metrics" | awk '$1 ~ /^coopgrid_org_queue_length\{/ {q += $2} $1 ~ /^coopgrid_org_tasks\{.*state="(running|assigned)"/ {r += $2} END {print q + r}'
}
du_b() { du -sb "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
newest_snapshot() { # bytes of the newest Raft snapshot's state (0: none yet)
	local f
	f=$(ls -t "$data"/raft/snapshots/*/state.bin 2>/dev/null | head -1)
	if [ -n "$f" ]; then stat -c %s "$f"; else echo 0; fi
}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$PEER_PID/status"; }
cpu_ticks() { # the peer's user + system CPU so far, in clock ticks
	awk '{print $14 + $15}' "/proc/$PEER_PID/stat"
}
rss_split() { # anonymous and file-backed RSS in MiB
	awk '/^RssAnon/ {a = $2} /^RssFile/ {f = $2} END {printf "%.0f\t%.0f", a/1024, f/1024}' "/proc/$PEER_PID/status"
}

printf 'finished\twall_s\trate_per_s\trss_mb\tsnapshot_b\traft_db_b\thistory_db_b\tcommit_mean_ms\tload\trss_anon_mb\trss_file_mb\tcpu_ms_per_task\n' > "$OUT/results.tsv"
submitted=0
t0=$(date +%s%N)
tprev=$t0; dprev=0
hz=$(getconf CLK_TCK); cpu_prev=$(cpu_ticks)
csum_prev=$(metric '^coopgrid_commit_seconds_sum'); ccnt_prev=$(metric '^coopgrid_commit_seconds_count')
set -- $POINTS
for point in "$@"; do
	while :; do
		p=$(pending)
		done_=$((submitted - p))
		if [ "$done_" -ge "$point" ]; then break; fi
		if [ "$submitted" -lt "$N" ] && [ "$p" -lt "$AHEAD" ]; then
			code=$(call -o "$base/submit.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary @"$base/batch.json" "http://$api/v1/tasks")
			if [ "${code:0:1}" != 2 ]; then log "submit: HTTP $code: $(head -c 500 "$base/submit.out")"; exit 1; fi
			submitted=$((submitted + BATCH))
			continue
		fi
		sleep 1
	done
	now=$(date +%s%N)
	csum=$(metric '^coopgrid_commit_seconds_sum'); ccnt=$(metric '^coopgrid_commit_seconds_count')
	snap=$(newest_snapshot); raftdb=$(du_b "$data/raft/raft.db"); hist=$(du_b "$data/history.db")
	row=$(awk -v d="$done_" -v w="$(( (now - t0) / 1000000 ))" -v rate="$(awk -v a="$((done_ - dprev))" -v b="$(( (now - tprev) / 1000000 ))" 'BEGIN{printf "%.0f", a*1000/b}')" \
		-v rss="$(rss_kb)" -v snap="$snap" -v raft="$raftdb" -v hist="$hist" \
		-v cs="$csum" -v csp="$csum_prev" -v cc="$ccnt" -v ccp="$ccnt_prev" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
		'BEGIN{cm = (cc > ccp) ? (cs - csp) / (cc - ccp) * 1000 : 0; printf "%d\t%.0f\t%s\t%.0f\t%d\t%d\t%d\t%.2f\t%s", d, w/1000, rate, rss/1024, snap, raft, hist, cm, load}')
	cpu=$(cpu_ticks)
	row="$row	$(rss_split)	$(awk -v c="$((cpu - cpu_prev))" -v hz="$hz" -v n="$((done_ - dprev))" 'BEGIN{printf "%.3f", (n > 0) ? c * 1000 / hz / n : 0}')"
	cpu_prev=$cpu
	echo "$row" >> "$OUT/results.tsv"
	log "$row"
	tprev=$now; dprev=$done_; csum_prev=$csum; ccnt_prev=$ccnt
done

restart() { # restart NAME LABEL: starts the peer again, times it
	local t r s
	t=$(date +%s%N)
	start_peer "$OUT/$1"
	read -r r s < <(wait_ready "$t" "$OUT/$1")
	printf '%s_ready_s\t%s\n%s_status_s\t%s\n%s_rss_mb\t%s\n' "$2" "$r" "$2" "$s" "$2" "$(( $(rss_kb) / 1024 ))" >> "$OUT/results.tsv"
	log "$2: ready in ${r}s, status in ${s}s"
}
# First a stop that is not clean, at the end of the load (SIGKILL: no
# snapshot at stop; the restart replays what was applied since the last
# snapshot, which the snapshot pacer bounds), then a clean one (SIGTERM:
# the peer snapshots before it stops, the restart replays almost nothing).
log "restart after SIGKILL"
kill -KILL "$PEER_PID" 2>/dev/null || true
wait "$PEER_PID" 2>/dev/null || true
PEER_PID=""
if [ -n "${CRASH_COPY:-}" ]; then
	rm -rf "$CRASH_COPY" && cp -a "$data" "$CRASH_COPY"
	log "crashed data directory copied to $CRASH_COPY"
fi
restart peer2 crash_restart
log "restart after SIGTERM"
stop_peer
restart peer3 restart
stop_peer
t=$(date +%s%N)
if "$BIN" verify --data "$data" >"$OUT/verify.log" 2>&1; then v=ok; else v="failed rc=$?"; fi
printf 'verify_s\t%s\t%s\n' "$(awk -v n="$(($(date +%s%N) - t))" 'BEGIN{printf "%.1f", n/1e9}')" "$v" >> "$OUT/results.tsv"
log "verify: $(tail -1 "$OUT/results.tsv")"
cat "$OUT/results.tsv"
