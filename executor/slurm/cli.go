package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cli runs Slurm's client commands (sbatch, squeue, scontrol, scancel,
// sinfo, sacct). They read the cluster's slurm.conf (or SLURM_CONF from
// the peer's environment) and authenticate with munge as the user they
// run as.
type cli struct {
	binDir  string
	timeout time.Duration
}

// errSlurm is a client command that ran and failed.
type errSlurm struct {
	cmd    string
	code   int
	stderr string
}

func (e *errSlurm) Error() string {
	return fmt.Sprintf("%s: exit status %d: %s", e.cmd, e.code, strings.TrimSpace(e.stderr))
}

// run runs name with args as cred's user (nil: the peer's), stdin
// optional, and returns its standard output.
func (c cli) run(ctx context.Context, cred *syscall.Credential, stdin []byte, name string, args ...string) (string, error) {
	path := name
	if c.binDir != "" {
		path = filepath.Join(c.binDir, name)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Dir = "/"
	if name == "sbatch" {
		// The job's submission environment: sbatch passes it on and
		// slurmctld keeps it with the job. The task never sees it (its
		// script starts with env -i), but the peer's own variables have no
		// business there. (--export=NONE would do, but then a job that
		// traps SIGTERM stays RUNNING after it exits, in Slurm 22.05.)
		cmd.Env = submitEnv(os.Environ())
	}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			return out.String(), &errSlurm{cmd: name, code: ee.ExitCode(), stderr: clip(errb.String(), 500)}
		}
		return out.String(), fmt.Errorf("%s: %w", name, err)
	}
	return out.String(), nil
}

// submitEnv keeps what sbatch itself needs: PATH and Slurm's own
// variables (SLURM_CONF...).
func submitEnv(env []string) []string {
	out := []string{"LANG=C"}
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "SLURM_") {
			out = append(out, kv)
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// jobState is what squeue says of one job.
type jobState struct {
	id     string
	state  string // PENDING, RUNNING, COMPLETED, CANCELLED, NODE_FAIL, ...
	reason string
}

// squeue lists the states of the given jobs that slurmctld still holds
// (finished jobs stay MinJobAge, 300 s by default). A job it no longer
// knows is absent from the map.
func (c cli) squeue(ctx context.Context, ids []string) (map[string]jobState, error) {
	out := map[string]jobState{}
	if len(ids) == 0 {
		return out, nil
	}
	stdout, err := c.run(ctx, nil, nil, "squeue", "-h", "-t", "all", "-o", "%i|%T|%r", "--jobs="+strings.Join(ids, ","))
	if err != nil {
		// Every job unknown: squeue fails instead of printing nothing.
		var se *errSlurm
		if errors.As(err, &se) && strings.Contains(se.stderr, "Invalid job id") {
			return out, nil
		}
		return nil, err
	}
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			continue
		}
		out[f[0]] = jobState{id: f[0], state: f[1], reason: f[2]}
	}
	return out, nil
}

// jobInfo is a finished (or running) job as scontrol shows it.
type jobInfo struct {
	state      string
	reason     string
	exitCode   int // -1 when killed by a signal
	signal     int
	start, end time.Time
}

// showJob reads `scontrol show job -o ID`.
func (c cli) showJob(ctx context.Context, id string) (jobInfo, error) {
	out, err := c.run(ctx, nil, nil, "scontrol", "show", "job", "-o", id)
	if err != nil {
		return jobInfo{}, err
	}
	return parseShowJob(out)
}

// parseShowJob reads the key=value fields of one `scontrol show job -o`
// line.
func parseShowJob(line string) (jobInfo, error) {
	kv := fields(line)
	ji := jobInfo{state: kv["JobState"], reason: kv["Reason"], exitCode: -1}
	if ji.state == "" {
		return ji, fmt.Errorf("scontrol show job: no JobState in %q", clip(line, 200))
	}
	if ec, ok := kv["ExitCode"]; ok {
		code, sig, _ := strings.Cut(ec, ":")
		c, err1 := strconv.Atoi(code)
		s, err2 := strconv.Atoi(sig)
		if err1 == nil && err2 == nil {
			ji.signal = s
			if s == 0 {
				ji.exitCode = c
			}
		}
	}
	ji.start = slurmTime(kv["StartTime"])
	ji.end = slurmTime(kv["EndTime"])
	return ji, nil
}

// fields splits "A=b C=d" into a map. Values of scontrol's one-line form
// hold no spaces except in a few free-text fields (Comment, Reason's
// text), of which only the first word is kept.
func fields(line string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if ok {
			if _, dup := kv[k]; !dup {
				kv[k] = v
			}
		}
	}
	return kv
}

// slurmTime parses Slurm's local "2006-01-02T15:04:05"; zero for
// "Unknown", "None" or anything else.
func slurmTime(s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.Local)
	if err != nil {
		return time.Time{}
	}
	return t
}

// consumedEnergy asks sacct for a job's ConsumedEnergyRaw (joules) when
// the cluster accounts for energy. ok is false when it cannot say
// (accounting disabled, no energy plugin, the field empty or 0).
func (c cli) consumedEnergy(ctx context.Context, id string) (joules int64, ok bool, noAccounting bool) {
	out, err := c.run(ctx, nil, nil, "sacct", "-n", "-P", "-X", "-j", id, "-o", "ConsumedEnergyRaw")
	if err != nil {
		// "Slurm accounting storage is disabled": no job will have it.
		var se *errSlurm
		return 0, false, errors.As(err, &se) && strings.Contains(se.stderr, "accounting storage is disabled")
	}
	j, ok := parseEnergy(out)
	return j, ok, false
}

func parseEnergy(out string) (int64, bool) {
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		j, err := strconv.ParseInt(line, 10, 64)
		if err != nil || j <= 0 {
			return 0, false
		}
		return j, true
	}
	return 0, false
}
