package gossip

import (
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// stranger is a peer no organisation registered.
const stranger = peer.ID("12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo")

// newPeerID returns the ID of a fresh Ed25519 key.
func newPeerID(tb testing.TB) peer.ID {
	tb.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// ledgerView is a real ledger holding registered organisations: the view
// of the federation a peer validates heartbeats against.
type ledgerView struct {
	mu sync.RWMutex
	l  *ledger.Ledger
	at uint64
}

func (v *ledgerView) View(fn func(l *ledger.Ledger)) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	fn(v.l)
}

// newLedgerView registers each organisation to its peer, with one machine
// m1.
func newLedgerView(tb testing.TB, orgs map[string]peer.ID) *ledgerView {
	tb.Helper()
	v := &ledgerView{l: ledger.New()}
	for org, id := range orgs {
		data, err := ledger.EncodeCommand(ledger.Command{Org: org, Peer: id.String(), AtMs: time.Now().UnixMilli(),
			RegisterOrg: &ledger.RegisterOrg{LimitMilliW: 1_000_000, Machines: []ledger.MachineSpec{{Name: "m1", MFLOPS: 10_000, BusyMilliW: 100_000}}}})
		if err != nil {
			tb.Fatal(err)
		}
		v.at++
		if res := v.l.Apply(v.at, data); !res.Applied() {
			tb.Fatalf("register %s: %v", org, res.Err)
		}
	}
	return v
}

func encode(tb testing.TB, hb any) []byte {
	tb.Helper()
	b, err := json.Marshal(hb)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// testLogger is silent unless COOPGRID_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("COOPGRID_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
