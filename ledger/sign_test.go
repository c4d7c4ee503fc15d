package ledger

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ident is a real libp2p identity for tests: an Ed25519 key derived from a
// fixed seed (so that encoded seeds stay stable) and its peer ID.
type ident struct {
	key  crypto.PrivKey
	peer string
}

func identity(t testing.TB, seed byte) ident {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return ident{key: k, peer: id.String()}
}

// signedAs encodes c acting as id (its Peer set to id's unless already
// set), signed by key.
func signedAs(t testing.TB, c Command, id ident, key crypto.PrivKey) []byte {
	t.Helper()
	if c.Peer == "" {
		c.Peer = id.peer
	}
	b, err := EncodeSigned(c, key)
	if err != nil {
		t.Fatalf("sign %s: %v", c.Kind(), err)
	}
	return b
}

// signedFed is a federation of two organisations with real identities
// that sign: sa owns sa/m1, sb owns sb/x1; sa submitted sa-1 and sa-2,
// sb submitted sb-1; sa-1 runs on sb/x1 (decided by sb, started by sb).
type signedFed struct {
	*fed
	a, b ident
}

func newSignedFed(t testing.TB) *signedFed {
	f := &signedFed{fed: newFed(t), a: identity(t, 1), b: identity(t, 2)}
	env := func(org string, id ident, at int64) Command {
		return Command{V: CommandVersion, Org: org, Peer: id.peer, AtMs: at}
	}
	with := func(c Command, set func(*Command)) Command { set(&c); return c }
	steps := []struct {
		c  Command
		id ident
	}{
		{with(env("sa", f.a, 1000), func(c *Command) {
			c.RegisterOrg = &RegisterOrg{LimitMilliW: 1_000_000, Machines: []MachineSpec{mspec("m1", 1000, 100_000)}}
		}), f.a},
		{with(env("sb", f.b, 1000), func(c *Command) {
			c.RegisterOrg = &RegisterOrg{LimitMilliW: 1_000_000, Machines: []MachineSpec{mspec("x1", 1000, 100_000)}}
		}), f.b},
		{with(env("sa", f.a, 2000), func(c *Command) {
			c.SubmitTasks = &SubmitTasks{Tasks: []TaskSpec{{SizeMFlop: 10_000}, {SizeMFlop: 20_000}}}
		}), f.a},
		{with(env("sb", f.b, 2000), func(c *Command) { c.SubmitTasks = &SubmitTasks{Tasks: []TaskSpec{{SizeMFlop: 5_000}}} }), f.b},
		{with(env("sb", f.b, 3000), func(c *Command) { c.Decisions = &Decisions{Decisions: []Decision{alloc("sa-1", "sb/x1")}} }), f.b},
		{with(env("sb", f.b, 3100), func(c *Command) { c.TaskStarted = &TaskStarted{Task: "sa-1", Machine: "sb/x1"} }), f.b},
	}
	for _, s := range steps {
		if r := f.raw(signedAs(t, s.c, s.id, s.id.key)); !r.Applied() {
			t.Fatalf("fixture %s: %v", r.Kind, r.Err)
		}
	}
	return f
}

