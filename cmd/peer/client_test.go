package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

const cliToken = "cli-test-token-5f3a"

// fixture serves the API over a seeded ledger-backed backend and writes a
// data directory pointing at it, as `peer init` would: api.token and
// config.yaml with the API's address.
func fixture(t *testing.T) (*apitest.Backend, string) {
	return fixtureWith(t, func(b *apitest.Backend) api.Backend { return b })
}

// fixtureWith serves wrap(backend) instead.
func fixtureWith(t *testing.T, wrap func(*apitest.Backend) api.Backend) (*apitest.Backend, string) {
	t.Helper()
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs + 60_000 })
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewServer(wrap(b), api.ServerOptions{Token: cliToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	return b, dataDir(t, cliToken, strings.TrimPrefix(srv.URL, "http://"))
}

func dataDir(t *testing.T, token, apiAddr string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, api.TokenFile), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "org: alpha\nlisten: [/ip4/127.0.0.1/tcp/0]\napi: " + apiAddr + "\nexecutor:\n  kind: sim\n"
	if err := os.WriteFile(filepath.Join(dir, configFile), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// lines normalises a table: each line's fields joined by one space.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return out
}

func TestClientTables(t *testing.T) {
	_, data := fixture(t)
	tests := []struct {
		args []string
		want []string // normalised lines, in order (others may come between)
	}{
		{[]string{"status"}, []string{
			"peer 12D3KooWalpha (alpha)",
			"leader 12D3KooWalpha (this peer)",
			"members (2):",
			"PEER ORG VOTER LEADER ADDRS",
			"12D3KooWalpha alpha yes yes /ip4/127.0.0.1/tcp/4001/p2p/12D3KooWalpha",
			"12D3KooWbeta beta yes no -",
			"organisations (2):",
			"ORG MACHINES QUOTA GFLOPS POWER QUOTA W LIMIT W PI W DP QUEUED RUNNING DONE FAILED CANCELLED ENERGY J OWNER J",
			"alpha 2 30 500 800 300 -0.333 1 1 1 0 0 12.345 0",
			"beta 1 40 400 1000 200 -0.750 0 1 0 0 0 0 12.345",
		}},
		{[]string{"orgs"}, []string{
			"ORG MACHINES QUOTA GFLOPS POWER QUOTA W LIMIT W PI W DP QUEUED RUNNING DONE FAILED CANCELLED ENERGY J OWNER J",
			"alpha 2 30 500 800 300 -0.333 1 1 1 0 0 12.345 0",
			"beta 1 40 400 1000 200 -0.750 0 1 0 0 0 0 12.345",
		}},
		{[]string{"machines"}, []string{
			"MACHINE ORG GFLOPS BUSY W IDLE W STATE TASK LAST HEARTBEAT",
			"alpha/a1 alpha 10 200 - up beta-1 2023-11-14 22:13:20Z",
			"alpha/a2 alpha 20 300 50 up alpha-2 2023-11-14 22:13:20Z",
			"beta/b1 beta 40 400 - up - 2023-11-14 22:13:21Z",
		}},
		{[]string{"tasks"}, []string{
			"ID NAME JOB ORG STATE MACHINE ATTEMPTS EXIT GFLOP SUBMITTED WAITING",
			"alpha-1 render-0 render alpha done beta/b1 1 0 100 2023-11-14 22:13:22Z -",
			"alpha-2 render-1 render alpha assigned alpha/a2 0 - 100 2023-11-14 22:13:22Z -",
			"alpha-3 render-2 render alpha queued - 0 - 100 2023-11-14 22:13:22Z next_pass",
			"beta-1 - - beta running alpha/a1 1 - 50 2023-11-14 22:13:23Z -",
		}},
		{[]string{"tasks", "--org", "alpha", "--state", "queued", "--state", "assigned"}, []string{
			"ID NAME JOB ORG STATE MACHINE ATTEMPTS EXIT GFLOP SUBMITTED WAITING",
			"alpha-2 render-1 render alpha assigned alpha/a2 0 - 100 2023-11-14 22:13:22Z -",
			"alpha-3 render-2 render alpha queued - 0 - 100 2023-11-14 22:13:22Z next_pass",
		}},
		{[]string{"tasks", "--state", "failed"}, []string{"no tasks"}},
		{[]string{"task", "alpha-1"}, []string{
			"id alpha-1", "name render-0", "org alpha", "state done", "exit code 0", "attempts 1",
			"size 100 GFlop (0 remaining)", "argv /bin/echo frame 0", `env FRAME="0"`, "wall-clock limit 60s",
			"inputs scene.txt", "outputs frame-0.png", "checkpointable no",
			"runs:", "MACHINE OWNER START END OUTCOME ENERGY J SOURCE",
			"beta/b1 beta 2023-11-14 22:13:25Z 2023-11-14 22:13:26Z done 12.345 rapl",
		}},
		{[]string{"ledger"}, []string{
			"ORG USER J OWNER SELF J OWNER OTHERS J LIMIT W PI W",
			"alpha 12.345 0 0 800 300",
			"beta 0 0 12.345 1000 200",
		}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, append(tc.args, "--data", data)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			got := lines(out)
			i := 0
			for _, l := range got {
				if i < len(tc.want) && l == tc.want[i] {
					i++
				}
			}
			if i < len(tc.want) {
				t.Errorf("missing line %q in:\n%s", tc.want[i], out)
			}
		})
	}
	t.Run("logs", func(t *testing.T) {
		code, out, _ := runCLI(t, "logs", "alpha-1", "--data", data)
		if code != 0 || out != "hello from alpha-1\n" {
			t.Errorf("exit %d: %q", code, out)
		}
		code, out, _ = runCLI(t, "logs", "--stderr", "alpha-1", "--data", data)
		if code != 0 || out != "warning: nothing\n" {
			t.Errorf("exit %d: %q", code, out)
		}
	})
}

