#!/usr/bin/env bash
# A private single-host Slurm for `make bench-e2e` (issue 9).
#
# Sourced by bench/e2e/run.sh for its functions, or run by itself:
#
#   bench/e2e/slurm.sh wrap 1000     # start a private Slurm, time 1,000 `sbatch --wrap true`, stop it
#   bench/e2e/slurm.sh array 1000    # the same with `sbatch --array=0-999 --wrap true`
#
# Everything lives in one temporary directory: a munge key generated for the
# run, munged's socket, pid, log and seed files, slurm.conf, the state and
# spool directories, the logs and the jobs' output files. munged, slurmctld
# and slurmd are children of this shell (-F / -D: they do not daemonise),
# started with a marker in their environment (COOPGRID_BENCH_SLURM=<dir>,
# which slurmstepd inherits from slurmd), and are ended by pid. Nothing touches /etc/slurm, /etc/munge or a system
# Slurm: every client command reads SLURM_CONF, which points at the private
# configuration, and the configuration uses its own free ports.
#
# Each measurement prints one line "RESULT <mode> <n> <elapsed_s> <submit_s>
# <resolution_s>": elapsed from just before the first sbatch until squeue
# lists none of the jobs (polled every SLURM_POLL seconds, the resolution),
# submit is the time the sbatch loop took.

set -euo pipefail

SLURM_POLL="${SLURM_POLL:-0.2}"
SLURM_CPUS="${SLURM_CPUS:-64}"
# Slurm's default MaxArraySize is 1001: larger arrays are submitted in
# chunks of at most this many tasks, so that the configuration keeps its
# default.
SLURM_ARRAY_CHUNK="${SLURM_ARRAY_CHUNK:-1000}"

slurm_log() { printf '[slurm %s] %s\n' "$(date +%T)" "$*" >&2; }

# slurm_install installs Debian's slurm-wlm and munge if a daemon or client
# is missing. Package scripts must not start the system's services: the
# container's policy-rc.d refuses that, and without a runlevel invoke-rc.d
# does nothing either.
slurm_install() {
	local missing=0 c
	for c in munged mungekey slurmctld slurmd sbatch squeue sinfo scontrol; do
		command -v "$c" >/dev/null 2>&1 || missing=1
	done
	[ "$missing" = 0 ] && return 0
	slurm_log "installing slurm-wlm and munge with apt-get"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >&2; then
		DEBIAN_FRONTEND=noninteractive apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >&2
	fi
}

# free_port prints a TCP port nothing listens on, below the kernel's
# ephemeral range so that no outgoing connection takes it before the
# daemon binds it.
free_port() {
	local p lo
	lo="$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)"
	for _ in $(seq 200); do
		p=$((15000 + RANDOM % (lo - 15000)))
		if [ -z "$(ss -Htln "sport = :$p")" ]; then
			echo "$p"
			return 0
		fi
	done
	echo "no free port" >&2
	return 1
}

# The pids of the daemons this shell started (empty when none runs).
SLURM_DIR=""
MUNGED_PID=""
SLURMCTLD_PID=""
SLURMD_PID=""

