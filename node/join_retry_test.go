package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// TestJoinRetryable: a join is sent again only for failures that pass (no
// leader, an election, no answer in time, a bootstrap peer that could not
// be dialled), never for a refusal (a bad or spent invitation).
func TestJoinRetryable(t *testing.T) {
	wrap := func(err error) error { return errors.Join(fmt.Errorf("join via /ip4/…: %w", err)) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no quorum", wrap(p2p.Errorf(consensus.CodeNoQuorum, "no leader for 5s")), true},
		{"leadership lost while committing", wrap(p2p.Errorf(consensus.CodeOutcomeUnknown, "leadership lost")), true},
		{"no answer in time", wrap(fmt.Errorf("read response: %w", context.DeadlineExceeded)), true},
		{"bootstrap peer not dialled", wrap(fmt.Errorf("failed to dial: %w", &swarm.DialError{Cause: errors.New("all dials failed")})), true},
		{"admission paced", wrap(p2p.Errorf(consensus.CodeAdmissionPaced, "3 peers admitted before are still catching up")), true},
		{"bad invitation", wrap(p2p.Errorf(consensus.CodeInvitation, "expired")), false},
		{"invitation required", wrap(p2p.Errorf(consensus.CodeInvitationRequired, "not a member")), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := joinRetryable(tc.err); got != tc.want {
				t.Fatalf("joinRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
