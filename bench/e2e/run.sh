#!/usr/bin/env bash
# make bench-e2e (issue 9): end-to-end throughput of coopgrid and of Slurm,
# side by side, on this machine, with the same work: N tasks that each run
# `true`, timed from the first submission until every task is done; and in
# every repeat the host's own rate of running the same N `true` processes
# 64 at a time (issue 22), which the table gives coopgrid as a fraction of.
#
#   SIZES="1000 10000"   task counts, in order
#   REPEATS=3            measurements of each system and size (0 with
#                        PROFILE=1: only the profiles)
#   SLURM_MODES="wrap array"   one `sbatch --wrap true` per job; job arrays
#   VARIANTS="A B"       coopgrid A: 1 org × 64 machines on 1 peer;
#                        B: 4 orgs × 16 machines on 4 peers
#   PROFILE=1            after the timed runs, one profiled coopgrid run per
#                        size and variant (perf, Raft-log timeline)
#   SET="key=value …"    config.yaml keys for every coopgrid peer
#   OUT=bench-e2e.out    results.tsv, table.md, profiles, machine.txt
#   KEEP=1               keep the run directories (/tmp/coopgrid-bench-e2e-*)
#
# Each measurement gets a fresh system: a new private Slurm (slurm.sh) or a
# new federation of real `peer run` processes (internal/benche2e). The
# systems alternate within each repeat and the one that goes first swaps
# from one repeat to the next. The directories of finished runs are only
# deleted at the end: on ext4 without a journal, inodes deleted in the last
# minutes make the next allocations slow (ext4's recently_deleted), which
# would charge one run for the previous one's clean-up.
#
# Every process started here is a child, ended by pid on exit, even on
# failure or Ctrl-C: the Slurm daemons (slurm.sh's slurm_stop), the Go
# driver (SIGTERM; it stops its peers, which also die with it: PDEATHSIG).

set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"

SIZES="${SIZES:-1000 10000}"
REPEATS="${REPEATS:-3}"
SLURM_MODES="${SLURM_MODES-wrap array}"
VARIANTS="${VARIANTS-A B}"
PROFILE="${PROFILE:-}"
SET="${SET:-}"
OUT="${OUT:-bench-e2e.out}"
GO="${GO:-go}"
POLL="${POLL:-0.2}"
export SLURM_POLL="$POLL"

# shellcheck source=bench/e2e/slurm.sh
source "$repo/bench/e2e/slurm.sh"

log() { printf '[bench-e2e %s] %s\n' "$(date +%T)" "$*" >&2; }