// jsonKeys decodes out and returns the keys of the object (or of the
// list's first object).
func jsonKeys(t *testing.T, out string) map[string]any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if l, ok := v.([]any); ok {
		if len(l) == 0 {
			t.Fatalf("empty list")
		}
		v = l[0]
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("not an object: %s", out)
	}
	return m
}

func TestClientJSON(t *testing.T) {
	b, data := fixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		keys []string
		same func(out string) (got, want any)
	}{
		{[]string{"status"}, []string{"self", "org", "leader", "raft", "peers", "orgs", "build"}, func(out string) (any, any) {
			var got api.Status
			_ = json.Unmarshal([]byte(out), &got)
			want, _ := b.Status(ctx)
			build := api.ReadBuild("", "") // the server's, given none
			want.Build = &build
			return got, want
		}},
		{[]string{"tasks"}, []string{"id", "org", "name", "state", "machine", "attempts", "exit_code", "size_gflop", "submitted_ms"}, func(out string) (any, any) {
			var got []api.TaskView
			_ = json.Unmarshal([]byte(out), &got)
			want, _ := b.Tasks(ctx, api.TaskQuery{})
			return got, want
		}},
		{[]string{"task", "alpha-2"}, []string{"id", "state", "machine", "argv", "remaining_gflop"}, func(out string) (any, any) {
			var got api.TaskDetail
			_ = json.Unmarshal([]byte(out), &got)
			want, _ := b.Task(ctx, "alpha-2")
			return got, want
		}},
		{[]string{"orgs"}, []string{"name", "quota_gflops", "power_quota_w", "limit_w", "pi_w", "dp", "queued", "running", "done", "failed", "energy_j"}, func(out string) (any, any) {
			var got []api.OrgView
			_ = json.Unmarshal([]byte(out), &got)
			want, _ := b.Orgs(ctx)
			return got, want
		}},
		{[]string{"machines"}, []string{"id", "org", "gflops", "busy_w", "state"}, func(out string) (any, any) {
			var got []api.MachineView
			_ = json.Unmarshal([]byte(out), &got)
			want, _ := b.Machines(ctx)
			return got, want
		}},
		{[]string{"ledger"}, []string{"applied_index", "state_hash", "orgs"}, func(out string) (any, any) {
			var got api.LedgerView
			_ = json.Unmarshal([]byte(out), &got)
			want, _ := b.Ledger(ctx)
			return got, want
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runCLI(t, append(tc.args, "--json", "--data", data)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			m := jsonKeys(t, out)
			for _, k := range tc.keys {
				if _, ok := m[k]; !ok {
					t.Errorf("no %q in %s", k, out)
				}
			}
			if got, want := tc.same(out); !reflect.DeepEqual(got, want) {
				t.Errorf("--json differs from the backend:\n got %+v\nwant %+v", got, want)
			}
		})
	}
	t.Run("empty list is []", func(t *testing.T) {
		code, out, _ := runCLI(t, "tasks", "--org", "gamma", "--json", "--data", data)
		if code != 0 || strings.TrimSpace(out) != "[]" {
			t.Errorf("exit %d: %q", code, out)
		}
	})
}