// TestSignatureRule: the signature rule, command by command, on a
// federation whose organisations sign. Every refusal carries its code and
// leaves the state hash unchanged.
func TestSignatureRule(t *testing.T) {
	mallory := identity(t, 9)
	otherKey := identity(t, 8).key
	type tc struct {
		name string
		// data builds the entry from the fixture.
		data func(f *signedFed) []byte
		want Code // "" = applied
	}
	with := func(org string, peerID string, at int64, set func(*Command)) Command {
		c := Command{V: CommandVersion, Org: org, Peer: peerID, AtMs: at}
		set(&c)
		return c
	}
	cancel := func(task string) func(*Command) {
		return func(c *Command) { c.CancelTask = &CancelTask{Task: task} }
	}
	limit := func(mw int64) func(*Command) { return func(c *Command) { c.SetLimit = &SetLimit{LimitMilliW: mw} } }
	cases := []tc{
		{"own signed cancel", func(f *signedFed) []byte {
			return signedAs(t, with("sa", f.a.peer, 5000, cancel("sa-2")), f.a, f.a.key)
		}, ""},
		{"unsigned cancel for a signing org", func(f *signedFed) []byte {
			return mustJSON(with("sa", f.a.peer, 5000, cancel("sa-2")))
		}, CodeBadSignature},
		{"another peer's key signs as sa", func(f *signedFed) []byte {
			return signedAs(t, with("sa", f.a.peer, 5000, cancel("sa-2")), f.a, f.b.key)
		}, CodeBadSignature},
		{"sb signs a cancel acting for sa as itself", func(f *signedFed) []byte {
			return signedAs(t, with("sa", f.b.peer, 5000, cancel("sa-2")), f.b, f.b.key)
		}, CodeNotOwner},
		{"signed set_limit altered in flight", func(f *signedFed) []byte {
			b := signedAs(t, with("sa", f.a.peer, 5000, limit(900_000)), f.a, f.a.key)
			return bytes.Replace(b, []byte(`"limit_mw":900000`), []byte(`"limit_mw":1`), 1)
		}, CodeBadSignature},
		{"signature moved to another command", func(f *signedFed) []byte {
			b := signedAs(t, with("sa", f.a.peer, 5000, limit(900_000)), f.a, f.a.key)
			var c Command
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			c.SetLimit = nil
			c.CancelTask = &CancelTask{Task: "sa-2"}
			return mustJSON(c)
		}, CodeBadSignature},
		{"signature of a truncated length", func(f *signedFed) []byte {
			c := with("sa", f.a.peer, 5000, cancel("sa-2"))
			c.Sig = make([]byte, 10)
			return mustJSON(c)
		}, CodeMalformed},
		{"peer ID that embeds no key", func(f *signedFed) []byte {
			return signedAs(t, with("sa", "12D3KooWfake", 5000, cancel("sa-2")), f.a, f.a.key)
		}, CodeBadSignature},
		{"forged task_ended for sb's machine, unsigned", func(f *signedFed) []byte {
			return mustJSON(with("sb", f.b.peer, 5000, func(c *Command) {
				c.TaskEnded = &TaskEnded{Task: "sa-1", Machine: "sb/x1", EnergyMilliJ: MaxSegmentMilliJ, Source: EnergyRAPL}
			}))
		}, CodeBadSignature},
		{"forged machine_lost for sb, signed by mallory", func(f *signedFed) []byte {
			return signedAs(t, with("sb", f.b.peer, 5000, func(c *Command) { c.MachineLost = &MachineLostCmd{Machine: "sb/x1"} }), f.b, mallory.key)
		}, CodeBadSignature},
		{"forged add_machine for sa, signed by sb", func(f *signedFed) []byte {
			return signedAs(t, with("sa", f.a.peer, 5000, func(c *Command) { c.AddMachine = &AddMachine{Machine: mspec("evil", MaxMFLOPS, 1)} }), f.a, f.b.key)
		}, CodeBadSignature},
		{"forged decisions for sb, signed by sa", func(f *signedFed) []byte {
			return signedAs(t, with("sb", f.b.peer, 5000, func(c *Command) { c.Decisions = &Decisions{Decisions: []Decision{alloc("sa-2", "sa/m1")}} }), f.b, f.a.key)
		}, CodeBadSignature},
		{"signed reports batch with an item altered", func(f *signedFed) []byte {
			b := signedAs(t, with("sb", f.b.peer, 5000, func(c *Command) {
				c.Reports = &Reports{Items: []Report{{TaskEnded: &TaskEnded{Task: "sa-1", Machine: "sb/x1", EnergyMilliJ: 10, Source: EnergyRAPL}}}}
			}), f.b, f.b.key)
			return bytes.Replace(b, []byte(`"energy_mj":10`), []byte(`"energy_mj":99999`), 1)
		}, CodeBadSignature},
		{"signed reports batch", func(f *signedFed) []byte {
			return signedAs(t, with("sb", f.b.peer, 5000, func(c *Command) {
				c.Reports = &Reports{Items: []Report{{TaskEnded: &TaskEnded{Task: "sa-1", Machine: "sb/x1", EnergyMilliJ: 10, Source: EnergyRAPL}}}}
			}), f.b, f.b.key)
		}, ""},
		{"unsigned register_org once the federation signs", func(f *signedFed) []byte {
			return mustJSON(with("sc", mallory.peer, 5000, func(c *Command) { c.RegisterOrg = &RegisterOrg{LimitMilliW: 1} }))
		}, CodeBadSignature},
		{"signed register_org of a new organisation", func(f *signedFed) []byte {
			return signedAs(t, with("sc", mallory.peer, 5000, func(c *Command) { c.RegisterOrg = &RegisterOrg{LimitMilliW: 1} }), mallory, mallory.key)
		}, ""},
		{"register_org signed by a key not the peer's", func(f *signedFed) []byte {
			return signedAs(t, with("sc", mallory.peer, 5000, func(c *Command) { c.RegisterOrg = &RegisterOrg{LimitMilliW: 1} }), mallory, otherKey)
		}, CodeBadSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newSignedFed(t)
			before := f.l.Hash()
			r := f.raw(c.data(f))
			switch {
			case c.want == "" && !r.Applied():
				t.Fatalf("refused: %v", r.Err)
			case c.want != "" && (r.Err == nil || r.Err.Code != c.want):
				t.Fatalf("got %v, want %s", r.Err, c.want)
			case c.want != "" && f.l.Hash() != before:
				t.Fatalf("refused command changed the state hash")
			}
		})
	}
}