# slurm_start DIR starts munged, slurmctld and slurmd under DIR and waits
# until sinfo shows the node idle. It exports SLURM_CONF.
slurm_start() {
	local dir="$1"
	SLURM_DIR="$dir"
	mkdir -p "$dir"/{munge,state,spool,log,jobs}
	chmod 0700 "$dir/munge"

	mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
	chmod 0600 "$dir/munge/munge.key"
	COOPGRID_BENCH_SLURM="$dir" munged --foreground --force \
		--socket="$dir/munge/munge.socket" \
		--key-file="$dir/munge/munge.key" \
		--pid-file="$dir/munge/munged.pid" \
		--log-file="$dir/log/munged.log" \
		--seed-file="$dir/munge/munged.seed" \
		>"$dir/log/munged.out" 2>&1 &
	MUNGED_PID=$!
	local i
	for i in $(seq 100); do
		[ -S "$dir/munge/munge.socket" ] && break
		kill -0 "$MUNGED_PID" 2>/dev/null || { cat "$dir/log/munged.out" "$dir/log/munged.log" >&2 || true; return 1; }
		sleep 0.1
	done
	[ -S "$dir/munge/munge.socket" ] || { slurm_log "munged did not create its socket"; return 1; }

	local host ctldport slurmdport
	host="$(hostname -s)"
	ctldport="$(free_port)"
	slurmdport="$(free_port)"
	while [ "$slurmdport" = "$ctldport" ]; do slurmdport="$(free_port)"; done

	# Default scheduler settings (sched/backfill, the default
	# SchedulerParameters, MinJobAge, MaxArraySize). What is set: where
	# things live, the private munge socket and ports, the one node of 64
	# CPUs (config_overrides: the host has fewer), the plugins a container
	# allows (no cgroup: process tracking by /proc, no task binding), and
	# MaxJobCount: its default of 10,000 job records, with finished jobs
	# kept MinJobAge (300 s), makes the last sbatch of a 10,000-job run
	# sleep and retry until records expire, which would time the expiry,
	# not the scheduler. jobcomp/filetxt logs each finished job (state and
	# exit code): finished jobs leave slurmctld's memory after MinJobAge,
	# before a 10,000-job run ends, so the check reads this file.
	cat >"$dir/slurm.conf" <<EOF
ClusterName=coopgridbench
MaxJobCount=100000
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${ctldport}
SlurmdPort=${slurmdport}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=${dir}/munge/munge.socket
CredType=cred/munge
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/spool
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/slurmd.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=${dir}/log/jobcomp.txt
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${SLURM_CPUS} State=UNKNOWN
PartitionName=bench Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF
	export SLURM_CONF="$dir/slurm.conf"

	COOPGRID_BENCH_SLURM="$dir" slurmctld -D -c -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
	SLURMCTLD_PID=$!
	COOPGRID_BENCH_SLURM="$dir" slurmd -D -f "$SLURM_CONF" -N "$host" >"$dir/log/slurmd.out" 2>&1 &
	SLURMD_PID=$!

	local state=""
	for i in $(seq 300); do
		state="$(sinfo -h -N -o '%t' 2>/dev/null || true)"
		[ "$state" = "idle" ] && break
		if ! kill -0 "$SLURMCTLD_PID" 2>/dev/null || ! kill -0 "$SLURMD_PID" 2>/dev/null; then
			slurm_log "a Slurm daemon exited during start-up"
			tail -n 30 "$dir/log/slurmctld.out" "$dir/log/slurmctld.log" "$dir/log/slurmd.out" "$dir/log/slurmd.log" >&2 || true
			return 1
		fi
		sleep 0.2
	done
	if [ "$state" != "idle" ]; then
		slurm_log "node not idle after 60 s (state '$state')"
		tail -n 30 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
		return 1
	fi
	slurm_log "private Slurm up in $dir (slurmctld $SLURMCTLD_PID, slurmd $SLURMD_PID, munged $MUNGED_PID; node $(sinfo -h -N -o '%N %c CPUs %t'))"
}

