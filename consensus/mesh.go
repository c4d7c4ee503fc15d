package consensus

import (
	"slices"

	"github.com/hashicorp/raft"
)

// meshRing is how many members a non-voter keeps a connection to beyond
// the voters: the ones after it in the order of peer IDs (meshPeers).
const meshRing = 3

// meshPeers are the members this node keeps connections to (reconnect
// dials the others only when something needs them: a request, a file, a
// Raft RPC). A voter keeps one to every member: it may lead, and a leader
// sends every member its log and receives their heartbeats. A non-voter,
// or a peer its own configuration does not list yet (a joiner catching
// up, admitted as a non-voter unless voters are missing), keeps one to
// every voter (its leader, and the next one) and to the meshRing
// non-voters after it in the order of peer IDs (the order wraps), and is
// kept by the meshRing before it: every peer then has gossip neighbours, and the
// connections grow as the members times (voters + 2 × meshRing), not as
// the members squared. On one host, 100 peers each dialling every member
// made 4,950 connections while they formed, each a TLS handshake,
// libp2p's identify and gossipsub's greeting on both ends: about a
// sixth of the formation's CPU at 50 peers (docs/BENCHMARKS.md, "Forming
// 100 peers, session 10").
func meshPeers(cfg raft.Configuration, self raft.ServerID, ring int) map[raft.ServerID]bool {
	out := map[raft.ServerID]bool{}
	voter, listed := false, false
	var ids []raft.ServerID // the other non-voters
	for _, s := range cfg.Servers {
		switch {
		case s.ID == self:
			listed, voter = true, s.Suffrage == raft.Voter
		case s.Suffrage == raft.Voter:
			out[s.ID] = true
		default:
			ids = append(ids, s.ID)
		}
	}
	if voter || (!listed && len(out) == 0) {
		// A voter, or a peer that knows no voter: every member.
		for _, id := range ids {
			out[id] = true
		}
		return out
	}
	if len(ids) == 0 {
		return out
	}
	slices.Sort(ids)
	at, _ := slices.BinarySearch(ids, self)
	for k := range min(ring, len(ids)) {
		out[ids[(at+k)%len(ids)]] = true
	}
	return out
}
