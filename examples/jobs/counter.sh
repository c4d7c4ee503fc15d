#!/bin/sh
# counter.sh TARGET: counts from 0 to TARGET, one step every $STEP_SECONDS
# (default 1), saving the counter to $CHECKPOINT_DIR/counter after every
# step and resuming from it at start. Writes the final count to result.txt.
#
# A stop (SIGTERM) loses at most the step in progress: the counter on disk
# is replaced atomically (write a temporary file, then rename it), so a
# stop never leaves a half-written checkpoint behind.
set -eu

target=${1:?usage: counter.sh TARGET}
step=${STEP_SECONDS:-1}
dir=${CHECKPOINT_DIR:?CHECKPOINT_DIR is not set: run this as a checkpointable task}

case $target in
'' | *[!0-9]*) echo "counter.sh: target must be a whole number, got '$target'" >&2; exit 2 ;;
esac

i=0
if [ -s "$dir/counter" ]; then
	i=$(cat "$dir/counter")
	case $i in
	'' | *[!0-9]*) echo "counter.sh: corrupt checkpoint '$i'" >&2; exit 3 ;;
	esac
	echo "counter.sh: resuming from $i" >&2
fi

trap 'echo "counter.sh: stopped at $i" >&2; exit 143' TERM INT

while [ "$i" -lt "$target" ]; do
	sleep "$step" # one step of work
	i=$((i + 1))
	printf '%s\n' "$i" >"$dir/counter.tmp"
	mv -f "$dir/counter.tmp" "$dir/counter"
done

echo "$i" >result.txt
echo "counter.sh: done at $i" >&2