// TestSigningIsRecorded: an organisation becomes signing with its first
// signed command that applies, not with a refused one, and the flag is in
// the hash and the snapshot.
func TestSigningIsRecorded(t *testing.T) {
	a := identity(t, 1)
	f := newFed(t)
	reg := Command{V: CommandVersion, Org: "sa", Peer: a.peer, AtMs: 1, RegisterOrg: &RegisterOrg{LimitMilliW: 10}}
	f.must(reg) // unsigned: a federation from before signatures
	unsignedLimit := Command{V: CommandVersion, Org: "sa", Peer: a.peer, AtMs: 2, SetLimit: &SetLimit{LimitMilliW: 20}}
	f.must(unsignedLimit)
	// A signed command the body refuses does not make sa signing.
	if r := f.raw(signedAs(t, Command{Org: "sa", AtMs: 3, CancelTask: &CancelTask{Task: "sa-9"}}, a, a.key)); r.Err == nil || r.Err.Code != CodeUnknownTask {
		t.Fatalf("cancel of an unknown task: %v", r.Err)
	}
	f.must(unsignedLimit)
	before := f.l.Hash()
	if r := f.raw(signedAs(t, Command{Org: "sa", AtMs: 4, SetLimit: &SetLimit{LimitMilliW: 20}}, a, a.key)); !r.Applied() {
		t.Fatalf("signed set_limit: %v", r.Err)
	}
	if f.l.Hash() == before {
		t.Fatal("becoming signing did not change the state hash")
	}
	if o, _ := f.l.Org("sa"); !o.Signing {
		t.Fatal("sa is not recorded as signing")
	}
	if r := f.apply(unsignedLimit); r.Err == nil || r.Err.Code != CodeBadSignature {
		t.Fatalf("unsigned after signing: %v", r.Err)
	}
	nl := New()
	if err := nl.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
		t.Fatal(err)
	}
	if nl.Hash() != f.l.Hash() {
		t.Fatal("restored ledger hashes differently")
	}
	if r := nl.Apply(nl.AppliedIndex()+1, mustJSON(unsignedLimit)); r.Err == nil || r.Err.Code != CodeBadSignature {
		t.Fatalf("unsigned after restore: %v", r.Err)
	}
}