func TestClientWrites(t *testing.T) {
	ctx := context.Background()
	t.Run("submit", func(t *testing.T) {
		b, data := fixture(t)
		code, out, errs := runCLI(t, "submit", "../../examples/jobs/hello.json", "--data", data)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		want := []string{"submitted job hello: 2 tasks", "ID NAME", "alpha-4 hello-size", "alpha-5 hello-runtime"}
		if got := lines(out); !reflect.DeepEqual(got, want) {
			t.Errorf("output %q, want %q", got, want)
		}
		d, err := b.Task(ctx, "alpha-5")
		// runtime 2s on 1.5 GFLOPS = 3 GFlop.
		if err != nil || d.Name != "hello-runtime" || d.SizeGFlop != 3 || d.State != "queued" || d.WallLimitMs != 60_000 {
			t.Errorf("alpha-5 %+v %v", d, err)
		}
	})
	t.Run("submit json with inputs", func(t *testing.T) {
		b, data := fixture(t)
		code, out, errs := runCLI(t, "submit", "--json", "../../examples/jobs/checkpoint-counter.yaml", "--data", data)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var got submitOutput
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if got.Job == "" || len(got.TaskIDs) == 0 || got.TaskIDs[0] != "alpha-4" || got.Tasks[0].ID != "alpha-4" {
			t.Errorf("output %+v", got)
		}
		script, err := os.ReadFile("../../examples/jobs/counter.sh")
		if err != nil {
			t.Fatal(err)
		}
		in := b.Inputs("alpha-4")
		if len(in) != 1 || in[0].Name != "counter.sh" || string(in[0].Data) != string(script) {
			t.Errorf("inputs %+v", in)
		}
	})
	t.Run("submit dry run needs no peer", func(t *testing.T) {
		code, out, errs := runCLI(t, "submit", "--dry-run", "../../examples/jobs/sweep.yaml")
		if code != 0 || !strings.Contains(out, "job sweep is valid: 8 tasks (nothing submitted)") {
			t.Errorf("exit %d: %s %s", code, out, errs)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		b, data := fixture(t)
		code, out, errs := runCLI(t, "cancel", "alpha-2", "alpha-3", "--data", data)
		if code != 0 || strings.TrimSpace(out) != "cancelled alpha-2 alpha-3" {
			t.Fatalf("exit %d: %s %s", code, out, errs)
		}
		for _, id := range []string{"alpha-2", "alpha-3"} {
			if d, _ := b.Task(ctx, id); d.State != "cancelled" {
				t.Errorf("%s is %s", id, d.State)
			}
		}
	})
	t.Run("jobs: tasks, cancel and retry by job name", func(t *testing.T) {
		b, data := fixture(t)
		if code, _, errs := runCLI(t, "submit", "../../examples/jobs/hello.json", "--data", data); code != 0 {
			t.Fatalf("submit: exit %d: %s", code, errs)
		}
		code, out, errs := runCLI(t, "tasks", "--job", "hello", "--json", "--data", data)
		var ts []api.TaskView
		if code != 0 || json.Unmarshal([]byte(out), &ts) != nil || len(ts) != 2 || ts[0].ID != "alpha-4" || ts[1].ID != "alpha-5" || ts[0].Job != "hello" {
			t.Fatalf("tasks --job: exit %d: %s %s", code, out, errs)
		}
		if code, out, errs := runCLI(t, "cancel", "--job", "hello", "--data", data); code != 0 || strings.TrimSpace(out) != "cancelled alpha-4 alpha-5" {
			t.Fatalf("cancel --job: exit %d: %s %s", code, out, errs)
		}
		if d, _ := b.Task(ctx, "alpha-3"); d.State != "queued" {
			t.Errorf("a task of no job was touched: %s", d.State)
		}
		if code, out, errs := runCLI(t, "retry", "--job", "hello", "--data", data); code != 0 || strings.TrimSpace(out) != "queued again alpha-4 alpha-5" {
			t.Fatalf("retry --job: exit %d: %s %s", code, out, errs)
		}
		for _, id := range []string{"alpha-4", "alpha-5"} {
			if d, _ := b.Task(ctx, id); d.State != "queued" || d.Job != "hello" || d.MaxAttempts != 3 {
				t.Errorf("%s: %s, job %q, max attempts %d", id, d.State, d.Job, d.MaxAttempts)
			}
		}
		if code, out, _ := runCLI(t, "retry", "--job", "hello", "--data", data); code != 0 || !strings.Contains(out, "job hello: no task of this organisation to retry") {
			t.Errorf("retry --job with nothing to retry: exit %d: %s", code, out)
		}
		if code, out, errs := runCLI(t, "cancel", "alpha-4", "--data", data); code != 0 {
			t.Fatalf("cancel: exit %d: %s %s", code, out, errs)
		}
		if code, out, errs := runCLI(t, "retry", "alpha-4", "--data", data); code != 0 || strings.TrimSpace(out) != "queued again alpha-4" {
			t.Fatalf("retry ID: exit %d: %s %s", code, out, errs)
		}
	})
	t.Run("limit", func(t *testing.T) {
		b, data := fixture(t)
		for _, tc := range []struct {
			arg  string
			want float64
		}{{"80%", 400}, {"1500W", 1500}, {"1200", 1200}, {"950.5 w", 950.5}, {"150%", 750}} {
			code, out, errs := runCLI(t, "limit", "set", tc.arg, "--data", data)
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", tc.arg, code, errs)
			}
			o, _ := b.Orgs(ctx)
			if o[0].LimitW != tc.want || !strings.Contains(out, "alpha: power limit "+num(tc.want)+" W (in use 300 W, power quota 500 W)") {
				t.Errorf("%s: limit %v, output %q", tc.arg, o[0].LimitW, out)
			}
		}
		code, out, _ := runCLI(t, "limit", "set", "90%", "--json", "--data", data)
		if m := jsonKeys(t, out); code != 0 || m["limit_w"] != 450.0 || m["name"] != "alpha" {
			t.Errorf("json %s", out)
		}
	})
	t.Run("leave", func(t *testing.T) {
		b, data := fixture(t)
		code, out, _ := runCLI(t, "leave", "--data", data)
		if code != 0 || strings.TrimSpace(out) != "left the federation" || !b.Left() {
			t.Errorf("exit %d: %q, left %v", code, out, b.Left())
		}
		code, _, errs := runCLI(t, "leave", "--data", data)
		if code != 1 || !strings.Contains(errs, "leave: conflict: this peer already left") {
			t.Errorf("second leave: exit %d: %s", code, errs)
		}
	})
}

