package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/jobfile"
	"github.com/coopgrid/coopgrid/ledger"
)

func fp(v float64) *float64 { return &v }

func TestValidateLimit(t *testing.T) {
	for _, tc := range []struct {
		req api.LimitRequest
		err string
	}{
		{api.LimitRequest{Percent: fp(80)}, ""},
		{api.LimitRequest{Percent: fp(0)}, ""},
		{api.LimitRequest{Percent: fp(250)}, ""}, // tasks may run on others' machines
		{api.LimitRequest{Watts: fp(1500)}, ""},
		{api.LimitRequest{Watts: fp(0)}, ""},
		{api.LimitRequest{}, "exactly one"},
		{api.LimitRequest{Percent: fp(1), Watts: fp(1)}, "exactly one"},
		{api.LimitRequest{Percent: fp(-1)}, "percent -1"},
		{api.LimitRequest{Percent: fp(math.NaN())}, "percent NaN"},
		{api.LimitRequest{Watts: fp(math.Inf(1))}, "watts +Inf"},
		{api.LimitRequest{Watts: fp(-0.5)}, "watts -0.5"},
		{api.LimitRequest{Watts: fp(2e12)}, "watts 2e+12"},
	} {
		err := api.ValidateLimit(tc.req)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.req, err)
			}
			continue
		}
		if api.CodeOf(err) != api.CodeBadRequest || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want bad_request %q", tc.req, err, tc.err)
		}
	}
}

func TestValidateSubmit(t *testing.T) {
	ok := func() api.SubmitTask {
		return api.SubmitTask{Argv: []string{"/bin/true"}, SizeMFlop: 1, WallLimitMs: 1}
	}
	with := func(f func(*api.SubmitTask)) api.SubmitRequest {
		t := ok()
		f(&t)
		return api.SubmitRequest{Tasks: []api.SubmitTask{ok(), t}}
	}
	many := api.SubmitRequest{}
	for range 11 {
		many.Tasks = append(many.Tasks, ok())
	}
	for _, tc := range []struct {
		name string
		req  api.SubmitRequest
		lim  api.SubmitLimits
		err  string
	}{
		{"fine", with(func(*api.SubmitTask) {}), api.SubmitLimits{}, ""},
		{"max size", with(func(t *api.SubmitTask) { t.SizeMFlop = ledger.MaxSizeMFlop }), api.SubmitLimits{}, ""},
		{"bad job name", api.SubmitRequest{Job: "-x", Tasks: []api.SubmitTask{ok()}}, api.SubmitLimits{}, "job name"},
		{"empty", api.SubmitRequest{}, api.SubmitLimits{}, "no tasks"},
		{"too many", many, api.SubmitLimits{MaxTasks: 10}, "11 tasks, more than 10"},
		{"bad name", with(func(t *api.SubmitTask) { t.Name = "a b" }), api.SubmitLimits{}, `tasks[1]: name "a b"`},
		{"no argv", with(func(t *api.SubmitTask) { t.Argv = nil }), api.SubmitLimits{}, "tasks[1]: argv"},
		{"empty argv0", with(func(t *api.SubmitTask) { t.Argv = []string{""} }), api.SubmitLimits{}, "tasks[1]: argv"},
		{"NUL in argv", with(func(t *api.SubmitTask) { t.Argv = []string{"a", "b\x00"} }), api.SubmitLimits{}, "tasks[1]: argv[1]"},
		{"size over", with(func(t *api.SubmitTask) { t.SizeMFlop = ledger.MaxSizeMFlop + 1 }), api.SubmitLimits{}, "tasks[1]: size"},
		{"negative wall", with(func(t *api.SubmitTask) { t.WallLimitMs = -1 }), api.SubmitLimits{}, "wall_limit_ms -1"},
		{"env key", with(func(t *api.SubmitTask) { t.Env = map[string]string{"A-B": "x"} }), api.SubmitLimits{}, `env key "A-B"`},
		{"output escapes", with(func(t *api.SubmitTask) { t.Outputs = []string{"../x"} }), api.SubmitLimits{}, `outputs[0] "../x"`},
		{"duplicate inputs", with(func(t *api.SubmitTask) { t.Inputs = []api.InputFile{{Name: "a"}, {Name: "a"}} }), api.SubmitLimits{}, `inputs[1]: duplicate "a"`},
		{"input too large", with(func(t *api.SubmitTask) { t.Inputs = []api.InputFile{{Name: "a", Data: make([]byte, 11)}} }), api.SubmitLimits{MaxInputFileBytes: 10}, "11 bytes, more than 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := api.ValidateSubmit(tc.req, tc.lim)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if api.CodeOf(err) != api.CodeBadRequest || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v, want bad_request %q", err, tc.err)
			}
		})
	}
}

