package slurm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// The job journal (DATA/slurm-jobs.jsonl, docs/SLURM.md) is this
// executor's durable record of the Slurm jobs it submits: one JSON object
// a line, appended and fsync'd. A submit record (the job's name, before
// sbatch) and a job record (its Slurm job ID, before the task may run)
// open a run; an end record closes it. A peer that restarts reads the
// runs left open, adopts the jobs whose task the ledger still places on
// that machine and ends the others (adopt.go; docs/SLURM.md, "Restarts").

// JobJournalFile is the journal's name in a peer's data directory.
const JobJournalFile = "slurm-jobs.jsonl"

// Journal events.
const (
	EventBoot      = "boot"
	EventSubmit    = "submit"    // about to sbatch: Name is the job's name
	EventJob       = "job"       // sbatch answered: Job is the Slurm job ID
	EventEnd       = "end"       // the run's Result is out
	EventAbandoned = "abandoned" // a previous daemon's run, its job ended at boot
	// EventAdopted (adopt.go): a later daemon follows the run's job.
)

// JobRecord is one line of the job journal. Times are unix microseconds.
type JobRecord struct {
	V       int    `json:"v"`
	Event   string `json:"ev"`
	Run     uint64 `json:"run,omitempty"`
	Task    string `json:"task,omitempty"`
	Machine string `json:"machine,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Name    string `json:"name,omitempty"`
	Job     string `json:"job,omitempty"`
	AtUs    int64  `json:"at_us"`
	// End: the Result's reason, exit code and Slurm's final job state;
	// NotRun when the gate never opened (the job was cancelled held).
	Reason   string `json:"reason,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	State    string `json:"state,omitempty"`
	NotRun   bool   `json:"not_run,omitempty"`
	// Energy is where the run's energy came from: "slurm" (sacct's
	// ConsumedEnergy) or "declared".
	Energy string `json:"energy,omitempty"`
	Detail string `json:"detail,omitempty"`
}

const journalVersion = 1

type jobJournal struct {
	path string
	mu   sync.Mutex
	f    *os.File
	next uint64
}

// openJobs are the runs a journal leaves open, by run number.
type openJobs map[uint64]JobRecord

// openJobJournal opens (creates) the journal and returns the runs a
// previous daemon left open (with their job ID when it was recorded).
func openJobJournal(path string) (*jobJournal, openJobs, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("job journal: %w", err)
	}
	if err := trimTorn(path); err != nil {
		return nil, nil, fmt.Errorf("job journal: %w", err)
	}
	recs, err := ReadJobJournal(path)
	if err != nil {
		return nil, nil, err
	}
	open := openJobs{}
	j := &jobJournal{path: path, next: 1}
	for _, r := range recs {
		if r.Run >= j.next {
			j.next = r.Run + 1
		}
		switch r.Event {
		case EventSubmit:
			open[r.Run] = r
		case EventJob:
			if o, ok := open[r.Run]; ok {
				o.Job = r.Job
				open[r.Run] = o
			}
		case EventEnd, EventAbandoned:
			delete(open, r.Run)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("job journal: %w", err)
	}
	j.f = f
	return j, open, nil
}

func (j *jobJournal) newRun() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := j.next
	j.next++
	return n
}

// append writes r and syncs it.
func (j *jobJournal) append(r JobRecord) error {
	r.V = journalVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("job journal %s: %w", j.path, os.ErrClosed)
	}
	if _, err := j.f.Write(b); err != nil {
		return fmt.Errorf("job journal %s: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("job journal %s: %w", j.path, err)
	}
	return nil
}

func (j *jobJournal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// ReadJobJournal reads a job journal. A missing file is empty; a last
// line cut short (a crash during a write) is ignored; any other bad line
// is an error naming it.
func ReadJobJournal(path string) ([]JobRecord, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("job journal: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var out []JobRecord
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil // a last line without newline was never acknowledged
		}
		if err != nil {
			return nil, fmt.Errorf("job journal %s: %w", path, err)
		}
		var r JobRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("job journal %s:%d: %w", path, line, err)
		}
		if r.V != journalVersion {
			return nil, fmt.Errorf("job journal %s:%d: version %d, this build reads %d", path, line, r.V, journalVersion)
		}
		out = append(out, r)
	}
}

// trimTorn cuts a last line without its newline (a write the previous
// daemon never finished), so the next record does not glue onto it.
func trimTorn(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || len(b) == 0 || (err == nil && b[len(b)-1] == '\n') {
		return nil
	}
	if err != nil {
		return err
	}
	return os.Truncate(path, int64(bytes.LastIndexByte(b, '\n')+1))
}

func (o openJobs) sorted() []JobRecord {
	out := make([]JobRecord, 0, len(o))
	for _, r := range o {
		out = append(out, r)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Run < out[k].Run })
	return out
}
