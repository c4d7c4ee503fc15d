package leader

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestAnnouncedVersion(t *testing.T) {
	for _, tc := range []struct {
		agent string
		want  int
	}{
		{UserAgent("v1.2.0"), ledger.MaxCommandVersion()},
		{UserAgent(""), ledger.MaxCommandVersion()},
		{"coopgrid/v9 commands/7", 7},
		{"github.com/coopgrid/coopgrid", ledger.CommandVersion}, // libp2p's default: a build from before announcements
		{"", ledger.CommandVersion},                             // never heard from
		{"coopgrid/x commands/0", ledger.CommandVersion},
		{"coopgrid/x commands/-3", ledger.CommandVersion},
		{"coopgrid/x commands/two", ledger.CommandVersion},
	} {
		if got := AnnouncedVersion(tc.agent); got != tc.want {
			t.Errorf("AnnouncedVersion(%q) = %d, want %d", tc.agent, got, tc.want)
		}
	}
	if !strings.HasPrefix(UserAgent(""), "coopgrid/dev ") {
		t.Errorf("UserAgent without a build: %q", UserAgent(""))
	}
}

// versionHost is a real libp2p host announcing agent.
func versionHost(t *testing.T, psk []byte, agent string) *p2p.Host {
	t.Helper()
	h, err := p2p.New(p2p.Config{DataDir: t.TempDir(), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Secret: psk,
		Logger: testLogger("version"), UserAgent: agent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestAdmitVersion: the leader learns each member's command version from
// what it announced over libp2p identify (real hosts on loopback), and
// refuses a command of a version above some member's, naming the member
// and the field; a member of a build from before announcements (libp2p's
// default agent) or one never heard from counts as version 1. A command of
// version 1 passes whatever the members announce.
func TestAdmitVersion(t *testing.T) {
	psk, err := p2p.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	self := versionHost(t, psk, UserAgent("new"))
	newer := versionHost(t, psk, "coopgrid/next commands/2")
	old := versionHost(t, psk, "") // libp2p's default agent
	silent, err := peer.Decode("12D3KooWBhXKN9t7NC4hVc4EcKbTkUkkRD8ccAmd96EqDvUoeBnN")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, h := range []*p2p.Host{newer, old} {
		if _, err := self.ConnectAddr(ctx, h.FullAddrs()[0].String()); err != nil {
			t.Fatal(err)
		}
	}
	// Identify runs right after the connection: wait for both agents.
	for _, h := range []*p2p.Host{newer, old} {
		for self.AgentVersion(h.ID()) == "" {
			if ctx.Err() != nil {
				t.Fatalf("no agent heard from %s", h.ID())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	newLeader := func(members ...peer.ID) *Leader {
		cfg := DefaultConfig()
		cfg.Self = self.ID()
		cfg.DisableScheduler = true
		cfg.Agents = self
		cfg.Members = func() ([]consensus.Member, error) {
			ms := []consensus.Member{{ID: self.ID(), Voter: true}}
			for _, id := range members {
				ms = append(ms, consensus.Member{ID: id})
			}
			return ms, nil
		}
		l, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// A version 2 command as a build that knows version 2 would decode it
	// (this build's ledger has no field above version 1 yet).
	v2 := ledger.Command{V: 2, Org: "uni-a", Peer: self.ID().String(), AtMs: 1, SetLimit: &ledger.SetLimit{LimitMilliW: 1}}
	v1 := v2
	v1.V = ledger.CommandVersion
	state := ledger.New()
	for _, tc := range []struct {
		name    string
		members []peer.ID
		cmd     ledger.Command
		refused peer.ID
	}{
		{"every member announces version 2", []peer.ID{newer.ID()}, v2, ""},
		{"a member of a build from before announcements", []peer.ID{newer.ID(), old.ID()}, v2, old.ID()},
		{"a member never heard from", []peer.ID{newer.ID(), silent}, v2, silent},
		{"version 1 with an old member", []peer.ID{newer.ID(), old.ID(), silent}, v1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newLeader(tc.members...).Admit(self.ID(), tc.cmd, state)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if p2p.Code(err) != CodeVersionUnsupported {
				t.Fatalf("got %v, want %s", err, CodeVersionUnsupported)
			}
			for _, want := range []string{tc.refused.String(), "versions up to 1", "upgrade"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
	t.Run("members unknown", func(t *testing.T) {
		l := newLeader()
		l.cfg.Members = func() ([]consensus.Member, error) { return nil, fmt.Errorf("raft is shut down") }
		if err := l.Admit(self.ID(), v2, state); p2p.Code(err) != CodeVersionUnsupported {
			t.Fatalf("got %v, want a refusal", err)
		}
	})
}
