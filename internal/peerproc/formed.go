package peerproc

import (
	"context"
	"fmt"

	"github.com/coopgrid/coopgrid/api"
)

// Formed asks every peer's API whether the federation has formed: each peer
// sees len(clients) voters and as many organisations, and all name the same
// leader. When it has not, why says what the first peer that disagrees
// sees, labelled with its name (names[i] for clients[i]), for a test's
// "last seen" message. selves are the peers' own IDs, in order, when ok.
func Formed(ctx context.Context, names []string, clients []*api.Client) (ok bool, why string, selves []string) {
	leader := ""
	for i, c := range clients {
		s, err := c.Status(ctx)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", names[i], err), nil
		}
		voters := 0
		for _, pv := range s.Peers {
			if pv.Voter {
				voters++
			}
		}
		if voters != len(clients) || len(s.Orgs) != len(clients) || s.Leader == "" {
			return false, fmt.Sprintf("%s: %d voters, %d orgs, leader %q", names[i], voters, len(s.Orgs), s.Leader), nil
		}
		if leader != "" && s.Leader != leader {
			return false, fmt.Sprintf("leaders %s and %s", leader, s.Leader), nil
		}
		leader = s.Leader
		selves = append(selves, s.Self)
	}
	return true, "", selves
}