// TestClientErrorPaths: each command's failures, with the exit code and
// the message the user sees.
func TestClientErrorPaths(t *testing.T) {
	b, data := fixture(t)
	// Rejected writes take log indexes (as in the real log) but change
	// nothing: the state hash is the witness.
	hash, _ := b.HashAndIndex()

	// A data directory whose API nobody serves.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close()
	dead := dataDir(t, cliToken, deadAddr)
	wrongToken := dataDir(t, "not-the-token", strings.TrimPrefix(readAPI(t, data), "http://"))
	empty := t.TempDir()

	badJob := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badJob, []byte("tasks:\n  - argv: [/bin/true]\n    size: 1\n    wall_clock_limit: -5m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	everyCommand := [][]string{
		{"status"}, {"orgs"}, {"machines"}, {"tasks"}, {"task", "alpha-1"}, {"logs", "alpha-1"},
		{"cancel", "alpha-3"}, {"ledger"}, {"limit", "set", "80%"}, {"leave"},
		{"submit", "../../examples/jobs/hello.json"},
	}
	type tc struct {
		name string
		args []string
		code int
		msg  string
	}
	var cases []tc
	for _, c := range everyCommand {
		cases = append(cases,
			tc{"unreachable " + c[0], append(c, "--data", dead), 1, "peer: cannot reach the peer's API at http://" + deadAddr + ": is `peer run` running?\n"},
			tc{"bad token " + c[0], append(c, "--data", wrongToken), 1, "refused the token from " + filepath.Join(wrongToken, api.TokenFile)},
			tc{"no data dir " + c[0], c, 2, "no API token: give --data DIR"},
			tc{"no token file " + c[0], append(c, "--data", empty), 2, "read the API token"},
		)
	}
	cases = append(cases,
		tc{"malformed job file", []string{"submit", badJob, "--data", data}, 2, badJob + ":4:23: tasks[0].wall_clock_limit: must be > 0"},
		tc{"missing job file", []string{"submit", "nope.yaml", "--data", data}, 2, "nope.yaml: cannot read job file"},
		tc{"unknown task", []string{"task", "alpha-99", "--data", data}, 1, `peer: task alpha-99: not_found: no task "alpha-99"`},
		tc{"unknown task logs", []string{"logs", "alpha-99", "--data", data}, 1, `logs of alpha-99: not_found: no task "alpha-99"`},
		tc{"unknown task cancel", []string{"cancel", "alpha-99", "--data", data}, 1, "cancel alpha-99: not_found"},
		tc{"malformed task ID", []string{"task", "a b", "--data", data}, 2, `task ID "a b": want <org>-<n>`},
		tc{"duplicate cancel", []string{"cancel", "alpha-3", "alpha-3", "--data", data}, 2, "alpha-3 given twice"},
		tc{"another org's task", []string{"cancel", "beta-1", "--data", data}, 1, "cancel beta-1: forbidden"},
		tc{"a done task", []string{"cancel", "alpha-1", "--data", data}, 1, "cancel alpha-1: conflict: task alpha-1 is already done"},
		tc{"retry another org's task", []string{"retry", "beta-1", "--data", data}, 1, "retry beta-1: forbidden"},
		tc{"retry a done task", []string{"retry", "alpha-1", "--data", data}, 1, "retry alpha-1: conflict: task alpha-1 is done: only a failed or cancelled task can be retried"},
		tc{"retry IDs and --job", []string{"retry", "alpha-1", "--job", "hello", "--data", data}, 2, "give task IDs or --job NAME, not both"},
		tc{"cancel nothing", []string{"cancel", "--data", data}, 2, "give task IDs or --job NAME, not both"},
		tc{"bad job name", []string{"cancel", "--job", "../x", "--data", data}, 2, `job "../x": not a job name`},
		tc{"limit below PI", []string{"limit", "set", "100W", "--data", data}, 1, "limit set 100W: conflict"},
		tc{"limit garbage", []string{"limit", "set", "lots", "--data", data}, 2, `limit "lots": want a percentage`},
		tc{"limit negative", []string{"limit", "set", "--data", data, "--", "-5%"}, 2, `limit "-5%": percent -5`},
		tc{"limit hex", []string{"limit", "set", "0x10", "--data", data}, 2, `limit "0x10"`},
		tc{"limit no subcommand", []string{"limit"}, 2, "missing subcommand"},
		tc{"limit unknown subcommand", []string{"limit", "show"}, 2, `unknown command "show"`},
		tc{"limit flag before subcommand", []string{"limit", "--data", data}, 2, "unknown flag: --data"},
		tc{"bad state filter", []string{"tasks", "--state", "zombie", "--data", data}, 2, `state "zombie": want one of`},
		tc{"extra argument", []string{"status", "now", "--data", data}, 2, "usage: peer status"},
		tc{"missing argument", []string{"task", "--data", data}, 2, "usage: peer task ID"},
		tc{"unknown flag", []string{"tasks", "--owner", "x", "--data", data}, 2, "unknown flag: --owner"},
		tc{"bad --api", []string{"status", "--api", "ftp://x", "--data", data}, 2, "want host:port"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCLI(t, c.args...)
			if code != c.code || !strings.Contains(errs, c.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errs, c.code, c.msg)
			}
			if c.code != 0 && out != "" {
				t.Errorf("stdout on failure: %q", out)
			}
		})
	}
	if h, _ := b.HashAndIndex(); h != hash || b.Left() {
		t.Errorf("a failed command changed the ledger (left: %v)", b.Left())
	}
}

