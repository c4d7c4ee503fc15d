package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// TopicHeartbeat is the gossipsub topic of machine heartbeats and
// telemetry. Telemetry never decides anything by itself: the leader turns a
// silence longer than the timeout into a MachineLost command, and the
// decisions come from the log.
const TopicHeartbeat = "/coopgrid/heartbeat/1.0.0"

// MaxHeartbeatBytes bounds one heartbeat message.
const MaxHeartbeatBytes = 16 << 10

// heartbeatVersion is the message version this peer reads and writes.
const heartbeatVersion = 1

// Heartbeat is one gossip message: the sending peer's organisation and the
// state of each of its machines. The author (the libp2p key that signed
// the message) must be the peer registered for Org.
type Heartbeat struct {
	V    int    `json:"v"`
	Org  string `json:"org"`
	AtMs int64  `json:"at_ms"`
	// Boot (the sender's start time, unix ms, never at or below its
	// previous start's: see nextBoot) and Seq (counting from 1 within a
	// boot) order one sender's messages for the replay guard without
	// trusting its clock to move forward while it runs.
	Boot int64  `json:"boot"`
	Seq  uint64 `json:"seq"`
	// Load1 is the sending host's one-minute load average.
	Load1 float64 `json:"load1"`
	// HostPowerMilliW is the sending host's draw measured by RAPL over the
	// executor's last sampling interval; 0 when RAPL is not readable there
	// (then only the machines' declared estimates below exist). It is the
	// host's: a peer declaring several machines cannot split it.
	HostPowerMilliW int64              `json:"host_power_mw,omitempty"`
	Machines        []MachineTelemetry `json:"machines"`
	// Addrs are the sender's listen addresses: every member learns how to
	// reach every other (for the file protocols) even if they never met.
	Addrs []string `json:"addrs,omitempty"`
}

// maxHeartbeatAddrs bounds the addresses a heartbeat carries.
const maxHeartbeatAddrs = 16

// MachineTelemetry is one machine's part of a heartbeat.
type MachineTelemetry struct {
	Name string `json:"name"`
	// Task is the task running there, "" when idle.
	Task string `json:"task,omitempty"`
	// PowerMilliW is the machine's draw as the peer estimates it: its
	// declared busy power while a task runs, its idle power otherwise.
	PowerMilliW int64 `json:"power_mw"`
}

// tracker remembers, in memory, the heartbeats seen: when each machine was
// last heard of (local clock, for the leader's timeout) and the latest
// telemetry, plus the last message time of each author (replay guard).
type tracker struct {
	mu   sync.Mutex
	seen map[string]time.Time // machine ID → local time
	atMs map[string]int64     // machine ID → sender's time, the latest
	// lastAt is the sender's time of the heartbeat received at seen (not
	// the largest seen): with seen, it maps the local clock to the
	// sender's (ownerClockMs).
	lastAt map[string]int64
	tele   map[string]MachineTelemetry
	last   map[peer.ID][2]int64 // author → last accepted (Boot, Seq)
	loads  map[string]float64
}

func newTracker() *tracker {
	return &tracker{
		seen: map[string]time.Time{}, atMs: map[string]int64{}, lastAt: map[string]int64{}, tele: map[string]MachineTelemetry{},
		last: map[peer.ID][2]int64{}, loads: map[string]float64{},
	}
}

func (t *tracker) observe(hb *Heartbeat, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loads[hb.Org] = hb.Load1
	for _, m := range hb.Machines {
		id := hb.Org + "/" + m.Name
		t.seen[id] = now
		t.atMs[id] = max(t.atMs[id], hb.AtMs)
		t.lastAt[id] = hb.AtMs
		t.tele[id] = m
	}
}

// lastHeartbeatMs is the sender's time of the last heartbeat of machine.
func (t *tracker) lastHeartbeatMs(id string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.atMs[id]
}

// LastSeen is the local time machine id was last heard of (leader.Liveness).
func (t *tracker) LastSeen(id string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.seen[id]
	return at, ok
}

// OwnerClockMs estimates the wall clock of machine id's peer at local time
// now (leader.Liveness).
func (t *tracker) OwnerClockMs(id string, now time.Time) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ownerClockMsLocked(id, now)
}