base="$(mktemp -d "${TMPDIR:-/tmp}/coopgrid-bench-e2e-XXXXXX")"
DRIVER_PID=""
RUN_SEQ=0
cleanup() {
	local rc=$?
	if [ -n "$DRIVER_PID" ] && kill -0 "$DRIVER_PID" 2>/dev/null; then
		log "stopping the coopgrid driver (pid $DRIVER_PID)"
		kill -TERM "$DRIVER_PID" 2>/dev/null || true
		for _ in $(seq 300); do
			kill -0 "$DRIVER_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$DRIVER_PID" 2>/dev/null || true
		wait "$DRIVER_PID" 2>/dev/null || true
	fi
	slurm_stop
	if [ -n "${KEEP:-}" ]; then
		log "kept $base"
	else
		rm -rf "$base"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$OUT"
slurm_install
command -v perf >/dev/null 2>&1 || [ -z "$PROFILE" ] || {
	log "PROFILE needs perf: apt-get install -y --no-install-recommends linux-perf"
	exit 2
}

# The peer binary and the driver are built once into the run directory, so
# that a concurrent `make build` cannot swap the binary mid-run.
log "building ./cmd/peer and ./internal/benche2e"
"$GO" build -o "$base/peer" ./cmd/peer
"$GO" build -o "$base/benche2e" ./internal/benche2e

{
	echo "date: $(date -u +%FT%TZ)"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- cmd node ledger consensus executor policy p2p api checkpoint 2>/dev/null || echo ' (with uncommitted changes in the daemon packages)')"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "kernel: $(uname -r)"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "go: $("$GO" env GOVERSION)"
	echo "slurm: $(slurmctld -V) ($(munged -V 2>&1 | head -1 | awk '{print $1}'))"
	echo "sizes: $SIZES; repeats: $REPEATS; slurm modes: $SLURM_MODES; coopgrid variants: $VARIANTS; poll: ${POLL}s; set: ${SET:-none}"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2

results="$OUT/results.tsv"
printf 'system\ttasks\trepeat\telapsed_s\tsubmit_s\tresolution_s\tload1\n' >"$results"

load1() { cut -d' ' -f1 /proc/loadavg; }

set_flags=()
for kv in $SET; do set_flags+=(--set "$kv"); done

# run_slurm MODE N REPEAT
run_slurm() {
	local mode="$1" n="$2" r="$3" load out
	load="$(load1)"
	log "Slurm $mode, $n jobs, repeat $r (load $load)"
	out="$base/slurm-$mode-$n-$r.out"
	slurm_once "$mode" "$n" "$base" >"$out"
	# RESULT mode n elapsed submit resolution
	awk -v r="$r" -v l="$load" '$1 == "RESULT" {printf "slurm-%s\t%s\t%s\t%s\t%s\t%s\t%s\n", $2, $3, r, $4, $5, $6, l}' "$out" >>"$results"
	tail -n 1 "$results" | awk -F'\t' '{printf "  %s: %.2f s, %.1f jobs/s\n", $1, $4, $2 / $4}' >&2
}

# run_coopgrid VARIANT N REPEAT [extra driver flags]
run_coopgrid() {
	local v="$1" n="$2" r="$3" load out
	shift 3
	load="$(load1)"
	log "coopgrid $v, $n tasks, repeat $r (load $load)"
	RUN_SEQ=$((RUN_SEQ + 1))
	out="$base/coopgrid-$v-$n-$r-$RUN_SEQ.out"
	"$base/benche2e" run --peer "$base/peer" --variant "$v" --tasks "$n" --poll "${POLL}s" \
		--work "${out%.out}" --keep ${set_flags[@]+"${set_flags[@]}"} "$@" >"$out" 2>"$out.log" &
	DRIVER_PID=$!
	local rc=0
	wait "$DRIVER_PID" || rc=$?
	DRIVER_PID=""
	if [ "$rc" != 0 ]; then
		log "coopgrid $v failed (exit $rc):"
		tail -n 30 "$out.log" >&2
		return "$rc"
	fi
	# RESULT name n elapsed submit resolution ledger_elapsed
	awk -v r="$r" -v l="$load" '$1 == "RESULT" {printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", $2, $3, r, $4, $5, $6, l}' "$out" >>"$results"
	tail -n 1 "$results" | awk -F'\t' '{printf "  %s: %.2f s, %.1f tasks/s\n", $1, $4, $2 / $4}' >&2
}

# run_host N REPEAT: the host's own rate of running the same N `true`
# processes, 64 at a time (internal/benche2e/host.go): the limit coopgrid
# is measured against.
run_host() {
	local n="$1" r="$2" load out
	load="$(load1)"
	log "this host alone, $n processes, repeat $r (load $load)"
	out="$base/host-$n-$r.out"
	"$base/benche2e" host --tasks "$n" >"$out"
	awk -v r="$r" -v l="$load" '$1 == "RESULT" {printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", $2, $3, r, $4, $5, $6, l}' "$out" >>"$results"
	tail -n 1 "$results" | awk -F'\t' '{printf "  %s: %.2f s, %.1f processes/s\n", $1, $4, $2 / $4}' >&2
}

read -r -a modes <<<"$SLURM_MODES"
read -r -a variants <<<"$VARIANTS"
pairs=$((${#modes[@]} > ${#variants[@]} ? ${#modes[@]} : ${#variants[@]}))
for n in $SIZES; do
	for r in $(seq "$REPEATS"); do
		run_host "$n" "$r"
		for ((i = 0; i < pairs; i++)); do
			first=slurm
			[ $(((r + i) % 2)) = 0 ] && first=coopgrid
			for sys in "$first" $([ "$first" = slurm ] && echo coopgrid || echo slurm); do
				if [ "$sys" = slurm ] && [ "$i" -lt "${#modes[@]}" ]; then
					run_slurm "${modes[$i]}" "$n" "$r"
				elif [ "$sys" = coopgrid ] && [ "$i" -lt "${#variants[@]}" ]; then
					run_coopgrid "${variants[$i]}" "$n" "$r"
				fi
			done
		done
	done
done

if [ "$REPEATS" -gt 0 ]; then
	"$base/benche2e" table "$results" >"$OUT/table.md"
	echo
	cat "$OUT/machine.txt"
	echo
	cat "$OUT/table.md"
fi

if [ -n "$PROFILE" ]; then
	# The profiled runs are not part of the table (perf and info logs cost
	# time): their lines go to profiles.tsv.
	results="$OUT/profiles.tsv"
	printf 'system\ttasks\trepeat\telapsed_s\tsubmit_s\tresolution_s\tload1\n' >"$results"
	for n in $SIZES; do
		for v in "${variants[@]}"; do
			log "profiling coopgrid $v with $n tasks"
			run_coopgrid "$v" "$n" 1 --profile "$OUT/profile-$v-$n"
		done
	done
	log "profiles in $OUT/profile-*/profile.md"
fi
log "results in $OUT/results.tsv and $OUT/table.md"
