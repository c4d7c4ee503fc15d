package gossip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/ledger"
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
	// previous start's: see node's nextBoot) and Seq (counting from 1 within a
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

// StateViewer reads the local replica of the ledger (*consensus.Node
// implements it).
type StateViewer interface {
	View(fn func(l *ledger.Ledger))
}

// Errors classify why a heartbeat is dropped.
var (
	ErrMalformed    = errors.New("malformed heartbeat")
	ErrUnauthorised = errors.New("unauthorised heartbeat")
	ErrUnknownOrg   = errors.New("heartbeat from an organisation not (yet) in this peer's view")
	// ErrNotMember: the author was removed by a vote of the organisations,
	// or is not in the Raft configuration.
	ErrNotMember = errors.New("heartbeat from a peer that is not a member")
)

// Check decodes and checks a heartbeat signed by author against the local
// view of the ledger: the message's bounds, and that author is the peer
// registered for its organisation. It does not apply the replay guard.
// Refusals wrap ErrMalformed, ErrUnauthorised or ErrUnknownOrg.
func Check(state StateViewer, author peer.ID, data []byte) (*Heartbeat, error) {
	hb, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := authorise(state, author, hb); err != nil {
		return nil, err
	}
	return hb, nil
}

// Decode decodes a heartbeat and checks its bounds, without the ledger:
// all a peer checks of its own heartbeats, which it must be able to
// publish before its ledger knows its organisation (a restarted peer's
// replica holds only its last snapshot until a leader reaches it).
// Refusals wrap ErrMalformed.
func Decode(data []byte) (*Heartbeat, error) {
	if len(data) > MaxHeartbeatBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(data), MaxHeartbeatBytes)
	}
	var hb Heartbeat
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hb); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	if hb.V != heartbeatVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMalformed, hb.V, heartbeatVersion)
	}
	if !validName(hb.Org) || hb.AtMs <= 0 || hb.AtMs > ledger.MaxTimeMs || hb.Boot <= 0 || hb.Boot > ledger.MaxTimeMs ||
		hb.Seq == 0 || hb.Seq > 1<<62 || hb.Load1 < 0 || hb.Load1 > 1e6 ||
		hb.HostPowerMilliW < 0 || hb.HostPowerMilliW > ledger.MaxLimitMilliW {
		return nil, fmt.Errorf("%w: bad org, time, sequence, load or power", ErrMalformed)
	}
	if len(hb.Machines) > ledger.MaxMachinesPerCommand {
		return nil, fmt.Errorf("%w: %d machines", ErrMalformed, len(hb.Machines))
	}
	if len(hb.Addrs) > maxHeartbeatAddrs {
		return nil, fmt.Errorf("%w: %d addresses", ErrMalformed, len(hb.Addrs))
	}
	for _, a := range hb.Addrs {
		if _, err := ma.NewMultiaddr(a); err != nil || len(a) > 256 {
			return nil, fmt.Errorf("%w: address %q", ErrMalformed, a)
		}
	}
	names := map[string]bool{}
	for _, m := range hb.Machines {
		if !validName(m.Name) || names[m.Name] || m.PowerMilliW < 0 || m.PowerMilliW > ledger.MaxMachineMilliW || len(m.Task) > ledger.MaxTaskIDLen {
			return nil, fmt.Errorf("%w: machine entry %q", ErrMalformed, m.Name)
		}
		names[m.Name] = true
	}
	return &hb, nil
}

// authorise checks hb's author against the local view of the ledger: the
// peer registered for its organisation, not removed.
func authorise(state StateViewer, author peer.ID, hb *Heartbeat) error {
	var registered string
	var removed bool
	state.View(func(l *ledger.Ledger) { registered, removed, _ = l.OrgPeer(hb.Org) })
	switch {
	case removed && registered == author.String():
		return fmt.Errorf("%w: %q was removed from the federation", ErrNotMember, hb.Org)
	case registered == "":
		return fmt.Errorf("%w: %q", ErrUnknownOrg, hb.Org)
	case registered != author.String():
		return fmt.Errorf("%w: signed by %s, but %q is registered to %s", ErrUnauthorised, author, hb.Org, registered)
	}
	return nil
}

// validName is the ledger's rule for organisation and machine names.
func validName(s string) bool {
	if s == "" || len(s) > ledger.MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !alnum || !alnum && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
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