# stop_pid PID ends one process this shell started: SIGTERM, then SIGKILL
# after 10 s.
stop_pid() {
	local pid="$1"
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# marked_pids DIR lists the processes of this private Slurm, and only
# those: the daemons carry COOPGRID_BENCH_SLURM=DIR in their environment;
# slurmstepd, which slurmd starts with a cleaned environment, carries
# SLURM_CONF=DIR/slurm.conf.
marked_pids() {
	local f pid
	for f in /proc/[0-9]*/environ; do
		pid="${f#/proc/}"
		pid="${pid%/environ}"
		[ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
		if grep -qzxF -e "COOPGRID_BENCH_SLURM=$1" -e "SLURM_CONF=$1/slurm.conf" "$f" 2>/dev/null; then
			echo "$pid"
		fi
	done
}

# stepd_pids DIR lists this Slurm's slurmstepd processes.
stepd_pids() {
	local pid
	for pid in $(marked_pids "$1"); do
		[ "$(cat /proc/"$pid"/comm 2>/dev/null)" = slurmstepd ] && echo "$pid"
	done
	return 0
}

# slurm_stop ends slurmd, slurmctld and munged by pid, then anything left
# that carries this run's marker (a slurmstepd of an interrupted run).
slurm_stop() {
	local pid
	if [ -n "$MEASURE_PID" ]; then
		# The measuring subshell and its current sbatch, squeue or sleep.
		for pid in $(ps -o pid= --ppid "$MEASURE_PID" 2>/dev/null); do
			kill -TERM "$pid" 2>/dev/null || true
		done
		kill -TERM "$MEASURE_PID" 2>/dev/null || true
		wait "$MEASURE_PID" 2>/dev/null || true
		MEASURE_PID=""
	fi
	[ -n "$SLURM_DIR" ] || return 0
	# Job steps still tearing down after squeue emptied end by themselves
	# within moments while slurmd is there to hear from them. (Ended
	# slurmstepd processes may then stay zombies for a few seconds: they
	# are children of pid 1, which reaps them.)
	for _ in $(seq 50); do
		[ -z "$(stepd_pids "$SLURM_DIR")" ] && break
		sleep 0.1
	done
	stop_pid "$SLURMD_PID"
	stop_pid "$SLURMCTLD_PID"
	stop_pid "$MUNGED_PID"
	SLURMD_PID="" SLURMCTLD_PID="" MUNGED_PID=""
	for pid in $(marked_pids "$SLURM_DIR"); do
		# Not this shell's own children (a command substitution, say):
		# they carry SLURM_CONF too.
		[ "$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')" = "$$" ] && continue
		slurm_log "ending leftover process $pid ($(cat /proc/"$pid"/comm 2>/dev/null))"
		kill -KILL "$pid" 2>/dev/null || true
	done
	unset SLURM_CONF
	SLURM_DIR=""
}

now() { date +%s.%N; }

# slurm_wait_empty polls squeue until it lists no job; prints the time.
slurm_wait_empty() {
	local deadline="$1"
	while :; do
		if [ -z "$(squeue -h -o '%i' 2>/dev/null || echo busy)" ]; then
			now
			return 0
		fi
		if [ "$(date +%s)" -gt "$deadline" ]; then
			slurm_log "jobs still queued at the deadline: $(squeue -h -o '%T' | sort | uniq -c | tr '\n' ' ')"
			return 1
		fi
		sleep "$SLURM_POLL"
	done
}

# slurm_check N checks that N jobs completed with exit code 0, from the
# job completion log.
slurm_check() {
	local n="$1" completed
	completed="$(grep -c 'JobState=COMPLETED .*ExitCode=0:0' "$SLURM_DIR/log/jobcomp.txt" 2>/dev/null || true)"
	if [ "$completed" != "$n" ]; then
		slurm_log "expected $n jobs COMPLETED with exit code 0 in the completion log, found $completed:"
		grep -o 'JobState=[A-Z_]*' "$SLURM_DIR/log/jobcomp.txt" | sort | uniq -c >&2 || true
		return 1
	fi
}

# slurm_measure MODE N submits N trivial jobs (MODE wrap: one sbatch --wrap
# true per job in a tight loop; MODE array: sbatch --array) to the running
# private Slurm and prints the RESULT line.
slurm_measure() {
	local mode="$1" n="$2" t0 t1 t2 i lo hi
	local deadline=$(($(date +%s) + 3600))
	cd "$SLURM_DIR/jobs"
	t0="$(now)"
	case "$mode" in
	wrap)
		for ((i = 0; i < n; i++)); do
			sbatch -Q --wrap true >/dev/null
		done
		;;
	array)
		for ((lo = 0; lo < n; lo += SLURM_ARRAY_CHUNK)); do
			hi=$((lo + SLURM_ARRAY_CHUNK - 1))
			[ "$hi" -ge "$n" ] && hi=$((n - 1))
			sbatch -Q --array="0-$((hi - lo))" --wrap true >/dev/null
		done
		;;
	*)
		echo "mode $mode: want wrap or array" >&2
		return 2
		;;
	esac
	t1="$(now)"
	t2="$(slurm_wait_empty "$deadline")"
	cd - >/dev/null
	slurm_check "$n"
	awk -v m="$mode" -v n="$n" -v a="$t0" -v b="$t1" -v c="$t2" -v r="$SLURM_POLL" \
		'BEGIN { printf "RESULT %s %d %.3f %.3f %s\n", m, n, c - a, b - a, r }'
}

# slurm_once MODE N BASEDIR: a fresh private Slurm for one measurement.
# A start that fails (a port taken between the check and the bind, say) is
# tried again in a new directory, up to three times.
# The measurement runs in a background subshell that this shell waits for:
# a signal interrupts `wait` at once, whereas a foreground sbatch (which
# may sleep and retry) would hold the EXIT trap back until it returns.
MEASURE_PID=""
slurm_once() {
	local mode="$1" n="$2" base="$3" dir rc=1 try
	for try in 1 2 3; do
		dir="$(mktemp -d "$base/slurm-XXXXXX")"
		rc=0
		slurm_start "$dir" || rc=$?
		[ "$rc" = 0 ] && break
		slurm_log "start $try failed; stopping what started"
		slurm_stop
	done
	if [ "$rc" = 0 ]; then
		slurm_measure "$mode" "$n" &
		MEASURE_PID=$!
		wait "$MEASURE_PID" || rc=$?
		MEASURE_PID=""
	fi
	slurm_stop
	return "$rc"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	mode="${1:?usage: slurm.sh wrap|array N}"
	n="${2:?usage: slurm.sh wrap|array N}"
	slurm_install
	base="$(mktemp -d "${TMPDIR:-/tmp}/coopgrid-bench-slurm-XXXXXX")"
	trap 'slurm_stop; [ -n "${KEEP:-}" ] || rm -rf "$base"' EXIT
	trap 'exit 130' INT TERM
	slurm_once "$mode" "$n" "$base"
fi
