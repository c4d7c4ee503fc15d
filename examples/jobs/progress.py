"""Report a task's progress to the coopgrid peer that runs it.

docs/JOBS.md, "Progress reports". Ship this file as an input and call
report() as the work advances:

    import progress
    progress.report(42, 100)   # 42 of 100 steps done
    progress.report(0.42)      # the same, as a fraction

Each call replaces $COOPGRID_PROGRESS atomically (a temporary file, then a
rename), so the peer never reads half a line. Outside coopgrid
($COOPGRID_PROGRESS unset) it does nothing. From a shell:
python3 progress.py DONE TOTAL, or python3 progress.py FRACTION.
"""

import os
import sys


def report(done, total=None):
    """Write done/total (integers, 0 <= done <= total, total > 0), or the
    fraction done (0 <= done <= 1) when total is None."""
    path = os.environ.get("COOPGRID_PROGRESS")
    if not path:
        return
    if total is None:
        done = float(done)
        if not 0 <= done <= 1:
            raise ValueError("progress %r: want a fraction in [0, 1]" % done)
        line = "%.6f\n" % done
    else:
        done, total = int(done), int(total)
        if total <= 0 or not 0 <= done <= total:
            raise ValueError("progress %d/%d: want 0 <= done <= total, total > 0" % (done, total))
        line = "%d/%d\n" % (done, total)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(line)
    os.replace(tmp, path)


if __name__ == "__main__":
    report(*sys.argv[1:3])
