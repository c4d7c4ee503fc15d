package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/internal/peerproc"
)

// peerBin is the `peer` binary TestMain builds once for the whole run:
// every test drives that same binary, as a user would after `make build`.
var peerBin string

// repoRoot is the module root (this package lives in e2e/).
var repoRoot string

func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	repoRoot = filepath.Dir(wd)
	os.Exit(peerproc.Main(m, "e2e", &peerBin))
}

// skipShort skips a test under -short: each of these runs real processes
// for tens of seconds.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test with real peer processes: skipped under -short")
	}
}

// alongside marks one of the longest tests (each a federation of peer
// processes of its own, tens of seconds mostly spent waiting on heartbeat
// timeouts, elections and tasks) to run beside the others so marked
// (t.Parallel, at most -parallel at a time, after the package's other
// tests). They share no directory (t.TempDir), no secret and no port
// (freePort); the package's processes keep less than half a core busy.
func alongside(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// Long deadlines: these bound a hung test, they assert nothing about speed.
const (
	cliTimeout   = 2 * time.Minute
	readyTimeout = 90 * time.Second
	waitTimeout  = 2 * time.Minute
)

// result is one CLI invocation.
type result struct {
	args   []string
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("peer %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// cli runs the peer binary with args to completion.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	return cliEnv(t, nil, args...)
}

func cliEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return cliWith(t, peerBin, env, args...)
}

// cliWith runs the peer binary bin (another build's, for the upgrade test).
func cliWith(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("peer %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("peer %s did not finish within %v", strings.Join(args, " "), cliTimeout)
	}
	return r
}

// mustCLI runs a command that must succeed.
func mustCLI(t *testing.T, args ...string) result {
	t.Helper()
	r := cli(t, args...)
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	return r
}

// cliJSON runs a command that must succeed and decodes its --json output.
func cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	r := mustCLI(t, append(args, "--json")...)
	// Lenient on unknown fields: the API may grow; the tests assert on the
	// documented fields they read.
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("decode the output of peer %s: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
}

// freePort returns a TCP port free on loopback now. The client reads the
// API's address from config.yaml, which must name a fixed port.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := peerproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// waitFor polls cond until it holds; on timeout it fails with cond's last
// description of what it saw.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s; last seen: %s", d, what, seen)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// --- the JSON the CLI prints, as documented (field names spelt out so that
// a rename of the contract fails here). ---

type statusJSON struct {
	Self   string `json:"self"`
	Org    string `json:"org"`
	Leader string `json:"leader"`
	Raft   struct {
		State        string `json:"state"`
		AppliedIndex uint64 `json:"applied_index"`
		StateHash    string `json:"state_hash"`
	} `json:"raft"`
	Peers []struct {
		ID     string   `json:"id"`
		Org    string   `json:"org"`
		Voter  bool     `json:"voter"`
		Leader bool     `json:"leader"`
		Addrs  []string `json:"addrs"`
	} `json:"peers"`
	Orgs []orgJSON `json:"orgs"`
}

type orgJSON struct {
	Name         string   `json:"name"`
	Peer         string   `json:"peer"`
	Machines     int      `json:"machines"`
	QuotaGFLOPS  float64  `json:"quota_gflops"`
	PowerQuotaW  float64  `json:"power_quota_w"`
	LimitW       float64  `json:"limit_w"`
	PIW          float64  `json:"pi_w"`
	AllocGFLOPS  float64  `json:"allocated_gflops"`
	DP           *float64 `json:"dp"`
	Queued       int      `json:"queued"`
	Running      int      `json:"running"`
	Done         int      `json:"done"`
	Failed       int      `json:"failed"`
	Cancelled    int      `json:"cancelled"`
	EnergyJ      float64  `json:"energy_j"`
	OwnerEnergyJ float64  `json:"owner_energy_j"`
}

func (s statusJSON) org(name string) (orgJSON, bool) {
	for _, o := range s.Orgs {
		if o.Name == name {
			return o, true
		}
	}
	return orgJSON{}, false
}

type taskJSON struct {
	ID          string  `json:"id"`
	Org         string  `json:"org"`
	Name        string  `json:"name"`
	State       string  `json:"state"`
	Machine     string  `json:"machine"`
	Attempts    int     `json:"attempts"`
	ExitCode    int     `json:"exit_code"`
	Reason      string  `json:"reason"`
	SizeGFlop   float64 `json:"size_gflop"`
	SubmittedMs int64   `json:"submitted_ms"`
	EndedMs     int64   `json:"ended_ms"`
}

type segmentJSON struct {
	Machine    string  `json:"machine"`
	MachineOrg string  `json:"machine_org"`
	StartMs    int64   `json:"start_ms"`
	EndMs      int64   `json:"end_ms"`
	EnergyJ    float64 `json:"energy_j"`
	Source     string  `json:"source"`
	Outcome    string  `json:"outcome"`
}

// taskDetailJSON is the part of `peer task --json` the tests read.
type taskDetailJSON struct {
	ID          string        `json:"id"`
	Org         string        `json:"org"`
	State       string        `json:"state"`
	Attempts    int           `json:"attempts"`
	Segments    []segmentJSON `json:"segments"`
	OutputFiles []string      `json:"output_files"`
}

type machineJSON struct {
	ID              string  `json:"id"`
	Org             string  `json:"org"`
	GFLOPS          float64 `json:"gflops"`
	BusyW           float64 `json:"busy_w"`
	IdleW           float64 `json:"idle_w"`
	State           string  `json:"state"`
	Task            string  `json:"task"`
	LastHeartbeatMs int64   `json:"last_heartbeat_ms"`
}

type ledgerJSON struct {
	AppliedIndex uint64 `json:"applied_index"`
	StateHash    string `json:"state_hash"`
	Orgs         []struct {
		Org          string  `json:"org"`
		UserJ        float64 `json:"user_j"`
		OwnerSelfJ   float64 `json:"owner_self_j"`
		OwnerOthersJ float64 `json:"owner_others_j"`
		LimitW       float64 `json:"limit_w"`
		PIW          float64 `json:"pi_w"`
	} `json:"orgs"`
}

type submitJSON struct {
	Job     string   `json:"job"`
	TaskIDs []string `json:"task_ids"`
	Tasks   []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"tasks"`
}

// --- organisations and their peer processes ---

// org is one institution: its data directory and, while it runs, its
// `peer run` process.
type org struct {
	t    *testing.T
	name string
	data string
	api  string // HOST:PORT written in config.yaml
	logs string // directory of the run logs
	proc *peerProc
	runs int
	// bin is the binary `peer run` starts ("" = peerBin).
	bin string
}

// initOptions shape an organisation's data directory.
type initOptions struct {
	machines string // machines file content; "" for none
	secret   string // a copy of the federation secret; "" = --new-federation
	// config edits config.yaml after init: key path → value.
	config map[string]string
	// bin runs init and, until changed, the peer ("" = peerBin).
	bin string
}

// fastConfig shortens the timeouts so that a loopback federation reacts
// within seconds: the leader declares a machine lost after 3 s of silence.
var fastConfig = map[string]string{
	"heartbeat.interval":          "500ms",
	"heartbeat.timeout":           "3s",
	"consensus.schedule_interval": "1s",
	"executor.stop_grace":         "2s",
	"files.fetch_timeout":         "15s",
}

// newOrg runs `peer init` for name under root.
func newOrg(t *testing.T, root, name string, o initOptions) *org {
	t.Helper()
	g := &org{
		t:    t,
		name: name,
		data: filepath.Join(root, name),
		api:  net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
		logs: filepath.Join(root, "logs"),
		bin:  o.bin,
	}
	if err := os.MkdirAll(g.logs, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"init", "--org", name, "--data", g.data,
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", g.api}
	if o.machines != "" {
		mf := filepath.Join(root, name+"-machines.yaml")
		if err := os.WriteFile(mf, []byte(o.machines), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--machines", mf)
	}
	if o.secret == "" {
		args = append(args, "--new-federation")
	} else {
		args = append(args, "--secret", o.secret)
	}
	if o.bin != "" {
		if r := cliWith(t, o.bin, nil, args...); r.code != 0 {
			t.Fatalf("%v", r)
		}
	} else {
		mustCLI(t, args...)
	}
	if len(o.config) > 0 {
		editConfig(t, filepath.Join(g.data, "config.yaml"), o.config)
	}
	return g
}

// secret is the organisation's copy of the federation secret.
func (g *org) secret() string { return filepath.Join(g.data, "federation.key") }

// The methods below take the calling (sub)test: a failure belongs to it,
// while the peer process belongs to the test that created the org.

// cli runs a client command against this organisation's peer.
func (g *org) cli(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, append(args, "--data", g.data)...)
}

func (g *org) status(t *testing.T) statusJSON {
	t.Helper()
	var s statusJSON
	cliJSON(t, &s, "status", "--data", g.data)
	return s
}

// invite has g's organisation invite org (peer invite) and returns the
// token, for the joiner's peer run --invitation.
func (g *org) invite(t *testing.T, org string) string {
	t.Helper()
	var inv struct {
		Token string `json:"token"`
	}
	cliJSON(t, &inv, "invite", org, "--data", g.data)
	return inv.Token
}

func (g *org) tasks(t *testing.T, extra ...string) []taskJSON {
	t.Helper()
	var ts []taskJSON
	cliJSON(t, &ts, append([]string{"tasks", "--data", g.data}, extra...)...)
	return ts
}

func (g *org) task(t *testing.T, id string) taskDetailJSON {
	t.Helper()
	var d taskDetailJSON
	cliJSON(t, &d, "task", "--data", g.data, id)
	return d
}

func (g *org) machines(t *testing.T) []machineJSON {
	t.Helper()
	var ms []machineJSON
	cliJSON(t, &ms, "machines", "--data", g.data)
	return ms
}

func (g *org) ledger(t *testing.T) ledgerJSON {
	t.Helper()
	var l ledgerJSON
	cliJSON(t, &l, "ledger", "--data", g.data)
	return l
}

// submit submits a job file and returns its task IDs in the file's order,
// once this peer's own view lists them (see the read-your-writes test).
func (g *org) submit(t *testing.T, jobFile string) []string {
	t.Helper()
	ids := g.submitNoWait(t, jobFile)
	waitFor(t, waitTimeout, g.name+" lists its submitted tasks", func() (bool, string) {
		r := cli(t, "task", "--data", g.data, ids[len(ids)-1])
		return r.code == 0, r.stderr
	})
	return ids
}

func (g *org) submitNoWait(t *testing.T, jobFile string) []string {
	t.Helper()
	var s submitJSON
	cliJSON(t, &s, "submit", "--data", g.data, jobFile)
	if len(s.TaskIDs) == 0 || len(s.TaskIDs) != len(s.Tasks) {
		t.Fatalf("submit %s: %+v", jobFile, s)
	}
	return s.TaskIDs
}

// peerProc is one `peer run` process.
// peerProc is one `peer run` process of an organisation.
type peerProc struct{ *peerproc.Proc }

// start runs `peer run` for the organisation and waits for `ready:`. The
// process is stopped when the test ends, whatever happens.
func (g *org) start(t *testing.T, extra ...string) *peerProc {
	t.Helper()
	p := g.spawn(t, extra...)
	if _, err := p.WaitLine(`(?m)^ready: `, readyTimeout); err != nil {
		t.Fatalf("%s: %v", g.name, err)
	}
	return p
}

// spawn starts `peer run` without waiting for it to be ready. The process
// lives until the test that created the org ends (or is stopped before).
func (g *org) spawn(t *testing.T, extra ...string) *peerProc {
	t.Helper()
	g.runs++
	base := filepath.Join(g.logs, fmt.Sprintf("%s-run%d", g.name, g.runs))
	args := append([]string{"run", "--data", g.data, "--log-level", "info"}, extra...)
	bin := peerBin
	if g.bin != "" {
		bin = g.bin
	}
	pp, err := peerproc.Start(fmt.Sprintf("%s (run %d)", g.name, g.runs), bin, base, args...)
	if err != nil {
		t.Fatalf("start peer run for %s: %v", g.name, err)
	}
	p := &peerProc{pp}
	owner := g.t
	owner.Cleanup(func() {
		_ = p.Stop(15 * time.Second)
		if owner.Failed() {
			owner.Logf("=== %s: peer %s\n--- stdout\n%s--- stderr (last 150 lines)\n%s", p.Name, strings.Join(args, " "), readFile(p.Stdout), tail(readFile(p.Stderr), 150))
		}
	})
	g.proc = p
	return p
}

func readFile(path string) string { return peerproc.ReadFile(path) }

func tail(s string, n int) string { return peerproc.Tail(s, n) }

// bootstrap is the first printed full address: what the others pass to
// `peer run --bootstrap`.
func (p *peerProc) bootstrap(t *testing.T) string {
	t.Helper()
	as := p.Addrs()
	if len(as) == 0 || !strings.Contains(as[0], "/p2p/12D3KooW") {
		t.Fatalf("%s printed no full multiaddr:\n%s", p.Name, readFile(p.Stdout))
	}
	return as[0]
}

// kill9 kills the process with SIGKILL, as a crash, and waits for it.
func (p *peerProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.Kill9(); err != nil {
		t.Fatal(err)
	}
}

// editConfig sets keys ("heartbeat.timeout") of a config.yaml written by
// peer init to YAML values, keeping the rest of the file as it is.
func editConfig(t *testing.T, path string, set map[string]string) {
	t.Helper()
	if err := peerproc.EditConfig(path, set); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// machinesFile offers n process machines prefixed name, each gflops and
// busy watts, allowing /bin/sh only.
func machinesFile(prefix string, n int, gflops, watts float64) string {
	var b strings.Builder
	b.WriteString("machines:\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - name: %s%d\n    gflops: %g\n    busy_watts: %g\n", prefix, i, gflops, watts)
	}
	b.WriteString("policy:\n  allow: [/bin/sh]\n  unsafe_run_as_peer_user: true\n  max_wall_clock: 10m\n  kill_grace: 2s\n")
	return b.String()
}