// ownerClockMsLocked estimates the wall clock of machine id's peer at
// local time now: the sender's stamp of its last heartbeat plus the
// (monotonic) time since it arrived. ok is false when no heartbeat of id
// was received. The caller holds t.mu.
func (t *tracker) ownerClockMsLocked(id string, now time.Time) (ms int64, ok bool) {
	seen, ok := t.seen[id]
	if !ok {
		return 0, false
	}
	return t.lastAt[id] + now.Sub(seen).Milliseconds(), true
}

// accept applies the replay guard: a message from author that is not
// after the last one accepted, in (Boot, Seq) order, is dropped.
func (t *tracker) accept(author peer.ID, boot int64, seq uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, ok := t.last[author]
	if ok && (boot < last[0] || boot == last[0] && int64(seq) <= last[1]) {
		return false
	}
	t.last[author] = [2]int64{boot, int64(seq)}
	return true
}

// errHeartbeat* classify why a heartbeat is dropped.
var (
	errHeartbeatMalformed    = errors.New("malformed heartbeat")
	errHeartbeatUnauthorised = errors.New("unauthorised heartbeat")
	errHeartbeatUnknown      = errors.New("heartbeat from an organisation not (yet) in this peer's view")
)

// checkHeartbeat decodes and checks a heartbeat signed by author against
// the local view of the ledger. It does not apply the replay guard.
func (n *Node) checkHeartbeat(author peer.ID, data []byte) (*Heartbeat, error) {
	if len(data) > MaxHeartbeatBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", errHeartbeatMalformed, len(data), MaxHeartbeatBytes)
	}
	var hb Heartbeat
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hb); err != nil {
		return nil, fmt.Errorf("%w: %v", errHeartbeatMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data", errHeartbeatMalformed)
	}
	if hb.V != heartbeatVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errHeartbeatMalformed, hb.V, heartbeatVersion)
	}
	if !validName(hb.Org) || hb.AtMs <= 0 || hb.AtMs > ledger.MaxTimeMs || hb.Boot <= 0 || hb.Boot > ledger.MaxTimeMs ||
		hb.Seq == 0 || hb.Seq > 1<<62 || hb.Load1 < 0 || hb.Load1 > 1e6 ||
		hb.HostPowerMilliW < 0 || hb.HostPowerMilliW > ledger.MaxLimitMilliW {
		return nil, fmt.Errorf("%w: bad org, time, sequence, load or power", errHeartbeatMalformed)
	}
	if len(hb.Machines) > ledger.MaxMachinesPerCommand {
		return nil, fmt.Errorf("%w: %d machines", errHeartbeatMalformed, len(hb.Machines))
	}
	if len(hb.Addrs) > maxHeartbeatAddrs {
		return nil, fmt.Errorf("%w: %d addresses", errHeartbeatMalformed, len(hb.Addrs))
	}
	for _, a := range hb.Addrs {
		if _, err := ma.NewMultiaddr(a); err != nil || len(a) > 256 {
			return nil, fmt.Errorf("%w: address %q", errHeartbeatMalformed, a)
		}
	}
	names := map[string]bool{}
	for _, m := range hb.Machines {
		if !validName(m.Name) || names[m.Name] || m.PowerMilliW < 0 || m.PowerMilliW > ledger.MaxMachineMilliW || len(m.Task) > ledger.MaxTaskIDLen {
			return nil, fmt.Errorf("%w: machine entry %q", errHeartbeatMalformed, m.Name)
		}
		names[m.Name] = true
	}
	var registered string
	n.cons.View(func(l *ledger.Ledger) {
		if o, ok := l.Org(hb.Org); ok {
			registered = o.Peer
		}
	})
	switch {
	case registered == "":
		return nil, fmt.Errorf("%w: %q", errHeartbeatUnknown, hb.Org)
	case registered != author.String():
		return nil, fmt.Errorf("%w: signed by %s, but %q is registered to %s", errHeartbeatUnauthorised, author, hb.Org, registered)
	}
	return &hb, nil
}

