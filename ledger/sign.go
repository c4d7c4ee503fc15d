package ledger

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Signed commands (issue 15). The authoring peer signs each command with
// its libp2p Ed25519 identity. A libp2p Ed25519 peer ID embeds the public
// key (an identity multihash), so the peer ID an organisation registered
// with is its key: verifying needs nothing but the command.
//
// What is signed is SignaturePrefix followed by the command's canonical
// encoding with Sig empty: the bytes EncodeCommand gives for the same
// command unsigned. The prefix keeps a command signature from ever being
// mistaken for a signature over anything else the same key signs (libp2p
// records, gossip heartbeats).
//
// The compatibility rule (docs/LEDGER.md, "Signatures"): an organisation
// becomes signing (Org.Signing) the first time a correctly signed command
// acting for it applies; from then on Apply refuses its unsigned commands
// with CodeBadSignature. Once any organisation signs, a new
// organisation's register_org must be signed too. A signature that does
// not verify is refused whatever the state. A log written before
// signatures replays unchanged: no entry of it is signed.

// SignaturePrefix separates command signatures from every other use of a
// peer's key.
const SignaturePrefix = "coopgrid/command/v1\n"

// SignatureSize is the size of an Ed25519 signature.
const SignatureSize = 64

// Signer signs bytes as one peer. A libp2p crypto.PrivKey is one.
type Signer interface {
	Sign(data []byte) ([]byte, error)
}

// EncodeSigned encodes c as EncodeCommand does, signed by s: c.Peer must be
// the peer s's key belongs to, or every ledger refuses the command
// (CodeBadSignature). Any Sig c carries is replaced.
func EncodeSigned(c Command, s Signer) ([]byte, error) {
	c.Sig = nil
	unsigned, err := EncodeCommand(c)
	if err != nil {
		return nil, err
	}
	sig, err := s.Sign(signingBytes(unsigned))
	if err != nil {
		return nil, errf(CodeBadSignature, "sign %s command: %v", c.Kind(), err)
	}
	if len(sig) != SignatureSize {
		return nil, errf(CodeBadSignature, "sign %s command: the key made a %d-byte signature; commands are signed with Ed25519 (%d bytes)", c.Kind(), len(sig), SignatureSize)
	}
	return withSig(unsigned, sig)
}

// withSig appends the signature to an unsigned encoding. Sig is the last
// field of Command and omitted when empty, so this is exactly what
// encoding the command with Sig set gives (TestSignedEncodingIsMarshal),
// without encoding a large command twice.
func withSig(unsigned, sig []byte) ([]byte, error) {
	n := len(unsigned)
	if n == 0 || unsigned[n-1] != '}' {
		return nil, errf(CodeMalformed, "encoded command does not end its object")
	}
	b64 := base64.StdEncoding.EncodeToString(sig)
	out := make([]byte, 0, n+len(`,"sig":""`)+len(b64))
	out = append(out, unsigned[:n-1]...)
	out = append(out, `,"sig":`...)
	out = strconv.AppendQuote(out, b64)
	out = append(out, '}')
	if len(out) > MaxCommandBytes {
		return nil, errf(CodeMalformed, "signed command is %d bytes, more than %d", len(out), MaxCommandBytes)
	}
	return out, nil
}

func signingBytes(unsigned []byte) []byte {
	msg := make([]byte, 0, len(SignaturePrefix)+len(unsigned))
	return append(append(msg, SignaturePrefix...), unsigned...)
}

// PeerKey returns the Ed25519 public key a peer ID embeds. A peer ID that
// does not decode, that hashes its key instead of embedding it (RSA,
// large keys) or that embeds a key of another type cannot sign commands.
func PeerKey(id string) (crypto.PubKey, error) {
	pid, err := peer.Decode(id)
	if err != nil {
		return nil, errf(CodeBadSignature, "peer %q is not a libp2p peer ID: %v", id, err)
	}
	pk, err := pid.ExtractPublicKey()
	if err != nil {
		return nil, errf(CodeBadSignature, "peer %s does not embed its public key (%v): only Ed25519 identities sign commands", id, err)
	}
	if pk.Type() != crypto.Ed25519 {
		return nil, errf(CodeBadSignature, "peer %s has a %s key: only Ed25519 identities sign commands", id, pk.Type())
	}
	return pk, nil
}

// VerifySignature checks that c carries a valid signature by c.Peer. It
// says nothing of whether c.Peer may act for c.Org: Apply checks that
// against the state.
func VerifySignature(c *Command) error {
	if e := verifySignature(c); e != nil {
		return e
	}
	return nil
}

func verifySignature(c *Command) *Error { return verifySignatureCached(c, nil) }

// verifySignatureCached is verifySignature, remembering its successes in
// cache (sigcache.go): a command verified once, by the dry run, is not
// verified again by Apply. A nil cache verifies every time.
func verifySignatureCached(c *Command, cache *sigCache) *Error {
	if len(c.Sig) == 0 {
		return errf(CodeBadSignature, "the command is not signed")
	}
	unsigned := *c
	unsigned.Sig = nil
	// The canonical encoding: what the signer's EncodeCommand gave. The
	// command decoded strictly, so it encodes (json.Marshal of these types
	// cannot fail), and decode-then-encode is a fixed point (FuzzApply).
	b, merr := json.Marshal(&unsigned)
	if merr != nil {
		return errf(CodeMalformed, "encode command: %v", merr)
	}
	msg := signingBytes(b)
	var key [sha256.Size]byte
	if cache != nil {
		key = sigKey(c.Peer, msg, c.Sig)
		if cache.verified(key) {
			return nil
		}
	}
	pk, err := PeerKey(c.Peer)
	if err != nil {
		return err.(*Error)
	}
	ok, verr := pk.Verify(msg, c.Sig)
	if verr != nil || !ok {
		return errf(CodeBadSignature, "the signature of this %s command is not peer %s's over its content", c.Kind(), c.Peer)
	}
	cache.remember(key)
	return nil
}

// authenticate applies the signature rule to c before its body is looked
// at: a signed command must verify; an unsigned one may act only for an
// organisation that has never signed, and may register a new organisation
// only while no organisation signs (a log from before signatures).
func (l *Ledger) authenticate(c *Command) *Error {
	if len(c.Sig) > 0 {
		return verifySignatureCached(c, l.sigs)
	}
	if o := l.orgs[c.Org]; o != nil {
		if o.Signing {
			return errf(CodeBadSignature, "organisation %q signs its commands: this unsigned %s command does not act for it", c.Org, c.Kind())
		}
		return nil
	}
	if c.RegisterOrg != nil && l.anySigning() {
		return errf(CodeBadSignature, "the federation signs its commands: registering organisation %q needs a signature by peer %s", c.Org, c.Peer)
	}
	return nil
}

// markSigning records that c's organisation signs, once a signed command
// acting for it applied.
func (l *Ledger) markSigning(c *Command) {
	if len(c.Sig) == 0 {
		return
	}
	if o := l.orgs[c.Org]; o != nil && o.Peer == c.Peer {
		o.Signing = true
	}
}

// anySigning reports whether some organisation signs its commands.
func (l *Ledger) anySigning() bool {
	for _, o := range l.orgs {
		if o.Signing {
			return true
		}
	}
	return false
}
