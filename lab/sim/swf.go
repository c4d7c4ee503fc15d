package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The Standard Workload Format of the Parallel Workloads Archive (Chapin et
// al. 1999, seed 002's ref. [8]; the CTC, KTH and SDSC logs of its table 4,
// L727-731, are distributed in it): a header of comment lines starting with
// ';' ("; MaxProcs: 128"), then one job per line with 18 whitespace-separated
// numeric fields, -1 where a value is unknown.

// swfFields names the 18 fields, in order (field k is swfFields[k-1]).
var swfFields = [18]string{
	"job number", "submit time", "wait time", "run time", "allocated processors",
	"average CPU time", "used memory", "requested processors", "requested time",
	"requested memory", "status", "user", "group", "executable", "queue",
	"partition", "preceding job", "think time",
}

// SWFJob is one job line; the fields keep the file's values (-1: unknown).
// Average CPU time, used and requested memory may be fractional in some
// logs and are truncated.
type SWFJob struct {
	Line   int
	Fields [18]int64
}

// Field returns field k (1-based, as the format numbers them).
func (j SWFJob) Field(k int) int64 { return j.Fields[k-1] }

// SWFTrace is a parsed file.
type SWFTrace struct {
	Name string
	// Header maps each "; Key: value" comment's key to its value; Comments
	// keeps every header line as written, without the ';'.
	Header   map[string]string
	Comments []string
	Jobs     []SWFJob
}

// ReadSWF parses an SWF file; name labels errors ("name:LINE: field K
// (what): ..."). A malformed line is an error, not a skipped job.
func ReadSWF(r io.Reader, name string) (*SWFTrace, error) {
	t := &SWFTrace{Name: name, Header: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	seen := map[int64]int{}
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if c, ok := strings.CutPrefix(text, ";"); ok {
			c = strings.TrimSpace(c)
			t.Comments = append(t.Comments, c)
			if k, v, ok := strings.Cut(c, ":"); ok && !strings.ContainsAny(strings.TrimSpace(k), " \t") {
				t.Header[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
			continue
		}
		f := strings.Fields(text)
		if len(f) != len(swfFields) {
			return nil, fmt.Errorf("%s:%d: %d fields, want %d", name, line, len(f), len(swfFields))
		}
		j := SWFJob{Line: line}
		for k, s := range f {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil && (k == 5 || k == 6 || k == 9) {
				var fv float64
				if fv, err = strconv.ParseFloat(s, 64); err == nil {
					v = int64(fv)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("%s:%d: field %d (%s): %q: not an integer", name, line, k+1, swfFields[k], s)
			}
			if v < -1 {
				return nil, fmt.Errorf("%s:%d: field %d (%s): %d: want ≥ 0, or -1 for unknown", name, line, k+1, swfFields[k], v)
			}
			j.Fields[k] = v
		}
		if prev, dup := seen[j.Fields[0]]; dup {
			return nil, fmt.Errorf("%s:%d: field 1 (job number): %d: already on line %d", name, line, j.Fields[0], prev)
		}
		seen[j.Fields[0]] = line
		t.Jobs = append(t.Jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(t.Jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", name)
	}
	return t, nil
}

// MaxProcs is the machine size the header states (MaxProcs, else
// MaxNodes), 0 if it states neither.
func (t *SWFTrace) MaxProcs() (int64, error) {
	for _, k := range []string{"MaxProcs", "MaxNodes"} {
		if v, ok := t.Header[k]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("%s: header %s: %q: want a positive integer", t.Name, k, v)
			}
			return n, nil
		}
	}
	return 0, nil
}

// SWFSkipped counts the jobs RigidJobs leaves out, by reason.
type SWFSkipped struct {
	Cancelled int `json:"cancelled"`
	NoRun     int `json:"no_run"`
	NoProcs   int `json:"no_processors"`
	TooWide   int `json:"wider_than_machine"`
}

// Total is the number of jobs left out.
func (s SWFSkipped) Total() int { return s.Cancelled + s.NoRun + s.NoProcs + s.TooWide }

// RigidJobs turns the trace into rigid jobs for a machine of procs
// processors: n is the requested processors (the allocated ones when not
// recorded), tr the requested time (the run time when not recorded: a
// perfect estimate), the run time field 4. As seed 002 does (L735-737),
// cancelled jobs (status 5) are left out unless keepCancelled; so are
// jobs that never ran (run time ≤ 0), that name no processors, or that
// are wider than the machine. IDs are the job numbers.
func (t *SWFTrace) RigidJobs(procs int64, keepCancelled bool) ([]RigidJob, SWFSkipped, error) {
	var out []RigidJob
	var sk SWFSkipped
	for _, j := range t.Jobs {
		n := j.Field(8)
		if n <= 0 {
			n = j.Field(5)
		}
		run, tr := j.Field(4), j.Field(9)
		switch {
		case j.Field(11) == 5 && !keepCancelled:
			sk.Cancelled++
			continue
		case run <= 0:
			sk.NoRun++
			continue
		case n <= 0:
			sk.NoProcs++
			continue
		case n > procs:
			sk.TooWide++
			continue
		}
		if tr <= 0 {
			tr = run
		}
		if j.Field(2) < 0 {
			return nil, sk, fmt.Errorf("%s:%d: field 2 (submit time): unknown (-1): a simulated job needs one", t.Name, j.Line)
		}
		out = append(out, RigidJob{ID: strconv.FormatInt(j.Field(1), 10), SubmitSeconds: j.Field(2), Procs: n, RequestedSeconds: tr, RunSeconds: run})
	}
	if len(out) == 0 {
		return nil, sk, fmt.Errorf("%s: no job left to simulate (%d left out)", t.Name, sk.Total())
	}
	return out, sk, nil
}
