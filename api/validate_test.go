package api_test

import (
	"math"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
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

// TestValidateSubmit covers the API's own checks of a submission; those of
// the ledger, made as the backend encodes the command, are node/apiconv's
// TestEncodeSubmitRefusals.
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
		{"bad job name", api.SubmitRequest{Job: "-x", Tasks: []api.SubmitTask{ok()}}, api.SubmitLimits{}, "job name"},
		{"empty", api.SubmitRequest{}, api.SubmitLimits{}, "no tasks"},
		{"too many", many, api.SubmitLimits{MaxTasks: 10}, "11 tasks, more than 10"},
		{"bad name", with(func(t *api.SubmitTask) { t.Name = "a b" }), api.SubmitLimits{}, `tasks[1]: name "a b"`},
		{"no argv", with(func(t *api.SubmitTask) { t.Argv = nil }), api.SubmitLimits{}, "tasks[1]: argv"},
		{"empty argv0", with(func(t *api.SubmitTask) { t.Argv = []string{""} }), api.SubmitLimits{}, "tasks[1]: argv"},
		{"negative wall", with(func(t *api.SubmitTask) { t.WallLimitMs = -1 }), api.SubmitLimits{}, "wall_limit_ms -1"},
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

func TestValidRequestID(t *testing.T) {
	for id, want := range map[string]bool{
		"":                                       false,
		"a":                                      true,
		"peer:0123abcd":                          true,
		"sweep-2026.11_22:x":                     true,
		"a b":                                    false,
		"a/b":                                    false,
		"é":                                      false,
		strings.Repeat("x", api.MaxRequestIDLen): true,
		strings.Repeat("x", api.MaxRequestIDLen+1): false,
	} {
		if got := api.ValidRequestID(id); got != want {
			t.Errorf("ValidRequestID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestValidateSubmitDeadlines: a task's class, deadline and on_miss are
// checked together.
func TestValidateSubmitDeadlines(t *testing.T) {
	task := func(class string, at, in int64, onMiss string) api.SubmitRequest {
		return api.SubmitRequest{Tasks: []api.SubmitTask{{Argv: []string{"x"}, SizeMFlop: 1, WallLimitMs: 1000,
			Class: class, DeadlineMs: at, DeadlineInMs: in, OnMiss: onMiss}}}
	}
	for _, tc := range []struct {
		req api.SubmitRequest
		err string
	}{
		{task("", 0, 0, ""), ""},
		{task("nice", 0, 0, ""), ""},
		{task("soft-deadline", 5, 0, ""), ""},
		{task("soft-deadline", 0, 5, "nice"), ""},
		{task("soft-deadline", 0, 5, "refuse"), ""},
		{task("urgent", 0, 0, ""), `class "urgent"`},
		{task("soft-deadline", 0, 0, ""), "exactly one of deadline_ms and deadline_in_ms"},
		{task("soft-deadline", 5, 5, ""), "exactly one of deadline_ms and deadline_in_ms"},
		{task("soft-deadline", -5, 0, ""), "exactly one of deadline_ms and deadline_in_ms"},
		{task("soft-deadline", 5, 0, "wait"), `on_miss "wait"`},
		{task("nice", 5, 0, ""), "need class soft-deadline"},
		{task("", 0, 0, "nice"), "need class soft-deadline"},
	} {
		err := api.ValidateSubmit(tc.req, api.SubmitLimits{})
		if tc.err == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.req.Tasks[0], err)
			}
			continue
		}
		if api.CodeOf(err) != api.CodeBadRequest || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want bad_request %q", tc.req.Tasks[0], err, tc.err)
		}
	}
	if api.StatusOf(api.CodeDeadlineUnmeetable) != 409 {
		t.Errorf("deadline_unmeetable is HTTP %d, want 409", api.StatusOf(api.CodeDeadlineUnmeetable))
	}
}
