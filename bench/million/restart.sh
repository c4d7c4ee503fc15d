#!/usr/bin/env bash
# bash bench/million/restart.sh CRASHED_DIR (issue 17, docs/BENCHMARKS.md):
# trials of a restart after a crash without rebuilding the data directory
# each time. CRASHED_DIR is a peer's data directory copied just after a
# SIGKILL (bench/million/run.sh's CRASH_COPY). Each trial copies it afresh,
# starts `peer run` on the copy (timed to its first /v1/status answer and to
# its `ready:` line: the crash restart, which replays what was applied since
# the last snapshot), stops it with SIGTERM (a clean stop, which snapshots),
# starts it again (timed the same way: the clean restart) and stops it.
#
#   TRIALS=3 BIN=bin/peer OUT=bench-restart.out (results.tsv, logs)
#   PERF=1: record the crash restart's CPU with perf (perf-N.data in OUT)
#   LOG_LEVEL=info: the peer's log level (its stderr is kept in OUT; info
#   logs the start-up's steps and the replay, timed)
# Columns: seconds to ready: and to /v1/status, the peer's CPU seconds at
# ready: (the measure that a loaded machine does not blur), its RSS a
# second later, and the 1-minute load when it started.
#
# Everything started here is a child ended by pid on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
src="${1:?usage: restart.sh CRASHED_DATA_DIR}"
TRIALS="${TRIALS:-3}"
BIN="${BIN:-$repo/bin/peer}"
OUT="${OUT:-bench-restart.out}"
LOG_LEVEL="${LOG_LEVEL:-warn}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/coopgrid-bench-restart-XXXXXX")"
PEER_PID=""
stop_peer() { # SIGTERM, then SIGKILL after 60 s
	if [ -n "$PEER_PID" ] && kill -0 "$PEER_PID" 2>/dev/null; then
		kill -TERM "$PEER_PID" 2>/dev/null || true
		for _ in $(seq 600); do kill -0 "$PEER_PID" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$PEER_PID" 2>/dev/null || true
		wait "$PEER_PID" 2>/dev/null || true
	fi
	PEER_PID=""
}
cleanup() { local rc=$?; stop_peer; rm -rf "$work"; exit $rc; }
trap cleanup EXIT INT TERM
log() { printf '[bench-restart %s] %s\n' "$(date +%T)" "$*" >&2; }

data="$work/data"
api=$(awk '/^api:/ {print $2}' "$src/config.yaml" | tr -d '"')
call() { curl -sS --max-time 10 -H "Authorization: Bearer $(cat "$data/api.token")" "$@"; }
start_peer() { # start_peer LOGPREFIX [perf data file]
	UNDER_PERF="${2:-}"
	if [ -n "${2:-}" ]; then
		perf record -F 499 -g -o "$2" -- "$BIN" run --data "$data" --log-level "$LOG_LEVEL" >"$1.out" 2>"$1.err" &
	else
		"$BIN" run --data "$data" --log-level "$LOG_LEVEL" >"$1.out" 2>"$1.err" &
	fi
	PEER_PID=$!
}
UNDER_PERF=""
peer_pid() { # the peer's own pid (under perf, perf's child)
	local c=""
	if [ -n "$UNDER_PERF" ]; then c=$(pgrep -P "$PEER_PID" 2>/dev/null | head -1 || true); fi
	echo "${c:-$PEER_PID}"
}
wait_ready() { # T0 LOGPREFIX: prints seconds to ready: and to /v1/status
	local t0=$1 tr="" ts=""
	for _ in $(seq 2400); do
		if [ -z "$tr" ] && grep -q '^ready: ' "$2.out" 2>/dev/null; then tr=$(($(date +%s%N) - t0)); fi
		if [ -z "$ts" ] && call -o /dev/null -f "http://$api/v1/status" 2>/dev/null; then ts=$(($(date +%s%N) - t0)); fi
		[ -n "$tr" ] && [ -n "$ts" ] && break
		sleep 0.05
	done
	awk -v r="$tr" -v s="$ts" 'BEGIN{printf "%.2f %.2f\n", r/1e9, s/1e9}'
}
cpu_s() { # the peer's CPU time so far (user + system), in seconds
	awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$(peer_pid)/stat"
}
rss_split() { # total, anonymous and file-backed RSS in MiB
	awk '/^VmRSS/ {t = $2} /^RssAnon/ {a = $2} /^RssFile/ {f = $2} END {printf "%.0f\t%.0f\t%.0f", t/1024, a/1024, f/1024}' "/proc/$(peer_pid)/status"
}

printf 'trial\tkind\tready_s\tstatus_s\tcpu_s\trss_mb\trss_anon_mb\trss_file_mb\tload\n' > "$OUT/results.tsv"
for i in $(seq "$TRIALS"); do
	rm -rf "$data" && cp -a "$src" "$data"
	sync
	for kind in crash clean; do
		perf=""
		if [ -n "${PERF:-}" ] && [ "$kind" = crash ]; then perf="$OUT/perf-$i.data"; fi
		load=$(cut -d' ' -f1 /proc/loadavg)
		t=$(date +%s%N)
		start_peer "$OUT/$kind-$i" "$perf"
		read -r r s < <(wait_ready "$t" "$OUT/$kind-$i")
		c=$(cpu_s)
		sleep 1 # the RSS once ready, after the replay's garbage is collected or not
		row="$i	$kind	$r	$s	$c	$(rss_split)	$load"
		echo "$row" >> "$OUT/results.tsv"
		log "$row"
		stop_peer
	done
done
cat "$OUT/results.tsv"