// TestExampleJobsValidate: every example job file, as the CLI sends it,
// passes the server's checks, and converts faithfully.
func TestExampleJobsValidate(t *testing.T) {
	files, _ := filepath.Glob("../examples/jobs/*.yaml")
	json, _ := filepath.Glob("../examples/jobs/*.json")
	files = append(files, json...)
	if len(files) < 3 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		job, err := jobfile.Load(f, jobfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		req := api.SubmitRequestFromJob(job)
		if err := api.ValidateSubmit(req, api.SubmitLimits{}); err != nil {
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

func TestTaskSpecsToLedger(t *testing.T) {
	req := api.SubmitRequest{Tasks: []api.SubmitTask{{
		Name: "n", Argv: []string{"a"}, Env: map[string]string{"K": "v"}, SizeMFlop: 7, WallLimitMs: 9,
		Inputs:  []api.InputFile{{Name: "x/in", Data: []byte("abc")}, {Name: "empty"}},
		Outputs: []string{"o"}, Checkpointable: true,
	}}}
	specs := api.TaskSpecsToLedger(req)
	abc := sha256.Sum256([]byte("abc"))
	empty := sha256.Sum256(nil)
	s := specs[0]
	if s.SizeMFlop != 7 || s.Spec.Name != "n" || s.Spec.Argv[0] != "a" || s.Spec.Env["K"] != "v" || s.Spec.WallLimitMs != 9 ||
		fmt.Sprint(s.Spec.Inputs) != "[x/in empty]" || fmt.Sprint(s.Spec.Outputs) != "[o]" || !s.Spec.Checkpointable ||
		fmt.Sprint(s.Spec.InputDigests) != fmt.Sprint([]string{hex.EncodeToString(abc[:]), hex.EncodeToString(empty[:])}) {
		t.Errorf("spec %+v", s)
	}
	// The ledger accepts what the conversion gives.
	if _, err := ledger.EncodeCommand(ledger.Command{Org: "o", Peer: "p", SubmitTasks: &ledger.SubmitTasks{Tasks: specs}}); err != nil {
		t.Error(err)
	}
	// The conversion copies: changing the request later does not change the spec.
	req.Tasks[0].Argv[0] = "changed"
	req.Tasks[0].Env["K"] = "changed"
	if s.Spec.Argv[0] != "a" || s.Spec.Env["K"] != "v" {
		t.Error("spec shares memory with the request")
	}
}

func TestErrorFromLedger(t *testing.T) {
	for _, tc := range []struct {
		code ledger.Code
		want string
	}{
		{ledger.CodeMalformed, api.CodeBadRequest},
		{ledger.CodeBadVersion, api.CodeBadRequest},
		{ledger.CodeUnknownOrg, api.CodeNotFound},
		{ledger.CodeUnknownMachine, api.CodeNotFound},
		{ledger.CodeUnknownTask, api.CodeNotFound},
		{ledger.CodeNotOwner, api.CodeForbidden},
		{ledger.CodeExists, api.CodeConflict},
		{ledger.CodeMachineBusy, api.CodeConflict},
		{ledger.CodeMachineDown, api.CodeConflict},
		{ledger.CodeLimitExceeded, api.CodeConflict},
		{ledger.CodeBadState, api.CodeConflict},
		{ledger.CodeStale, api.CodeConflict},
		{ledger.CodeOverflow, api.CodeInternal},
	} {
		err := api.ErrorFromLedger(fmt.Errorf("propose: %w", &ledger.Error{Code: tc.code, Msg: "m"}))
		var e *api.Error
		if !errors.As(err, &e) || e.Code != tc.want || e.Status != api.StatusOf(tc.want) || !strings.Contains(e.Message, string(tc.code)) {
			t.Errorf("%s: %#v, want %s", tc.code, err, tc.want)
		}
	}
	plain := errors.New("raft: not leader")
	if got := api.ErrorFromLedger(plain); got != plain {
		t.Errorf("non-ledger error changed: %v", got)
	}
	if api.ErrorFromLedger(nil) != nil {
		t.Error("nil changed")
	}
}
