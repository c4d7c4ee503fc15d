package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/internal/peerproc"
)

// Deadlines that bound a hung start; they measure nothing.
const (
	callTimeout = 30 * time.Second
	// formTimeout bounds the wait for agreement once every peer printed
	// ready (formTimeoutPerPeer more per peer: a quiet host forms 100
	// peers in about a minute, a loaded one much later).
	formTimeout        = 10 * time.Minute
	formTimeoutPerPeer = 3 * time.Second
	// readyTimeout bounds one start of a joiner: its join (the peer tries
	// again for a minute, node.Options.JoinTimeout) and its catch-up.
	readyTimeout = 4 * time.Minute
	// initWorkers bounds the `peer init` run at once (not timed).
	initWorkers = 4
	// defaultInFlight is how many joiners may be started and not ready
	// yet at once, once the voters have joined (--join-in-flight).
	defaultInFlight = 8
)

// peerProc is one organisation's data directory and `peer run` process.
type peerProc struct {
	org    string
	data   string
	client *api.Client
	proc   *peerproc.Proc
	id     string // libp2p peer ID, once formed
	// readyCPU is the process's CPU time when its ready line was seen:
	// what its own start, join, catch-up and registration cost.
	readyCPU time.Duration
}

// federation is the N peers; the first creates the federation.
type federation struct {
	bin      string
	root     string
	n        int
	set      map[string]string
	logLevel string
	log      *slog.Logger
	// inFlight bounds the joiners started and not ready yet.
	inFlight int
	peers    []*peerProc
	// retries counts the joiners started again (join).
	retries atomic.Int64
	// portMu guards given, the API ports apiPort returned.
	portMu sync.Mutex
	given  map[int]bool
}

// apiPort returns a loopback port free now (peerproc.FreePort: below the
// kernel's ephemeral range, so that a port found free at `peer init` stays
// free until `peer run` binds it; at 100 peers the connections' own local
// ports took two API ports of that range between the two: docs/BENCHMARKS.md,
// "Forming 100 peers, session 10"), distinct from those it returned before.
func (f *federation) apiPort() (int, error) {
	f.portMu.Lock()
	defer f.portMu.Unlock()
	for range 100 {
		p, err := peerproc.FreePort()
		if err != nil {
			return 0, err
		}
		if !f.given[p] {
			f.given[p] = true
			return p, nil
		}
	}
	return 0, errors.New("no API port free that was not given already")
}

// machinesFile offers one simulated machine, with its figures given so
// that init measures nothing.
const machinesFile = `machines:
  - name: m1
    gflops: 10
    busy_watts: 100
    idle_watts: 20
policy:
  allow: [/bin/true]
  unsafe_run_as_peer_user: true
  max_wall_clock: 10m
`

