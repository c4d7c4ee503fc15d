package api

import (
	"context"
	"net/http"
	"time"
)

// The membership routes: a member organisation invites another (POST
// /v1/invitations) and votes to remove one (POST /v1/removals). Joining
// needs an invitation; removing another member needs the votes of more
// than half of the organisations (docs/SECURITY.md, "Membership").

// Error codes of the membership routes.
const (
	// CodeInvitationRefused (409): the invitation cannot be issued (the
	// organisation is bound to another peer, a validity out of range).
	CodeInvitationRefused = "invitation_refused"
	// CodeNotMember (409): this peer (or the peer named) is not a member,
	// or its organisation is not registered yet.
	CodeNotMember = "not_member"
)

// MaxInvitationTTL bounds InviteRequest.TTLSeconds (30 days).
const MaxInvitationTTL = 30 * 24 * time.Hour

// InviteRequest is POST /v1/invitations.
type InviteRequest struct {
	// Org is the invited organisation (required).
	Org string `json:"org"`
	// Peer, when set, is the only libp2p peer ID that may use it.
	Peer string `json:"peer,omitempty"`
	// TTLSeconds is the validity (0: the default, 24 h).
	TTLSeconds int64 `json:"ttl_s,omitempty"`
}

// Invitation is the answer of POST /v1/invitations. Token is what the
// invited peer passes to `peer run --invitation`.
type Invitation struct {
	ID         string `json:"id"`
	Org        string `json:"org"`
	Peer       string `json:"peer,omitempty"`
	InviterOrg string `json:"inviter_org"`
	Inviter    string `json:"inviter"`
	ExpiresMs  int64  `json:"expires_ms"`
	Token      string `json:"token"`
}

// RemovalRequest is POST /v1/removals: this organisation's vote to remove
// another.
type RemovalRequest struct {
	Org string `json:"org"`
}

// RemovalView is the answer: whether the votes so far remove the
// organisation, and how many there are.
type RemovalView struct {
	Org     string `json:"org"`
	Removed bool   `json:"removed"`
	Note    string `json:"note,omitempty"`
}

// Membership is implemented by a backend that can invite and vote
// (package node); the server answers 404 for one without it.
type Membership interface {
	Invite(ctx context.Context, req InviteRequest) (Invitation, error)
	VoteRemoval(ctx context.Context, req RemovalRequest) (RemovalView, error)
}

// membershipError builds a 409 error with a membership code (StatusOf
// knows only the shared ones).
func membershipError(code, format string, args ...any) *Error {
	e := Errorf(code, format, args...)
	e.Status = http.StatusConflict
	return e
}

// ErrInvitationRefused and ErrNotMember build the routes' errors.
func ErrInvitationRefused(format string, args ...any) *Error {
	return membershipError(CodeInvitationRefused, format, args...)
}

func ErrNotMember(format string, args ...any) *Error {
	return membershipError(CodeNotMember, format, args...)
}

// ValidateInvite checks an InviteRequest's shape.
func ValidateInvite(req InviteRequest) error {
	if !validOrgName(req.Org) {
		return Errorf(CodeBadRequest, "org %q: want 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit", req.Org)
	}
	if len(req.Peer) > 128 {
		return Errorf(CodeBadRequest, "peer: more than 128 characters")
	}
	if req.TTLSeconds < 0 || time.Duration(req.TTLSeconds)*time.Second > MaxInvitationTTL {
		return Errorf(CodeBadRequest, "ttl_s %d out of range [0, %d]", req.TTLSeconds, int64(MaxInvitationTTL/time.Second))
	}
	return nil
}

func validOrgName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

func (s *Server) membership() (Membership, error) {
	m, ok := s.b.(Membership)
	if !ok {
		return nil, Errorf(CodeNotFound, "this peer does not handle membership")
	}
	return m, nil
}

func (s *Server) invite(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	m, err := s.membership()
	if err != nil {
		return err
	}
	var req InviteRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if err := ValidateInvite(req); err != nil {
		return err
	}
	inv, err := m.Invite(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, inv)
	return nil
}

func (s *Server) voteRemoval(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	m, err := s.membership()
	if err != nil {
		return err
	}
	var req RemovalRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if !validOrgName(req.Org) {
		return Errorf(CodeBadRequest, "org %q is not an organisation name", req.Org)
	}
	v, err := m.VoteRemoval(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// Invite calls POST /v1/invitations.
func (c *Client) Invite(ctx context.Context, req InviteRequest) (Invitation, error) {
	var inv Invitation
	_, err := c.do(ctx, http.MethodPost, "/v1/invitations", nil, req, &inv, true)
	return inv, err
}

// VoteRemoval calls POST /v1/removals.
func (c *Client) VoteRemoval(ctx context.Context, req RemovalRequest) (RemovalView, error) {
	var v RemovalView
	_, err := c.do(ctx, http.MethodPost, "/v1/removals", nil, req, &v, true)
	return v, err
}