// TestSignedEncodingIsMarshal: EncodeSigned's spliced signature is exactly
// the encoding of the command with Sig set, it decodes back, and the
// unsigned part is EncodeCommand's bytes (so unsigned commands encode as
// they always did: TestGoldenEncoding).
func TestSignedEncodingIsMarshal(t *testing.T) {
	a := identity(t, 1)
	for _, g := range goldenCommands() {
		t.Run(g.name, func(t *testing.T) {
			c := g.cmd
			c.Peer = a.peer
			b, err := EncodeSigned(c, a.key)
			if err != nil {
				t.Fatal(err)
			}
			d, err := DecodeCommand(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if len(d.Sig) != SignatureSize {
				t.Fatalf("decoded signature has %d bytes", len(d.Sig))
			}
			if m := mustJSON(d); !bytes.Equal(m, b) {
				t.Fatalf("spliced %s\nmarshal %s", b, m)
			}
			if err := VerifySignature(&d); err != nil {
				t.Fatalf("verify: %v", err)
			}
			unsigned, _ := EncodeCommand(c)
			if !bytes.HasPrefix(b, unsigned[:len(unsigned)-1]) {
				t.Fatal("the signed encoding does not extend the unsigned one")
			}
		})
	}
}

// TestPeerKey: only peer IDs that embed an Ed25519 key can sign.
func TestPeerKey(t *testing.T) {
	ed := identity(t, 1)
	rsaKey, _, err := crypto.GenerateRSAKeyPair(2048, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaID, _ := peer.IDFromPrivateKey(rsaKey)
	ecKey, _, err := crypto.GenerateECDSAKeyPair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecID, _ := peer.IDFromPrivateKey(ecKey)
	secpKey, _, err := crypto.GenerateSecp256k1Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secpID, _ := peer.IDFromPrivateKey(secpKey)
	for _, c := range []struct {
		name, id string
		ok       bool
	}{
		{"ed25519", ed.peer, true},
		{"rsa (hashed key)", rsaID.String(), false},
		{"ecdsa (hashed key)", ecID.String(), false},
		{"secp256k1 (embedded, not Ed25519)", secpID.String(), false},
		{"not a peer ID", "12D3KooWunixa", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := PeerKey(c.id)
			if (err == nil) != c.ok {
				t.Fatalf("PeerKey(%s): %v", c.id, err)
			}
			if err != nil && CodeOf(err) != CodeBadSignature {
				t.Fatalf("code %q, want bad_signature", CodeOf(err))
			}
		})
	}
	// A secp256k1 peer cannot even encode a signed command: its DER
	// signatures are not Ed25519's 64 bytes (and Apply would refuse its
	// key anyway).
	c := Command{Org: "s", Peer: secpID.String(), AtMs: 1, SetLimit: &SetLimit{}}
	if _, err := EncodeSigned(c, secpKey); CodeOf(err) != CodeBadSignature {
		t.Fatalf("secp256k1-signed command: %v, want bad_signature", err)
	}
}

// TestUpgradeUnsignedLog: a log written by the encoder before signatures
// (testdata/upgrade, never regenerated) replays to the same hash, and its
// snapshot restores; then the federation upgrades: a new organisation
// registers signed, after which an unsigned registration is refused while
// the old organisations' unsigned commands still apply.
func TestUpgradeUnsignedLog(t *testing.T) {
	dir := filepath.Join("testdata", "upgrade")
	want, err := os.ReadFile(filepath.Join(dir, "unsigned-v1.hash"))
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Open(filepath.Join(dir, "unsigned-v1.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	l := New()
	sc := bufio.NewScanner(logf)
	sc.Buffer(nil, MaxCommandBytes)
	var idx uint64
	for sc.Scan() {
		idx++
		l.Apply(idx, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if idx != 42 || l.Hash() != strings.TrimSpace(string(want)) {
		t.Fatalf("replayed %d entries to hash %s, want 42 entries to %s", idx, l.Hash(), want)
	}
	snap, err := os.ReadFile(filepath.Join(dir, "unsigned-v1.snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotOf(t, l), snap) {
		t.Fatal("the replayed ledger's snapshot differs from the one the old ledger wrote")
	}
	rl := New()
	if err := rl.Restore(bytes.NewReader(snap)); err != nil || rl.Hash() != l.Hash() {
		t.Fatalf("restore the old snapshot: %v (hash %s)", err, rl.Hash())
	}

	// The upgrade: uni-z (a real identity) registers signed.
	c := identity(t, 3)
	idx++
	if r := l.Apply(idx, signedAs(t, Command{Org: "uni-z", AtMs: 10_000, RegisterOrg: &RegisterOrg{LimitMilliW: 1}}, c, c.key)); !r.Applied() {
		t.Fatalf("signed register: %v", r.Err)
	}
	idx++
	if r := l.Apply(idx, mustJSON(register("uni-d", 1))); r.Err == nil || r.Err.Code != CodeBadSignature {
		t.Fatalf("unsigned register after the upgrade: %v", r.Err)
	}
	// uni-a registered before signatures, with a peer ID that cannot sign
	// (a test ID): it keeps acting unsigned.
	idx++
	if r := l.Apply(idx, mustJSON(heartbeat("uni-a", "uni-a/m2", 10_000))); !r.Applied() {
		t.Fatalf("old organisation's unsigned heartbeat: %v", r.Err)
	}
}

// FuzzSignedCommand feeds arbitrary bytes to the signed-command decoder
// and to Apply on a federation whose organisations sign. Nothing panics; a
// command whose signature verifies still verifies in canonical form (the
// signature covers the meaning, not the spelling); Apply refuses anything
// that does not verify as its author's, leaving the hash unchanged.
func FuzzSignedCommand(f *testing.F) {
	sf := newSignedFed(f)
	for _, e := range sf.log {
		f.Add(e)
	}
	a := sf.a
	for _, c := range []Command{
		{Org: "sa", AtMs: 9000, CancelTask: &CancelTask{Task: "sa-2"}},
		{Org: "sa", AtMs: 9000, SetLimit: &SetLimit{LimitMilliW: 5}},
		{Org: "sa", AtMs: 9000, AddMachine: &AddMachine{Machine: mspec("m2", 1, 1)}},
		{Org: "sa", AtMs: 9000, MachineLost: &MachineLostCmd{Machine: "sb/x1"}},
	} {
		f.Add(signedAs(f, c, a, a.key))
	}
	f.Add([]byte(`{"v":1,"org":"sa","peer":"12D3KooWfake","at_ms":1,"set_limit":{"limit_mw":1},"sig":"AAAA"}`))
	snap := snapshotOf(f, sf.l)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		verified := false
		if err == nil && len(c.Sig) > 0 {
			verified = VerifySignature(&c) == nil
			if verified {
				canon := mustJSON(c)
				d, err := DecodeCommand(canon)
				if err != nil || VerifySignature(&d) != nil {
					t.Fatalf("verified command does not verify in canonical form: %v", err)
				}
			}
		}
		l := New()
		if err := l.Restore(bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		before := l.Hash()
		r := l.Apply(l.AppliedIndex()+1, data)
		if err := l.CheckInvariants(); err != nil {
			t.Fatalf("invariants after %q: %v", data, err)
		}
		if !r.Applied() && l.Hash() != before {
			t.Fatalf("rejected entry changed the state: %v", r.Err)
		}
		if r.Applied() && !verified {
			t.Fatalf("an entry that does not verify applied on a signing federation: %s", data)
		}
	})
}

// BenchmarkVerifySignature is what a signature costs Apply on every peer:
// the canonical re-encoding and one Ed25519 verification, for a small
// command and for a decisions batch of 1,000 decisions.
func BenchmarkVerifySignature(b *testing.B) {
	a := identity(b, 1)
	ds := make([]Decision, 1000)
	for i := range ds {
		ds[i] = alloc("sa-"+strings.Repeat("1", 1+i%5), "sa/m1")
	}
	for _, bc := range []struct {
		name string
		c    Command
	}{
		{"set_limit", Command{Org: "sa", AtMs: 1, SetLimit: &SetLimit{LimitMilliW: 1}}},
		{"decisions_1000", Command{Org: "sa", AtMs: 1, Decisions: &Decisions{Decisions: ds}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := DecodeCommand(signedAs(b, bc.c, a, a.key))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := VerifySignature(&c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSignatureCacheKeepsVerdicts: once the dry run (Check) has verified a
// signed command, its apply finds the verification remembered, and no
// alteration of the command, its signature or its peer passes for it.
func TestSignatureCacheKeepsVerdicts(t *testing.T) {
	f := newSignedFed(t)
	good := signedAs(t, Command{V: CommandVersion, Org: "sa", Peer: f.a.peer, AtMs: 5000, SetLimit: &SetLimit{LimitMilliW: 900_000}}, f.a, f.a.key)
	c, err := DecodeCommand(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.l.Check(&c); err != nil {
		t.Fatalf("check: %v", err)
	}
	unsigned := c
	unsigned.Sig = nil
	if !f.l.sigs.verified(sigKey(c.Peer, signingBytes(mustJSON(unsigned)), c.Sig)) {
		t.Fatal("the dry run's verification is not remembered")
	}
	moved := c
	moved.SetLimit, moved.CancelTask = nil, &CancelTask{Task: "sa-2"}
	otherPeer := c
	otherPeer.Peer = f.b.peer
	otherSig := c
	otherSig.Sig = bytes.Clone(c.Sig)
	otherSig.Sig[0] ^= 1
	for name, data := range map[string][]byte{
		"altered in flight": bytes.Replace(good, []byte(`"limit_mw":900000`), []byte(`"limit_mw":1`), 1),
		"signature moved":   mustJSON(moved),
		"another peer":      mustJSON(otherPeer),
		"signature flipped": mustJSON(otherSig),
	} {
		before := f.l.Hash()
		if r := f.raw(data); r.Err == nil || r.Err.Code != CodeBadSignature {
			t.Errorf("%s: got %v, want %s", name, r.Err, CodeBadSignature)
		}
		if f.l.Hash() != before {
			t.Errorf("%s: the refusal changed the state", name)
		}
	}
	if r := f.raw(good); !r.Applied() {
		t.Fatalf("the checked command: %v", r.Err)
	}
	if o, _ := f.l.Org("sa"); o.LimitMilliW != 900_000 {
		t.Fatalf("limit %d after the signed set_limit", o.LimitMilliW)
	}
}

// TestSignatureCacheIsBounded: the cache forgets its oldest entries beyond
// sigCacheSize.
func TestSignatureCacheIsBounded(t *testing.T) {
	s := newSigCache()
	key := func(i int) [32]byte { return sigKey("p", []byte(strconv.Itoa(i)), nil) }
	for i := range sigCacheSize + 10 {
		s.remember(key(i))
	}
	if len(s.seen) != sigCacheSize || len(s.ring) != sigCacheSize {
		t.Fatalf("%d entries, %d in the ring; want %d", len(s.seen), len(s.ring), sigCacheSize)
	}
	if s.verified(key(0)) || s.verified(key(9)) {
		t.Fatal("the oldest entries are still remembered")
	}
	if !s.verified(key(10)) || !s.verified(key(sigCacheSize+9)) {
		t.Fatal("recent entries forgotten")
	}
	var none *sigCache
	none.remember(key(1))
	if none.verified(key(1)) {
		t.Fatal("a nil cache remembers")
	}
}
