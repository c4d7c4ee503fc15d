package sim

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// EventKind says what a trace event records.
type EventKind uint8

const (
	// EventAllocate: a queued task was placed on a free machine.
	EventAllocate EventKind = iota + 1
	// EventPreempt: the victim was stopped and the task placed on its
	// machine.
	EventPreempt
	// EventComplete: the task finished on the machine.
	EventComplete
)

func (k EventKind) String() string {
	switch k {
	case EventAllocate:
		return "allocate"
	case EventPreempt:
		return "preempt"
	case EventComplete:
		return "complete"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// MarshalText makes the kind a JSON string.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// TraceEvent is one applied decision or one completion. Organisations and
// machines are named, not indexed, so a trace reads on its own.
type TraceEvent struct {
	Time    float64   `json:"t"`
	Kind    EventKind `json:"kind"`
	Org     string    `json:"org"`
	Task    string    `json:"task"`
	Machine string    `json:"machine"`
	// For EventPreempt: the stopped task, its organisation, and the work
	// it keeps (MFlop, eq. 3.7/3.8).
	Victim    string  `json:"victim,omitempty"`
	VictimOrg string  `json:"victim_org,omitempty"`
	KeptMFlop float64 `json:"kept_mflop,omitempty"`
}

// TraceWriter writes trace events as JSON lines:
//
//	{"t":0,"kind":"allocate","org":"U1","task":"U1-1","machine":"m1"}
//
// It buffers; call Flush at the end. The first write error sticks: later
// events are dropped and Flush returns it.
type TraceWriter struct {
	w   *bufio.Writer
	enc *json.Encoder
	err error
}

// NewTraceWriter writes to w.
func NewTraceWriter(w io.Writer) *TraceWriter {
	bw := bufio.NewWriter(w)
	return &TraceWriter{w: bw, enc: json.NewEncoder(bw)}
}

// Event writes one event; its method value fits Config.Trace.
func (t *TraceWriter) Event(ev TraceEvent) {
	if t.err != nil {
		return
	}
	if err := t.enc.Encode(ev); err != nil {
		t.err = fmt.Errorf("trace: write event at t=%g: %w", ev.Time, err)
	}
}

// Flush writes out what is buffered and reports the first error.
func (t *TraceWriter) Flush() error {
	if t.err != nil {
		return t.err
	}
	if err := t.w.Flush(); err != nil {
		t.err = fmt.Errorf("trace: flush: %w", err)
	}
	return t.err
}

// taskCSVHeader is the header row WriteTasksCSV writes.
var taskCSVHeader = []string{
	"run", "id", "org", "size_mflop", "submit_s", "first_start_s", "completion_s",
	"turnaround_s", "run_s", "preemptions", "wasted_mflop", "energy_j",
}

// WriteTasksCSV writes one row per task of each result, the run number
// (0-based, the position in results) first, with a header row. Times are in
// seconds, energy in joules.
func WriteTasksCSV(w io.Writer, results ...*Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(taskCSVHeader); err != nil {
		return fmt.Errorf("tasks csv: header: %w", err)
	}
	f := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	row := make([]string, len(taskCSVHeader))
	for k, r := range results {
		for _, t := range r.Tasks {
			row = append(row[:0],
				strconv.Itoa(k), t.ID, t.Org, strconv.FormatInt(t.SizeMFlop, 10),
				f(t.SubmitSeconds), f(t.FirstStartSeconds), f(t.CompletionSeconds),
				f(t.TurnaroundSeconds), f(t.RunSeconds), strconv.Itoa(t.Preemptions),
				f(t.WastedMFlop), f(t.EnergyJ))
			if err := cw.Write(row); err != nil {
				return fmt.Errorf("tasks csv: run %d task %q: %w", k, t.ID, err)
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("tasks csv: %w", err)
	}
	return nil
}
