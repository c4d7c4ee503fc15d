package consensus

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// An invitation lets one peer join the federation for one organisation. A
// member organisation's peer issues it (Node.Invite) and signs it with its
// Ed25519 identity; the joining peer presents it (Join); the leader checks
// the signature, asks the ledger whether it is still good (inviter a
// registered, unremoved member; not expired by the ledger's time; not
// spent; the organisation bound to no other peer), adds the peer and
// records the spent invitation in the log (ledger.Admission), so that
// every peer agrees it is spent.

// Invitation bounds.
const (
	// InvitationPrefix starts every invitation token.
	InvitationPrefix = "cginv1."
	// DefaultInvitationTTL is how long an invitation stays valid unless
	// the issuer says otherwise; MaxInvitationTTL bounds what it may say.
	DefaultInvitationTTL = 24 * time.Hour
	MaxInvitationTTL     = 30 * 24 * time.Hour
)

// invitationDomain separates invitation signatures from any other use of
// the peer's key.
const invitationDomain = "coopgrid invitation v1\n"

// Invitation is the signed content of an invitation token.
type Invitation struct {
	// ID is 128 random bits in hex: what the ledger records as spent.
	ID string `json:"id"`
	// Org is the invited organisation; Peer, when set, the only peer that
	// may use the invitation.
	Org  string `json:"org"`
	Peer string `json:"peer,omitempty"`
	// InviterOrg and Inviter are the issuing organisation and its peer,
	// whose key signs.
	InviterOrg string `json:"inviter_org"`
	Inviter    string `json:"inviter"`
	// ExpiresMs is the end of validity, compared with the admission
	// command's time (the leader's clock).
	ExpiresMs int64 `json:"expires_ms"`
	// Sig is the Ed25519 signature of the fields above (signedBytes).
	Sig []byte `json:"sig,omitempty"`
}

// signedBytes is what the inviter signs: the domain, then the invitation
// without its signature as JSON (fields in declaration order).
func (inv Invitation) signedBytes() []byte {
	inv.Sig = nil
	b, _ := json.Marshal(inv) // strings and integers only: cannot fail
	return append([]byte(invitationDomain), b...)
}

// Token encodes the signed invitation as one line: InvitationPrefix and
// base64url JSON, so it survives copy and paste, a file and a shell.
func (inv Invitation) Token() string {
	b, _ := json.Marshal(inv)
	return InvitationPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseInvitation decodes a token (surrounding white space is ignored). It
// checks the shape only; Verify checks the signature.
func ParseInvitation(token string) (Invitation, error) {
	token = strings.TrimSpace(token)
	if len(token) > ledger.MaxInvitationTokenBytes {
		return Invitation{}, fmt.Errorf("invitation: %d bytes, more than %d", len(token), ledger.MaxInvitationTokenBytes)
	}
	rest, ok := strings.CutPrefix(token, InvitationPrefix)
	if !ok {
		return Invitation{}, fmt.Errorf("invitation: does not start with %q (is this an invitation token?)", InvitationPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return Invitation{}, fmt.Errorf("invitation: %w", err)
	}
	var inv Invitation
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&inv); err != nil {
		return Invitation{}, fmt.Errorf("invitation: %w", err)
	}
	if dec.More() {
		return Invitation{}, errors.New("invitation: trailing data")
	}
	if err := inv.admission(token).validate(); err != nil {
		return Invitation{}, fmt.Errorf("invitation: %w", err)
	}
	return inv, nil
}

// admission is the ledger record spending inv for its own peer (or for
// joiner when the invitation names none).
func (inv Invitation) admissionFor(joiner peer.ID, token string) ledger.Admission {
	a := inv.admission(token).Admission
	a.Peer = joiner.String()
	return a
}

func (inv Invitation) admission(token string) shapeChecker {
	p := inv.Peer
	if p == "" {
		p = inv.Inviter // a placeholder of the right shape
	}
	return shapeChecker{ledger.Admission{Invitation: inv.ID, InviterOrg: inv.InviterOrg, InviterPeer: inv.Inviter,
		Org: inv.Org, Peer: p, ExpiresMs: inv.ExpiresMs, Token: strings.TrimSpace(token)}}
}

// shapeChecker checks an admission's shape with the ledger's own rules.
type shapeChecker struct{ ledger.Admission }

func (s shapeChecker) validate() error {
	_, err := ledger.EncodeCommand(ledger.Command{Org: s.InviterOrg, Peer: s.InviterPeer, AtMs: 1,
		Membership: &ledger.Membership{Admit: &s.Admission}})
	return err
}

// Verify checks that inv is signed by its inviter's key and may be used by
// joiner.
func (inv Invitation) Verify(joiner peer.ID) error {
	issuer, err := peer.Decode(inv.Inviter)
	if err != nil {
		return fmt.Errorf("invitation: inviter %q: %w", inv.Inviter, err)
	}
	pub, err := issuer.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("invitation: inviter %s: no public key in the peer ID: %w", issuer, err)
	}
	ok, err := pub.Verify(inv.signedBytes(), inv.Sig)
	if err != nil || !ok {
		return fmt.Errorf("invitation %s: the signature is not %s's", inv.ID, issuer)
	}
	if inv.Peer != "" && inv.Peer != joiner.String() {
		return fmt.Errorf("invitation %s is for peer %s, not %s", inv.ID, inv.Peer, joiner)
	}
	return nil
}

// SignInvitation fills in a fresh ID and signs inv with key, whose peer ID
// becomes the inviter.
func SignInvitation(key crypto.PrivKey, inv Invitation) (Invitation, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return Invitation{}, fmt.Errorf("sign invitation: %w", err)
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Invitation{}, fmt.Errorf("sign invitation: %w", err)
	}
	inv.ID = hex.EncodeToString(nonce[:])
	inv.Inviter = id.String()
	inv.Sig = nil
	if inv.Sig, err = key.Sign(inv.signedBytes()); err != nil {
		return Invitation{}, fmt.Errorf("sign invitation: %w", err)
	}
	return inv, nil
}