// readAPI returns the api key a fixture wrote.
func readAPI(t *testing.T, data string) string {
	t.Helper()
	f := clientFlags{data: data}
	a, err := f.address()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestClientAddress(t *testing.T) {
	for _, tc := range []struct {
		name, config, flag, want, err string
	}{
		{"no config", "", "", api.DefaultAddr, ""},
		{"config without api", "org: a\n", "", api.DefaultAddr, ""},
		{"config", "org: a\napi: 127.0.0.1:9500\nconsensus: {preset: wan}\n", "", "127.0.0.1:9500", ""},
		{"wildcard v4", "api: 0.0.0.0:9500\n", "", "127.0.0.1:9500", ""},
		{"wildcard empty host", "api: :9500\n", "", "127.0.0.1:9500", ""},
		{"wildcard v6", "api: '[::]:9500'\n", "", "[::1]:9500", ""},
		{"flag wins", "api: 127.0.0.1:9500\n", "http://10.0.0.1:1", "http://10.0.0.1:1", ""},
		{"port 0", "api: 127.0.0.1:0\n", "", "", "no fixed port: give --api"},
		{"not host:port", "api: localhost\n", "", "", `api "localhost": want HOST:PORT`},
		{"not YAML", "api: [\n", "", "", "config.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.config != "" {
				if err := os.WriteFile(filepath.Join(dir, configFile), []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f := clientFlags{data: dir, apiURL: tc.flag}
			got, err := f.address()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("%q %v, want %q", got, err, tc.want)
			}
		})
	}
	t.Run("token file flag", func(t *testing.T) {
		_, data := fixture(t)
		tok := filepath.Join(t.TempDir(), "tok")
		if err := os.WriteFile(tok, []byte(cliToken), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCLI(t, "orgs", "--api", readAPI(t, data), "--token-file", tok)
		if code != 0 || !strings.Contains(out, "alpha") {
			t.Errorf("exit %d: %s %s", code, out, errs)
		}
	})
}

func TestClientHelp(t *testing.T) {
	for _, c := range [][]string{
		{"submit"}, {"tasks"}, {"task"}, {"logs"}, {"cancel"}, {"retry"}, {"machines"}, {"orgs"},
		{"ledger"}, {"limit"}, {"limit", "set"}, {"status"}, {"leave"},
	} {
		code, out, _ := runCLI(t, append(c, "--help")...)
		if code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "peer "+strings.Join(c, " ")) {
			t.Errorf("%v --help: exit %d\n%s", c, code, out)
		}
	}
}

