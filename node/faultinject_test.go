package node

import (
	"context"
	"errors"
	"github.com/coopgrid/coopgrid/config"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// startFaulty starts tn's peer with fault injection on (clock stepped by
// offset from the start), as `peer run --fault-injection` does.
func startFaulty(t *testing.T, tn *tnode, offset time.Duration, bootstrap ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, Options{
		DataDir: tn.dir, Bootstrap: bootstrap, Invitation: tn.invitationFor(bootstrap), Logger: testLogger(tn.org), ReconcileInterval: 200 * time.Millisecond,
		FaultInjection: true, FaultClockOffset: offset,
		Consensus: func(c *consensus.Config) { c.NoSync = true; c.CheckInvariants = true },
	})
	if err != nil {
		t.Fatalf("start %s: %v", tn.org, err)
	}
	tn.n = n
	if err := n.WaitReady(ctx); err != nil {
		t.Fatalf("%s not ready: %v", tn.org, err)
	}
	t.Cleanup(tn.close)
}

func ptr[T any](v T) *T { return &v }

// TestFaultSurfaceOffByDefault: a peer started without fault injection
// refuses the surface with its stable code, over the backend and over
// HTTP, has no gater, and its state does not change; a clock offset
// without fault injection is refused at start.
func TestFaultSurfaceOffByDefault(t *testing.T) {
	tn := newTNode(t, "f-off", "", simMachine("m1", 10, 100), testConfig("sim"))
	tn.start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := tn.n.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.n.SetFaults(ctx, api.FaultsRequest{ClockOffsetMs: ptr(int64(3_600_000))}); api.CodeOf(err) != api.CodeFaultsDisabled {
		t.Fatalf("SetFaults on a peer without fault injection: %v, want %s", err, api.CodeFaultsDisabled)
	}
	if _, err := tn.n.Faults(ctx); api.CodeOf(err) != api.CodeFaultsDisabled {
		t.Fatalf("Faults: %v", err)
	}
	if err := tn.n.host.SetBlocked(nil); !errors.Is(err, p2p.ErrNoGater) {
		t.Fatalf("the host has a gater without fault injection: %v", err)
	}
	tok, err := tn.n.APIToken()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewServer(tn.n, api.ServerOptions{Token: tok, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	for _, tc := range []struct {
		auth, body string
		status     int
		code       string
	}{
		{auth: "Bearer " + tok, body: `{"clock_offset_ms": 1000}`, status: http.StatusForbidden, code: api.CodeFaultsDisabled},
		{auth: "", body: `{"clock_offset_ms": 1000}`, status: http.StatusUnauthorized, code: api.CodeUnauthorized},
		{auth: "Bearer wrong", body: `{"block_peers": []}`, status: http.StatusUnauthorized, code: api.CodeUnauthorized},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/debug/faults", strings.NewReader(tc.body))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), `"`+tc.code+`"`) {
			t.Fatalf("auth %q: %d %s, want %d %s", tc.auth, resp.StatusCode, b, tc.status, tc.code)
		}
	}
	after, err := tn.n.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.StateHash != before.StateHash || after.AppliedIndex != before.AppliedIndex {
		t.Fatalf("state changed: %d %s → %d %s", before.AppliedIndex, before.StateHash, after.AppliedIndex, after.StateHash)
	}
	tn.close()
	if _, err := Start(ctx, Options{DataDir: tn.dir, FaultClockOffset: time.Hour, Logger: testLogger(tn.org)}); !errors.As(err, new(*config.InputError)) {
		t.Fatalf("--fault-clock-offset without --fault-injection: %v, want an input error", err)
	}
}

// TestFaultClockOffsetStampsCommands: the clock offset moves the time the
// peer stamps on its commands (a task's submit time), both ways, from the
// start and at run time; a refused request changes no fault.
func TestFaultClockOffsetStampsCommands(t *testing.T) {
	tn := newTNode(t, "f-clock", "", simMachine("m1", 10, 100), testConfig("sim"))
	startFaulty(t, tn, 2*time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submitAt := func() int64 {
		t.Helper()
		resp, err := tn.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 1000}}})
		if err != nil {
			t.Fatal(err)
		}
		return tn.task(resp.TaskIDs[0]).SubmittedMs
	}
	// Bounds of an hour's margin: they hold whatever the test's speed.
	if at, real := submitAt(), time.Now().UnixMilli(); at < real+time.Hour.Milliseconds() {
		t.Fatalf("started 2 h ahead: submit stamped %d, real clock %d", at, real)
	}
	st, err := tn.n.SetFaults(ctx, api.FaultsRequest{ClockOffsetMs: ptr(-2 * time.Hour.Milliseconds())})
	if err != nil || st.ClockOffsetMs != -2*time.Hour.Milliseconds() || len(st.BlockPeers) != 0 {
		t.Fatalf("SetFaults: %+v %v", st, err)
	}
	if at, real := submitAt(), time.Now().UnixMilli(); at > real-time.Hour.Milliseconds() {
		t.Fatalf("stepped 2 h back: submit stamped %d, real clock %d", at, real)
	}

	stranger, err := peer.Decode("12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf")
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		req  api.FaultsRequest
	}{
		{"not a peer ID", api.FaultsRequest{BlockPeers: &[]string{stranger.String(), "nope"}, ClockOffsetMs: ptr(int64(0))}},
		{"this peer", api.FaultsRequest{BlockPeers: &[]string{tn.n.ID().String()}}},
		{"offset over a year", api.FaultsRequest{ClockOffsetMs: ptr(int64(api.MaxClockOffsetMs + 1))}},
		{"negative disk delay", api.FaultsRequest{DiskDelayMs: ptr(int64(-1)), ClockOffsetMs: ptr(int64(0))}},
		{"disk delay too long", api.FaultsRequest{DiskDelayMs: ptr(int64(api.MaxDiskDelayMs + 1))}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tn.n.SetFaults(ctx, tc.req); api.CodeOf(err) != api.CodeBadRequest {
				t.Fatalf("%v, want %s", err, api.CodeBadRequest)
			}
			st, err := tn.n.Faults(ctx)
			if err != nil || st.ClockOffsetMs != -2*time.Hour.Milliseconds() || st.DiskDelayMs != 0 || len(st.BlockPeers) != 0 {
				t.Fatalf("a refused request changed the faults: %+v %v", st, err)
			}
		})
	}

	// Blocking and healing through the surface.
	st, err = tn.n.SetFaults(ctx, api.FaultsRequest{BlockPeers: &[]string{stranger.String()}, DiskDelayMs: ptr(int64(5))})
	if err != nil || len(st.BlockPeers) != 1 || st.BlockPeers[0] != stranger.String() || st.DiskDelayMs != 5 || st.ClockOffsetMs != -2*time.Hour.Milliseconds() {
		t.Fatalf("block: %+v %v", st, err)
	}
	submitAt() // commits through the slowed store
	st, err = tn.n.SetFaults(ctx, api.FaultsRequest{BlockPeers: &[]string{}, ClockOffsetMs: ptr(int64(0)), DiskDelayMs: ptr(int64(0))})
	if err != nil || len(st.BlockPeers) != 0 || st.ClockOffsetMs != 0 || st.DiskDelayMs != 0 {
		t.Fatalf("heal: %+v %v", st, err)
	}
}