// start initialises every data directory (not timed), then starts the
// first peer, has it invite the others, starts them all at once and waits
// until the federation has formed. It returns the time from the first
// `peer run` to formation.
func (f *federation) start(ctx context.Context) (time.Duration, error) {
	if err := os.MkdirAll(filepath.Join(f.root, "logs"), 0o755); err != nil {
		return 0, err
	}
	mf := filepath.Join(f.root, "machines.yaml")
	if err := os.WriteFile(mf, []byte(machinesFile), 0o644); err != nil {
		return 0, err
	}
	f.peers = make([]*peerProc, f.n)
	for i := range f.peers {
		f.peers[i] = &peerProc{org: fmt.Sprintf("org-%03d", i+1), data: filepath.Join(f.root, fmt.Sprintf("org-%03d", i+1))}
	}
	if err := f.initPeer(ctx, f.peers[0], "--new-federation"); err != nil {
		return 0, err
	}
	secret := filepath.Join(f.peers[0].data, "federation.key")
	if err := f.parallel(f.peers[1:], initWorkers, func(p *peerProc) error {
		return f.initPeer(ctx, p, "--secret", secret)
	}); err != nil {
		return 0, err
	}
	f.log.Info("initialised", "peers", f.n)

	t0 := time.Now()
	first := f.peers[0]
	var err error
	if first.proc, err = peerproc.Start(first.org, f.bin, filepath.Join(f.root, "logs", first.org), "run", "--data", first.data, "--log-level", f.logLevel); err != nil {
		return 0, err
	}
	if _, err := first.proc.WaitLine(`(?m)^ready: `, callTimeout); err != nil {
		return 0, err
	}
	first.noteReady()
	addrs := first.proc.Addrs()
	if len(addrs) == 0 {
		return 0, fmt.Errorf("%s printed no full multiaddr", first.org)
	}
	// The voters join one at a time, then the others with at most
	// inFlight started and not ready at any moment, the next started as
	// soon as one is ready: institutions do not all join in the same
	// second, and a stampede of starting processes on a small host delays
	// the voters' answers past the leader's lease (docs/BENCHMARKS.md).
	// The leader paces the admissions itself (consensus/joinpace.go).
	rest := f.peers[1:]
	voters := rest[:min(wantVoters(f.n)-1, len(rest))]
	join := func(p *peerProc) error { return f.join(ctx, p, addrs[0]) }
	if err := f.parallel(voters, 1, join); err != nil {
		return 0, err
	}
	if err := f.parallel(rest[len(voters):], max(f.inFlight, 1), join); err != nil {
		return 0, err
	}
	if err := f.waitFormed(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// maxJoinAttempts bounds the starts of one joiner: `peer run` exits when
// its join fails (the leader lost its lease while committing it, on a
// loaded host), and an operator would run it again.
const maxJoinAttempts = 6

// join starts p's `peer run` with a fresh invitation until it prints
// ready, up to maxJoinAttempts times; each start has its own log files.
func (f *federation) join(ctx context.Context, p *peerProc, boot string) error {
	var last error
	for attempt := 1; attempt <= maxJoinAttempts; attempt++ {
		if attempt > 1 {
			// A fresh data directory: what the failed start left (a
			// half-done join) is not what is measured.
			f.retries.Add(1)
			f.log.Warn("join failed; starting the peer again from a new data directory", "org", p.org, "attempt", attempt, "err", last)
			// And a new organisation: the failed join may have bound the
			// old one to the old identity.
			if err := os.RemoveAll(p.data); err != nil {
				return err
			}
			p.org = fmt.Sprintf("%s-r%d", strings.SplitN(p.org, "-r", 2)[0], attempt)
			p.data = filepath.Join(f.root, p.org)
			if err := f.initPeer(ctx, p, "--secret", filepath.Join(f.peers[0].data, "federation.key")); err != nil {
				return err
			}
		}
		ictx, cancel := context.WithTimeout(ctx, callTimeout)
		inv, err := f.peers[0].client.Invite(ictx, api.InviteRequest{Org: p.org})
		cancel()
		if err != nil {
			return fmt.Errorf("invite %s: %w", p.org, err)
		}
		base := filepath.Join(f.root, "logs", p.org)
		run := []string{"run", "--data", p.data, "--log-level", f.logLevel, "--bootstrap", boot, "--invitation", inv.Token}
		if p.proc, err = peerproc.Start(p.org, f.bin, base, run...); err != nil {
			return err
		}
		if _, last = p.proc.WaitLine(`(?m)^ready: `, readyTimeout); last == nil {
			p.noteReady()
			return nil
		}
		if !p.proc.Exited() {
			return last
		}
	}
	return last
}

// initPeer runs `peer init` for p on a loopback port of its own and
// applies the --set keys.
func (f *federation) initPeer(ctx context.Context, p *peerProc, extra ...string) error {
	machines := filepath.Join(f.root, "machines.yaml")
	port, err := f.apiPort()
	if err != nil {
		return err
	}
	apiAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{"init", "--org", p.org, "--data", p.data, "--listen", "/ip4/127.0.0.1/tcp/0", "--api", apiAddr, "--machines", machines}, extra...)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(cctx, f.bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("peer %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if len(f.set) > 0 {
		if err := peerproc.EditConfig(filepath.Join(p.data, "config.yaml"), f.set); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(filepath.Join(p.data, api.TokenFile))
	if err != nil {
		return fmt.Errorf("read %s's API token: %w", p.org, err)
	}
	p.client = api.NewClient(apiAddr, strings.TrimSpace(string(tok)), &http.Client{Timeout: callTimeout})
	return nil
}

// parallel runs fn on every peer, at most workers at once, and returns
// the first error.
func (f *federation) parallel(ps []*peerProc, workers int, fn func(*peerProc) error) error {
	sem := make(chan struct{}, workers)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, p := range ps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(p); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// waitFormed waits until every peer sees N members, N organisations (at
// least) and
// the same leader, and the leader sees min(N, 5) voters. Peers are asked
// in order and a round stops at the first that disagrees, so that the
// polling itself stays cheap; a peer that exits fails the wait.
func (f *federation) waitFormed(ctx context.Context) error {
	wait := formTimeout + time.Duration(f.n)*formTimeoutPerPeer
	deadline := time.Now().Add(wait)
	seen := ""
	for {
		ok, why, err := f.formedRound(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if why != seen {
			f.log.Info("forming", "seen", why)
			seen = why
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not formed after %v; last seen: %s", wait, why)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// wantVoters is the voters a formed federation of n has (consensus's
// default MaxVoters).
func wantVoters(n int) int { return min(n, 5) }

func (f *federation) formedRound(ctx context.Context) (bool, string, error) {
	leader := ""
	for _, p := range f.peers {
		if p.proc.Exited() {
			return false, "", fmt.Errorf("%s exited: %v\n%s", p.org, p.proc.Err(), peerproc.Tail(peerproc.ReadFile(p.proc.Stderr), 20))
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		s, err := p.client.Status(cctx)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", p.org, err), nil
		}
		voters := 0
		for _, pv := range s.Peers {
			if pv.Voter {
				voters++
			}
		}
		// At least: a join retried from a new data directory may leave
		// the failed attempt's peer a member.
		if len(s.Peers) < f.n || len(s.Orgs) < f.n || s.Leader == "" {
			return false, fmt.Sprintf("%s: %d members, %d orgs, leader %q", p.org, len(s.Peers), len(s.Orgs), s.Leader), nil
		}
		if leader != "" && s.Leader != leader {
			return false, fmt.Sprintf("leaders %s and %s", leader, s.Leader), nil
		}
		if s.Leader == s.Self && voters != wantVoters(f.n) {
			return false, fmt.Sprintf("leader %s: %d voters", p.org, voters), nil
		}
		leader = s.Leader
		p.id = s.Self
	}
	return true, "", nil
}

// roles asks peer from for the leader and the voters.
func (f *federation) roles(ctx context.Context, from *peerProc) (leader *peerProc, voters map[string]bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	s, err := from.client.Status(cctx)
	if err != nil {
		return nil, nil, err
	}
	voters = map[string]bool{}
	for _, pv := range s.Peers {
		voters[pv.ID] = pv.Voter
	}
	for _, p := range f.peers {
		if p.id == s.Leader {
			leader = p
		}
	}
	if leader == nil {
		return nil, nil, fmt.Errorf("%s names leader %q, none of the peers", from.org, s.Leader)
	}
	return leader, voters, nil
}

// stop ends every peer by pid: SIGTERM, SIGKILL after a grace.
func (f *federation) stop() {
	var wg sync.WaitGroup
	for _, p := range f.peers {
		if p == nil || p.proc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.proc.Stop(20 * time.Second); err != nil && !p.proc.Exited() {
				f.log.Warn("stop peer", "org", p.org, "err", err)
			}
		}()
	}
	wg.Wait()
}

// noteReady records p's CPU time at its ready line.
func (p *peerProc) noteReady() {
	if st, err := readProcStat(p.proc.Cmd.Process.Pid); err == nil {
		p.readyCPU = st.cpu
	}
}

// formationCost splits the CPU time every running peer used until now
// (formation) into what each spent until its own ready line (its start,
// join, catch-up and registration) and what it spent after, as a member
// while the others joined: the first peer (the leader while forming) and
// the voters, then the others. Per joiner, the second part is the
// members' work for each new member (gossip, connections, configuration
// entries); it grows with N if that work does.
type formationCost struct {
	Total, Own, FirstAfter, VotersAfter, OthersAfter time.Duration
}

func (f *federation) formationCost() formationCost {
	var c formationCost
	nv := wantVoters(f.n)
	for i, p := range f.peers {
		if p.proc == nil || p.proc.Exited() {
			continue
		}
		st, err := readProcStat(p.proc.Cmd.Process.Pid)
		if err != nil {
			continue
		}
		c.Total += st.cpu
		c.Own += p.readyCPU
		after := st.cpu - p.readyCPU
		switch {
		case i == 0:
			c.FirstAfter += after
		case i < nv:
			c.VotersAfter += after
		default:
			c.OthersAfter += after
		}
	}
	return c
}

// log writes the split, per joiner.
func (c formationCost) log(log *slog.Logger, n int) {
	j := float64(max(n-1, 1))
	log.Info("formation cost (CPU-s)", "all_peers", c.Total.Seconds(), "per_joiner", c.Total.Seconds()/j,
		"own_until_ready_per_joiner", c.Own.Seconds()/j,
		"members_after_ready_per_joiner", (c.FirstAfter+c.VotersAfter+c.OthersAfter).Seconds()/j,
		"first_after_ready", c.FirstAfter.Seconds(), "voters_after_ready", c.VotersAfter.Seconds(), "others_after_ready", c.OthersAfter.Seconds())
}

// cpuSeconds is the CPU time every running peer process has used so far
// (what forming cost, when read at formation).
func (f *federation) cpuSeconds() float64 {
	var sum time.Duration
	for _, p := range f.peers {
		if p.proc == nil || p.proc.Exited() {
			continue
		}
		if st, err := readProcStat(p.proc.Cmd.Process.Pid); err == nil {
			sum += st.cpu
		}
	}
	return sum.Seconds()
}
