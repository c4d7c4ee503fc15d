package consensus

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// TestMeshPeers: a voter keeps a connection to every member; a
// non-voter (or a peer its configuration does not list yet) to every
// voter and the meshRing non-voters after it in ID order, wrapping; a peer
// that knows no voter to every member. Over a federation of 100 the
// non-voters' connections are a few each, every member is kept by
// someone other than itself, and the whole is linear in the members.
func TestMeshPeers(t *testing.T) {
	cfg := func(voters, nonvoters []string) raft.Configuration {
		var c raft.Configuration
		for _, v := range voters {
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(v), Suffrage: raft.Voter})
		}
		for _, v := range nonvoters {
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(v), Suffrage: raft.Nonvoter})
		}
		return c
	}
	small := cfg([]string{"v1", "v2"}, []string{"a", "b", "c", "d", "e"})
	cases := []struct {
		name string
		c    raft.Configuration
		self string
		want []string
	}{
		{"voter: everyone", small, "v1", []string{"v2", "a", "b", "c", "d", "e"}},
		{"non-voter: voters and the next three", small, "b", []string{"v1", "v2", "c", "d", "e"}},
		{"the order wraps", small, "e", []string{"v1", "v2", "a", "b", "c"}},
		{"not listed yet: as a non-voter, placed in the order", small, "bb", []string{"v1", "v2", "c", "d", "e"}},
		{"no voter known: everyone", cfg(nil, []string{"a", "b", "c", "d", "e"}), "z", []string{"a", "b", "c", "d", "e"}},
		{"empty configuration", raft.Configuration{}, "a", nil},
		{"fewer members than the ring", cfg([]string{"v1"}, []string{"a", "b"}), "a", []string{"v1", "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := meshPeers(tc.c, raft.ServerID(tc.self), meshRing)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if !got[raft.ServerID(w)] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}

	var voters, nonvoters []string
	for i := range 5 {
		voters = append(voters, fmt.Sprintf("v%02d", i))
	}
	for i := range 95 {
		nonvoters = append(nonvoters, fmt.Sprintf("n%02d", i))
	}
	big := cfg(voters, nonvoters)
	links := map[[2]raft.ServerID]bool{}
	keptBy := map[raft.ServerID]int{}
	for _, s := range big.Servers {
		kept := meshPeers(big, s.ID, meshRing)
		if s.Suffrage == raft.Nonvoter && len(kept) != len(voters)+meshRing {
			t.Errorf("non-voter %s keeps %d members, want %d", s.ID, len(kept), len(voters)+meshRing)
		}
		for id := range kept {
			if id == s.ID {
				t.Fatalf("%s keeps itself", s.ID)
			}
			keptBy[id]++
			a, b := min(s.ID, id), max(s.ID, id)
			links[[2]raft.ServerID{a, b}] = true
		}
	}
	for _, s := range big.Servers {
		if keptBy[s.ID] == 0 {
			t.Errorf("nobody keeps a connection to %s", s.ID)
		}
	}
	// 5 voters to everyone (490 links) and each non-voter to its 3
	// successors (at most 285): 775 at most, against 4,950 for a full mesh.
	if len(links) > 5*99+95*meshRing {
		t.Errorf("%d connections among 100 members, want at most %d", len(links), 5*99+95*meshRing)
	}
	t.Logf("%d connections among 100 members (a full mesh: 4950)", len(links))
}