// TestLostRunEnergyOnOwnersClock: a leader whose clock is an hour ahead
// (or behind) declares a crashed peer's machine lost; the energy booked
// for the run it held is busy power × the run's real length, not × the
// leader's error: the loss is stamped on the owner's clock.
func TestLostRunEnergyOnOwnersClock(t *testing.T) {
	waitsMostly(t)
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			a := newTNode(t, "lc-a", "", "", testConfig("sim"))
			startFaulty(t, a, 0)
			b := newTNode(t, "lc-b", a.secret(), simMachine("m1", 10, 100), testConfig("sim"))
			startFaulty(t, b, 0, a.addr())
			c := newTNode(t, "lc-c", a.secret(), "", testConfig("sim"))
			startFaulty(t, c, 0, a.addr())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			waitFor(t, 20*time.Second, "a leads", func() bool { return a.n.cons.IsLeader() })
			if _, err := a.n.SetFaults(ctx, api.FaultsRequest{ClockOffsetMs: ptr(step.Milliseconds())}); err != nil {
				t.Fatal(err)
			}
			// 10 GFLOPS × a day of work: it runs until b dies.
			resp, err := b.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{SizeMFlop: 10_000 * 86_400}}})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.TaskIDs[0]
			waitFor(t, 20*time.Second, id+" running on lc-b/m1", func() bool {
				tk := a.task(id)
				return tk.State == ledger.TaskRunning && tk.Machine == "lc-b/m1"
			})
			time.Sleep(500 * time.Millisecond) // a few heartbeats of the running task
			b.crash()
			waitFor(t, 30*time.Second, "lc-b/m1 lost", func() bool { return a.machine("lc-b/m1").State == ledger.MachineLost })
			segs := a.task(id).Segments
			if len(segs) == 0 || segs[0].Outcome != ledger.OutcomeLost {
				t.Fatalf("segments %+v", segs)
			}
			// 100 W for ten minutes: far more than the few seconds the run
			// lasted, far less than the leader's hour (360 kJ).
			if mj := segs[0].EnergyMilliJ; mj > 100_000*600 {
				t.Fatalf("lost run booked %d mJ over [%d, %d]: the leader's clock error was credited", mj, segs[0].StartMs, segs[0].EndMs)
			}
			// And not nothing: it ran for a second or more at 100 W.
			if mj := segs[0].EnergyMilliJ; mj == 0 {
				t.Fatalf("lost run booked no energy over [%d, %d]: the leader's clock error erased it", segs[0].StartMs, segs[0].EndMs)
			}
		})
	}
}
