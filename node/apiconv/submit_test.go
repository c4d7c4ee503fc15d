package apiconv_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/jobfile"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/node/apiconv"
)

// submitCommand is the command a peer builds from a checked request.
func submitCommand(req api.SubmitRequest) ledger.Command {
	return ledger.Command{Org: "o", Peer: "p", SubmitTasks: apiconv.SubmitTasks(req, req.RequestID)}
}

// TestExampleJobsValidate: every example job file, as the CLI sends it,
// passes the server's checks and the ledger's (as the peer encodes it),
// and converts faithfully.
func TestExampleJobsValidate(t *testing.T) {
	files, _ := filepath.Glob("../../examples/jobs/*.yaml")
	json, _ := filepath.Glob("../../examples/jobs/*.json")
	files = append(files, json...)
	if len(files) < 3 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		job, err := jobfile.Load(f, jobfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		req := apiconv.SubmitRequestFromJob(job)
		if err := api.ValidateSubmit(req, api.SubmitLimits{}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		apiconv.ResolveDeadlines(&req, 1_700_000_000_000) // as the peer does
		if _, err := encodeSubmit(submitCommand(req)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if req.Job != job.Name || len(req.Tasks) != len(job.Tasks) {
			t.Errorf("%s: %+v", f, req)
		}
		for i, jt := range job.Tasks {
			st := req.Tasks[i]
			if st.Name != jt.Name || st.SizeMFlop != jt.SizeMFlop || st.WallLimitMs != jt.WallClockLimit.Milliseconds() || len(st.Inputs) != len(jt.Inputs) || st.Checkpointable != jt.Checkpointable {
				t.Errorf("%s task %d: %+v from %+v", f, i, st, jt)
			}
		}
	}
}

func TestSubmitTasks(t *testing.T) {
	req := api.SubmitRequest{Job: "job", Tasks: []api.SubmitTask{{
		Name: "n", Argv: []string{"a"}, Env: map[string]string{"K": "v"}, SizeMFlop: 7, WallLimitMs: 9,
		Inputs:  []api.InputFile{{Name: "x/in", Data: []byte("abc")}, {Name: "empty"}},
		Outputs: []string{"o"}, Checkpointable: true,
	}, {Argv: []string{"b"}, SizeMFlop: 1, WallLimitMs: 1}}}
	body := apiconv.SubmitTasks(req, "key")
	abc := sha256.Sum256([]byte("abc"))
	empty := sha256.Sum256(nil)
	s := body.Tasks[0]
	if body.RequestID != "key" || len(body.Tasks) != 2 {
		t.Errorf("body %+v", body)
	}
	if s.SizeMFlop != 7 || s.Spec.Name != "n" || s.Spec.Argv[0] != "a" || s.Spec.Env["K"] != "v" || s.Spec.WallLimitMs != 9 ||
		fmt.Sprint(s.Spec.Inputs) != "[x/in empty]" || fmt.Sprint(s.Spec.Outputs) != "[o]" || !s.Spec.Checkpointable ||
		fmt.Sprint(s.Spec.InputDigests) != fmt.Sprint([]string{hex.EncodeToString(abc[:]), hex.EncodeToString(empty[:])}) {
		t.Errorf("spec %+v", s)
	}
	// A task without a name takes the job's.
	if n := body.Tasks[1].Spec.Name; n != "job" {
		t.Errorf("unnamed task's name %q, want the job's", n)
	}
	// A checked digest is taken as it is, not computed again.
	req.Tasks[0].Inputs[0].Digest = strings.Repeat("a", 64)
	if d := apiconv.SubmitTasks(req, "").Tasks[0].Spec.InputDigests[0]; d != req.Tasks[0].Inputs[0].Digest {
		t.Errorf("digest %s, want the request's", d)
	}
	// The ledger accepts what the conversion gives.
	if _, err := encodeSubmit(submitCommand(req)); err != nil {
		t.Error(err)
	}
	// The conversion copies: changing the request later does not change the spec.
	req.Tasks[0].Argv[0] = "changed"
	req.Tasks[0].Env["K"] = "changed"
	if s.Spec.Argv[0] != "a" || s.Spec.Env["K"] != "v" {
		t.Error("spec shares memory with the request")
	}
}

// TestEncodeSubmitRefusals: what api.ValidateSubmit leaves to the ledger is
// refused as the peer encodes the command, as a bad_request naming the
// task, in the form of the API's own checks.
func TestEncodeSubmitRefusals(t *testing.T) {
	ok := func() api.SubmitTask {
		return api.SubmitTask{Argv: []string{"/bin/true"}, SizeMFlop: 1, WallLimitMs: 1}
	}
	with := func(f func(*api.SubmitTask)) api.SubmitRequest {
		t := ok()
		f(&t)
		return api.SubmitRequest{Tasks: []api.SubmitTask{ok(), t}}
	}
	for _, tc := range []struct {
		name string
		req  api.SubmitRequest
		err  string
	}{
		{"max size", with(func(t *api.SubmitTask) { t.SizeMFlop = ledger.MaxSizeMFlop }), ""},
		{"NUL in argv", with(func(t *api.SubmitTask) { t.Argv = []string{"a", "b\x00"} }), "tasks[1]: argv[1]"},
		{"size over", with(func(t *api.SubmitTask) { t.SizeMFlop = ledger.MaxSizeMFlop + 1 }), "tasks[1]: size"},
		{"zero size", with(func(t *api.SubmitTask) { t.SizeMFlop = 0 }), "tasks[1]: size 0 MFlop"},
		{"env key", with(func(t *api.SubmitTask) { t.Env = map[string]string{"A-B": "x"} }), `tasks[1]: env key "A-B"`},
		{"output escapes", with(func(t *api.SubmitTask) { t.Outputs = []string{"../x"} }), `tasks[1]: outputs[0] "../x"`},
		{"duplicate inputs", with(func(t *api.SubmitTask) { t.Inputs = []api.InputFile{{Name: "a"}, {Name: "a"}} }), `tasks[1]: inputs[1]: duplicate "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := api.ValidateSubmit(tc.req, api.SubmitLimits{}); err != nil {
				t.Fatalf("the API's own checks refuse it: %v", err)
			}
			_, err := encodeSubmit(submitCommand(tc.req))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if api.CodeOf(err) != api.CodeBadRequest || !strings.HasPrefix(err.(*api.Error).Message, tc.err) {
				t.Errorf("%v, want bad_request %q", err, tc.err)
			}
		})
	}
}

// TestContractBoundsMatchLedger: the bounds package api states as its own
// contract are the ledger's.
func TestContractBoundsMatchLedger(t *testing.T) {
	if api.MaxRequestIDLen != ledger.MaxRequestIDLen || api.MaxTaskIDLen != ledger.MaxTaskIDLen ||
		api.MaxLimitW*1000 != ledger.MaxLimitMilliW || api.MaxTasksPerSubmit != ledger.MaxTasksPerCommand {
		t.Error("a bound of package api differs from the ledger's")
	}
	states := []string{string(ledger.TaskQueued), string(ledger.TaskAssigned), string(ledger.TaskRunning),
		string(ledger.TaskDone), string(ledger.TaskFailed), string(ledger.TaskCancelled)}
	if !slices.Equal(api.TaskStates(), states) {
		t.Errorf("api.TaskStates %v, ledger %v", api.TaskStates(), states)
	}
	for _, id := range []string{"", "a", "peer:0a", "x.y_z-1:2", "a b", "a/b", "é", "a\x00",
		strings.Repeat("x", ledger.MaxRequestIDLen), strings.Repeat("x", ledger.MaxRequestIDLen+1)} {
		if api.ValidRequestID(id) != ledger.ValidRequestID(id) {
			t.Errorf("request ID %q: api says %v, ledger %v", id, api.ValidRequestID(id), ledger.ValidRequestID(id))
		}
	}
}

func TestLimitMilliW(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		req   api.LimitRequest
		quota int64
		want  int64
	}{
		{api.LimitRequest{Watts: f(1.5)}, 0, 1500},
		{api.LimitRequest{Watts: f(0.0004)}, 0, 0},
		{api.LimitRequest{Watts: f(api.MaxLimitW)}, 0, ledger.MaxLimitMilliW},
		{api.LimitRequest{Percent: f(50)}, 300_001, 150_001},
		{api.LimitRequest{Percent: f(250)}, 100_000, 250_000},
		{api.LimitRequest{Percent: f(1e6)}, math.MaxInt64 / 2, ledger.MaxLimitMilliW},
	} {
		if got := apiconv.LimitMilliW(tc.req, tc.quota); got != tc.want {
			t.Errorf("%+v of %d mW: %d mW, want %d", tc.req, tc.quota, got, tc.want)
		}
	}
}

// encodeSubmit is what node.Submit does with a submission: the ledger's
// checks and encoding, a refusal mapped to the API's error.
func encodeSubmit(c ledger.Command) ([]byte, error) {
	data, err := ledger.EncodeCommand(c)
	if err != nil {
		return nil, apiconv.Error(err)
	}
	return data, nil
}

// TestSubmitDeadlines: a job file's class, deadline (after submission or
// absolute) and on_miss reach the ledger's spec, the relative deadline
// counted from the submitting peer's clock; the fallback makes a
// soft-deadline task nice only when it asked for it.
func TestSubmitDeadlines(t *testing.T) {
	src := `defaults: {wall_clock_limit: 1m, size: 1, argv: [x]}
tasks:
  - {class: soft-deadline, deadline: 6h}
  - {class: soft-deadline, deadline: "2026-11-26T18:00:00Z", on_miss: nice}
  - {class: nice}
  - {}
`
	job, err := jobfile.Parse("d.yaml", []byte(src), jobfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := apiconv.SubmitRequestFromJob(job)
	if err := api.ValidateSubmit(req, api.SubmitLimits{}); err != nil {
		t.Fatal(err)
	}
	const now = 1_700_000_000_000
	apiconv.ResolveDeadlines(&req, now)
	body := apiconv.SubmitTasks(req, "")
	want := []struct {
		class string
		dl    int64
	}{
		{ledger.ClassSoftDeadline, now + 6*3_600_000},
		{ledger.ClassSoftDeadline, 1_795_716_000_000},
		{ledger.ClassNice, 0},
		{"", 0},
	}
	for i, w := range want {
		if s := body.Tasks[i].Spec; s.Class != w.class || s.DeadlineMs != w.dl {
			t.Errorf("task %d: class %q deadline %d, want %+v", i, s.Class, s.DeadlineMs, w)
		}
	}
	if _, err := encodeSubmit(submitCommand(req)); err != nil {
		t.Fatal(err)
	}
	if apiconv.AcceptAsNice(body, req, 0) || apiconv.AcceptAsNice(body, req, 2) {
		t.Error("the fallback changed a task that did not ask for it")
	}
	if !apiconv.AcceptAsNice(body, req, 1) || body.Tasks[1].Spec.Class != ledger.ClassNice || body.Tasks[1].Spec.DeadlineMs != 0 {
		t.Errorf("fallback: %+v", body.Tasks[1].Spec)
	}
}
