package consensus

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func newPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestMemberSetFollowsTheConfiguration: the set answers from the
// configuration it is given, and a new configuration (a new copy, as Raft
// stores each) is read afresh, so a removed peer is no member at once.
func TestMemberSetFollowsTheConfiguration(t *testing.T) {
	a, b, c := newPeerID(t), newPeerID(t), newPeerID(t)
	server := func(id peer.ID, s raft.ServerSuffrage) raft.Server {
		return raft.Server{ID: raft.ServerID(id.String()), Address: raft.ServerAddress(id.String()), Suffrage: s}
	}
	first := raft.Configuration{Servers: []raft.Server{server(a, raft.Voter), server(b, raft.Nonvoter), {ID: "not-a-peer-id", Suffrage: raft.Voter}}}
	second := raft.Configuration{Servers: []raft.Server{server(a, raft.Voter), server(c, raft.Voter)}}
	var m memberSet
	cases := []struct {
		name   string
		cfg    raft.Configuration
		id     peer.ID
		member bool
		voter  bool
	}{
		{"voter", first, a, true, true},
		{"non-voter", first, b, true, false},
		{"absent", first, c, false, false},
		{"after removal", second, b, false, false},
		{"after joining", second, c, true, true},
		{"first again", first, b, true, false},
		{"empty", raft.Configuration{}, a, false, false},
	}
	for _, tc := range cases {
		s, ok := m.suffrage(tc.cfg, tc.id)
		if ok != tc.member || (ok && (s == raft.Voter) != tc.voter) {
			t.Errorf("%s: suffrage %v, member %t; want member %t, voter %t", tc.name, s, ok, tc.member, tc.voter)
		}
	}
}

// TestRaftKeepsOneCopyPerConfiguration pins what memberSet's cache relies
// on for its speed (not its correctness): hashicorp/raft hands out the same
// stored copy of the latest configuration until a new one is stored. If an
// upgrade of Raft cloned it on every GetConfiguration, the set would be
// rebuilt on every question (a decode per server per Raft RPC) and this
// test says so.
func TestRaftKeepsOneCopyPerConfiguration(t *testing.T) {
	_, trans := raft.NewInmemTransport("")
	cfg := raft.DefaultConfig()
	cfg.LocalID = "a"
	cfg.Logger = hclog.NewNullLogger()
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	servers := raft.Configuration{Servers: []raft.Server{{ID: "a", Address: trans.LocalAddr()}}}
	if err := raft.BootstrapCluster(cfg, store, store, snaps, trans, servers); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(cfg, nil, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	first := r.GetConfiguration().Configuration()
	again := r.GetConfiguration().Configuration()
	if len(first.Servers) != 1 || &first.Servers[0] != &again.Servers[0] {
		t.Fatalf("two reads of one configuration gave different copies (%d servers): memberSet would rebuild on every call", len(first.Servers))
	}
}