// validateHeartbeat is the topic validator: malformed, oversized and
// unauthorised messages are rejected (and count against the forwarding
// peer in gossipsub); messages from an organisation this peer does not
// know yet, and replays, are ignored.
func (n *Node) validateHeartbeat(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	hb, err := n.checkHeartbeat(msg.GetFrom(), msg.GetData())
	switch {
	case errors.Is(err, errHeartbeatUnknown):
		return pubsub.ValidationIgnore
	case err != nil:
		n.log.Debug("heartbeat rejected", "from", msg.GetFrom(), "err", err)
		return pubsub.ValidationReject
	}
	if !n.hb.accept(msg.GetFrom(), hb.Boot, hb.Seq) {
		return pubsub.ValidationIgnore
	}
	msg.ValidatorData = hb
	return pubsub.ValidationAccept
}

func (n *Node) startGossip() error {
	ps, err := pubsub.NewGossipSub(n.ctx, n.host, pubsub.WithMaxMessageSize(MaxHeartbeatBytes+4096))
	if err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	n.ps = ps
	if err := ps.RegisterTopicValidator(TopicHeartbeat, n.validateHeartbeat); err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	if n.topic, err = ps.Join(TopicHeartbeat); err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	if n.psSub, err = n.topic.Subscribe(); err != nil {
		return fmt.Errorf("start gossip: %w", err)
	}
	return nil
}

// consumeHeartbeats records every accepted heartbeat.
func (n *Node) consumeHeartbeats() {
	defer n.wg.Done()
	for {
		msg, err := n.psSub.Next(n.ctx)
		if err != nil {
			return
		}
		hb, ok := msg.ValidatorData.(*Heartbeat)
		if !ok {
			continue
		}
		n.hb.observe(hb, time.Now())
		if author := msg.GetFrom(); author != n.self && len(hb.Addrs) > 0 {
			var addrs []ma.Multiaddr
			for _, a := range hb.Addrs {
				if m, err := ma.NewMultiaddr(a); err == nil {
					addrs = append(addrs, m)
				}
			}
			if err := n.host.Remember(peer.AddrInfo{ID: author, Addrs: addrs}); err != nil {
				n.log.Debug("remember peer addresses", "peer", author, "err", err)
			}
		}
	}
}

// publishHeartbeats sends this peer's heartbeat every interval and brings
// back up the machines the ledger holds as lost (after a restart, or after
// the leader lost sight of this peer).
func (n *Node) publishHeartbeats() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Heartbeat.Interval)
	defer t.Stop()
	for {
		// A peer without machines sends heartbeats too: they carry its
		// addresses.
		if !n.crashed.Load() && !n.closing.Load() {
			n.publishOnce()
			if len(n.machines) > 0 {
				ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Heartbeat.Timeout)
				n.bringUp(ctx)
				cancel()
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) publishOnce() {
	running := map[string]string{}
	if n.br != nil {
		running = n.br.runningByMachine()
	}
	hb := Heartbeat{V: heartbeatVersion, Org: n.org, AtMs: n.now().UnixMilli(), Boot: n.boot, Seq: n.hbSeq.Add(1), Load1: load1()}
	if m, ok := n.exec.(interface{ MeasuredPowerMilliW() (int64, bool) }); ok {
		if mw, ok := m.MeasuredPowerMilliW(); ok {
			hb.HostPowerMilliW = mw
		}
	}
	for _, a := range n.host.Addrs() {
		if len(hb.Addrs) < maxHeartbeatAddrs {
			hb.Addrs = append(hb.Addrs, a.String())
		}
	}
	for _, name := range n.machineNames() {
		m := n.machines[name]
		mt := MachineTelemetry{Name: name, PowerMilliW: m.IdleMilliW()}
		if task := running[name]; task != "" {
			mt.Task, mt.PowerMilliW = task, m.BusyMilliW()
		}
		hb.Machines = append(hb.Machines, mt)
	}
	data, err := json.Marshal(hb)
	if err != nil {
		n.log.Warn("heartbeat encode", "err", err)
		return
	}
	// Recorded directly too: this peer's own machines must not look silent
	// to itself if the mesh is slow to deliver its own messages.
	n.hb.observe(&hb, time.Now())
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Heartbeat.Interval)
	defer cancel()
	if err := n.topic.Publish(ctx, data); err != nil && n.ctx.Err() == nil {
		n.log.Debug("heartbeat publish", "err", err)
	}
}

// load1 reads the one-minute load average (0 if unreadable).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	x, err := strconv.ParseFloat(f[0], 64)
	if err != nil || x < 0 {
		return 0
	}
	return x
}
