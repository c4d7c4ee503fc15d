# progress.sh: report a task's progress to the peer that runs it
# (docs/JOBS.md, "Progress reports"). Source it, then call
# coopgrid_progress with done and total, or with a fraction:
#
#   . ./progress.sh
#   coopgrid_progress 42 100     # 42 of 100 steps done
#   coopgrid_progress 0.42       # the same
#
# Each call replaces $COOPGRID_PROGRESS atomically (a temporary file, then
# a rename), so the peer never reads half a line and the file stays one
# line long. Outside coopgrid ($COOPGRID_PROGRESS unset) it does nothing.
coopgrid_progress() {
	[ -n "${COOPGRID_PROGRESS:-}" ] || return 0
	if [ "$#" -ge 2 ]; then
		printf '%s/%s\n' "$1" "$2" >"$COOPGRID_PROGRESS.tmp"
	else
		printf '%s\n' "$1" >"$COOPGRID_PROGRESS.tmp"
	fi
	mv -f "$COOPGRID_PROGRESS.tmp" "$COOPGRID_PROGRESS"
}