func TestShellWords(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"/bin/sh", "-c", "echo hi > out.txt"}, `/bin/sh -c "echo hi > out.txt"`},
		{[]string{"run", "", "a=b", "x'y"}, `run "" a=b "x'y"`},
		{[]string{"a\tb"}, `"a\tb"`},
	} {
		if got := shellWords(tc.argv); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.argv, got, tc.want)
		}
	}
}

// failSecondSubmit lets the first submission through and refuses the
// others, as a daemon that lost its leader between two batches would.
type failSecondSubmit struct {
	*apitest.Backend
	calls *int
}

func (f failSecondSubmit) Submit(ctx context.Context, req api.SubmitRequest) (api.SubmitResponse, error) {
	*f.calls++
	if *f.calls > 1 {
		return api.SubmitResponse{}, api.Errorf(api.CodeUnavailable, "no leader")
	}
	return f.Backend.Submit(ctx, req)
}

// TestSubmitBatches: a job of more tasks than one ledger command carries
// goes in batches, in order; when a later batch fails, the tasks already
// in are reported.
func TestSubmitBatches(t *testing.T) {
	job := filepath.Join(t.TempDir(), "big.yaml")
	src := fmt.Sprintf("template:\n  count: %d\n  argv: [/bin/true]\n  size: 1\n  wall_clock_limit: 1m\n", submitBatch+1)
	if err := os.WriteFile(job, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("all", func(t *testing.T) {
		b, data := fixture(t)
		code, out, errs := runCLI(t, "submit", "--json", job, "--data", data)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var got submitOutput
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		n := submitBatch + 1
		if len(got.TaskIDs) != n || got.TaskIDs[0] != "alpha-4" || got.TaskIDs[n-1] != fmt.Sprint("alpha-", n+3) || got.Tasks[n-1].Name != fmt.Sprint("task-", n-1) {
			t.Errorf("%d IDs, first %s, last %s", len(got.TaskIDs), got.TaskIDs[0], got.TaskIDs[len(got.TaskIDs)-1])
		}
		if o, _ := b.Orgs(context.Background()); o[0].Queued != 1+n {
			t.Errorf("%d queued", o[0].Queued)
		}
	})
	t.Run("second batch fails", func(t *testing.T) {
		calls := 0
		_, data := fixtureWith(t, func(b *apitest.Backend) api.Backend { return failSecondSubmit{b, &calls} })
		code, out, errs := runCLI(t, "submit", job, "--data", data)
		if code != 1 || !strings.Contains(errs, fmt.Sprintf("only the first %d of %d tasks were submitted; resend with --request-id ", submitBatch, submitBatch+1)) ||
			!strings.Contains(errs, ": unavailable: no leader (no answer after 4 attempts") {
			t.Errorf("exit %d: %s", code, errs)
		}
		got := lines(out)
		if got[0] != fmt.Sprintf("submitted job big: %d tasks", submitBatch) || got[len(got)-1] != fmt.Sprintf("alpha-%d task-%d", submitBatch+3, submitBatch-1) {
			t.Errorf("stdout starts %q, ends %q", got[0], got[len(got)-1])
		}
	})
}
