package gossip

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// fuzzNameRE restates the organisation and machine name rule independently
// of validName, so that the fuzz target checks the validator rather than
// itself.
var fuzzNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// FuzzHeartbeat feeds arbitrary bytes, signed either by the peer registered
// for the organisation or by a stranger, to the heartbeat decoder and
// validator, against a real ledger where the organisation is registered. It must never panic; every refusal is one of the
// three classified errors; and every accepted message satisfies every bound
// the rest of the node relies on, is signed by its organisation's peer, and
// survives a re-encoding unchanged.
func FuzzHeartbeat(f *testing.F) {
	self := newPeerID(f)
	view := newLedgerView(f, map[string]peer.ID{"fz": self})
	enc := func(hb Heartbeat) []byte { return encode(f, hb) }
	good := Heartbeat{V: 1, Org: "fz", AtMs: 1_700_000_000_000, Boot: 1_700_000_000_000, Seq: 1, Load1: 0.5,
		HostPowerMilliW: 42_000, Machines: []MachineTelemetry{{Name: "m1", Task: "fz-1", PowerMilliW: 100_000}},
		Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}}
	f.Add(enc(good), true)
	f.Add(enc(good), false)
	f.Add(enc(Heartbeat{V: 1, Org: "fz", AtMs: 1, Boot: 1, Seq: 1}), true)
	f.Add(enc(Heartbeat{V: 2, Org: "fz", AtMs: 1, Boot: 1, Seq: 1}), true)
	f.Add(enc(Heartbeat{V: 1, Org: "nobody", AtMs: 1, Boot: 1, Seq: 1}), true)
	f.Add(enc(Heartbeat{V: 1, Org: "fz", AtMs: 1, Boot: 1, Seq: 1, Machines: []MachineTelemetry{{Name: "m1"}, {Name: "m1"}}}), true)
	f.Add([]byte(`{"v":1,"org":"fz","at_ms":1,"boot":1,"seq":1,"load1":1e308,"machines":[]}`), true)
	f.Add([]byte(`{"v":1,"org":"fz","at_ms":1,"boot":1,"seq":18446744073709551615,"machines":null}`), true)
	f.Add([]byte(`{"v":1,"org":"fz","at_ms":1,"boot":1,"seq":1,"machines":[{"name":"m1","power_mw":-1}]}`), true)
	f.Add([]byte(`{"v":1,"org":"fz","at_ms":1,"boot":1,"seq":1,"addrs":["/ip4/1.2.3.4/tcp/1"]} {}`), true)
	f.Add([]byte(`{"v":1,"org":"fz","at_ms":1,"x":1}`), true)
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`), true)
	f.Add([]byte(`{"v":1.5}`), true)
	f.Add([]byte(``), true)
	f.Fuzz(func(t *testing.T, data []byte, bySelf bool) {
		author := stranger
		if bySelf {
			author = self
		}
		hb, err := Check(view, author, data)
		if err != nil {
			if hb != nil {
				t.Fatal("a refused heartbeat came with a value")
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnauthorised) && !errors.Is(err, ErrUnknownOrg) {
				t.Fatalf("unclassified refusal: %v", err)
			}
			return
		}
		if len(data) > MaxHeartbeatBytes {
			t.Fatalf("accepted %d bytes", len(data))
		}
		if author != self || hb.Org != "fz" {
			t.Fatalf("accepted org %q signed by %s", hb.Org, author)
		}
		name := func(s string) bool { return len(s) <= ledger.MaxNameLen && fuzzNameRE.MatchString(s) }
		switch {
		case hb.V != heartbeatVersion:
			t.Fatalf("version %d", hb.V)
		case hb.AtMs <= 0 || hb.AtMs > ledger.MaxTimeMs, hb.Boot <= 0 || hb.Boot > ledger.MaxTimeMs:
			t.Fatalf("time %d boot %d", hb.AtMs, hb.Boot)
		case hb.Seq == 0 || hb.Seq > 1<<62:
			// Seq is stored as int64 by the replay guard.
			t.Fatalf("seq %d", hb.Seq)
		case math.IsNaN(hb.Load1) || hb.Load1 < 0 || hb.Load1 > 1e6:
			t.Fatalf("load %v", hb.Load1)
		case hb.HostPowerMilliW < 0 || hb.HostPowerMilliW > ledger.MaxLimitMilliW:
			t.Fatalf("host power %d", hb.HostPowerMilliW)
		case len(hb.Machines) > ledger.MaxMachinesPerCommand, len(hb.Addrs) > maxHeartbeatAddrs:
			t.Fatalf("%d machines, %d addresses", len(hb.Machines), len(hb.Addrs))
		}
		seen := map[string]bool{}
		for _, m := range hb.Machines {
			if !name(m.Name) || seen[m.Name] || m.PowerMilliW < 0 || m.PowerMilliW > ledger.MaxMachineMilliW || len(m.Task) > ledger.MaxTaskIDLen {
				t.Fatalf("machine entry %+v", m)
			}
			seen[m.Name] = true
			// The ID the tracker builds stays one org/machine pair.
			if id := hb.Org + "/" + m.Name; strings.Count(id, "/") != 1 {
				t.Fatalf("machine ID %q", id)
			}
		}
		for _, a := range hb.Addrs {
			if _, err := ma.NewMultiaddr(a); err != nil || len(a) > 256 {
				t.Fatalf("address %q: %v", a, err)
			}
		}
		// What was accepted re-encodes to a message that is accepted as the
		// same heartbeat.
		// (Compared as encodings: an empty list and a missing one are the
		// same message.)
		b, err := json.Marshal(hb)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := Check(view, author, b)
		if err != nil {
			t.Fatalf("re-encoded heartbeat refused: %v", err)
		}
		if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoded heartbeat changed:\n%s\n%s", b, b2)
		}
	})
}
