package api

import (
	"context"
	"net/http"
	"net/url"
)

// The members routes: GET /v1/members lists every Raft member with its
// organisation, suffrage, reachability and last contact, as the leader sees
// them; DELETE /v1/members/{id} asks for a member's removal, which the
// federation decides (docs/SECURITY.md, "Removal"): a peer removes itself
// only by leaving (POST /v1/leave), another organisation's peer only by a
// vote of more than half of the organisations, recorded in the ledger.

// MemberView is one member of the Raft configuration.
type MemberView struct {
	ID string `json:"id"`
	// Org is the organisation the peer is bound to; "" when it never
	// registered.
	Org string `json:"org,omitempty"`
	// Suffrage is "voter" or "nonvoter".
	Suffrage  string `json:"suffrage"`
	Leader    bool   `json:"leader"`
	Reachable bool   `json:"reachable"`
	// LastContactMs is how many milliseconds ago the observer last heard
	// from the member (at the autopilot's granularity, 2 s by default); -1
	// when unknown.
	LastContactMs int64 `json:"last_contact_ms"`
}

// Suffrages of MemberView.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
)

// MembersView is GET /v1/members.
type MembersView struct {
	// Leader is the leader's peer ID, "" when none is known. Observer is
	// whose view Members is: the leader, or the peer asked when no leader
	// answered (Note says why).
	Leader   string `json:"leader"`
	Observer string `json:"observer"`
	Note     string `json:"note,omitempty"`
	// Voters and VotersReachable: a leader needs a majority of Voters.
	Voters          int          `json:"voters"`
	VotersReachable int          `json:"voters_reachable"`
	Members         []MemberView `json:"members"`
}

// MemberRemoval is the answer of DELETE /v1/members/{id}: whether the
// member is removed, or how many votes its removal still needs.
type MemberRemoval struct {
	ID      string `json:"id"`
	Org     string `json:"org,omitempty"`
	Removed bool   `json:"removed"`
	Note    string `json:"note,omitempty"`
}

// Members is implemented by a backend that knows the Raft membership
// (package node); the server answers 404 for one without it.
type Members interface {
	Members(ctx context.Context) (MembersView, error)
	RemoveMember(ctx context.Context, id string) (MemberRemoval, error)
}

// maxPeerIDLen bounds a peer ID in a path (a libp2p Ed25519 ID is 52
// characters).
const maxPeerIDLen = 128

func (s *Server) memberBackend() (Members, error) {
	m, ok := s.b.(Members)
	if !ok {
		return nil, Errorf(CodeNotFound, "this peer does not report its membership")
	}
	return m, nil
}

// members answers the membership's figures with one page of its members
// (page.go).
func (s *Server) members(w http.ResponseWriter, r *http.Request) error {
	q, err := parsePageQuery(r)
	if err != nil {
		return err
	}
	m, err := s.memberBackend()
	if err != nil {
		return err
	}
	v, err := m.Members(r.Context())
	if err != nil {
		return err
	}
	if v.Members, err = pageListed(v.Members, memberKey, q); err != nil {
		return err
	}
	if v.Members == nil {
		v.Members = []MemberView{}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) removeMember(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	if !validPeerID(id) {
		return Errorf(CodeBadRequest, "member %q: want a peer ID (peer members lists them)", id)
	}
	m, err := s.memberBackend()
	if err != nil {
		return err
	}
	v, err := m.RemoveMember(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// validPeerID is the shape of a base58 peer ID; the backend decodes it.
func validPeerID(s string) bool {
	if s == "" || len(s) > maxPeerIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '1' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') || c == 'I' || c == 'O' || c == 'l' {
			return false
		}
	}
	return true
}

// RemoveMember calls DELETE /v1/members/{id}.
func (c *Client) RemoveMember(ctx context.Context, id string) (MemberRemoval, error) {
	var v MemberRemoval
	_, err := c.do(ctx, http.MethodDelete, "/v1/members/"+url.PathEscape(id), nil, nil, &v, true)
	return v, err
}
