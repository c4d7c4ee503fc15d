#!/usr/bin/env bash
# make bench-idle (issue 17): the idle CPU of a federation of N real peer
# processes on this host, its formation time and a fail-over. See
# internal/benchidle and docs/BENCHMARKS.md.
#
#   N=10 WINDOW=30s PERF=1 KEEP=1 ARGS="--set heartbeat.interval=5s" make bench-idle
#
# The driver starts every peer as its child (they die with it: PDEATHSIG)
# and stops them by pid on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO="${GO:-go}"
N="${N:-10}"
WINDOW="${WINDOW:-30s}"
extra=()
[ -n "${PERF:-}" ] && extra+=(--perf)
[ -n "${KEEP:-}" ] && extra+=(--keep)
[ -x bin/peer ] || "$GO" build -o bin/peer ./cmd/peer
bin="$(mktemp -d "${TMPDIR:-/tmp}/coopgrid-benchidle-bin-XXXXXX")"
trap 'rm -rf "$bin"' EXIT
"$GO" build -o "$bin/benchidle" ./internal/benchidle
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
"$bin/benchidle" --peer bin/peer --n "$N" --window "$WINDOW" "${extra[@]}" ${ARGS:-}
