package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// packInto packs a fresh checkpoint directory of n random bytes into the
// peer's store for task.
func packInto(t *testing.T, p *testPeer, task string, n int) Archive {
	t.Helper()
	a, err := p.store.PackDir(context.Background(), task, ckDir(t, n))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

func TestReplicateThenFetch(t *testing.T) {
	n := newNet(t)
	a, b, c := n.peer(allowAll), n.peer(allowAll), n.peer(allowAll)
	know(a, b, c)
	ctx := ctxT(t)
	// 6 MiB of incompressible state: more than a p2p frame (4 MiB), so the
	// archive has to be streamed.
	ar := packInto(t, a, "org1-1", 6<<20)
	if ar.Size <= p2p.DefaultMaxMessageSize {
		t.Fatalf("archive of %d bytes does not exercise streaming", ar.Size)
	}
	holders, err := a.svc.Replicate(ctx, "org1-1", ar.Hash, []peer.ID{a.h.ID(), b.h.ID(), c.h.ID()}, 0)
	if err != nil {
		t.Fatalf("Replicate: %v", err)
	}
	if want := []peer.ID{a.h.ID(), b.h.ID()}; !reflect.DeepEqual(holders, want) {
		t.Fatalf("holders %v, want self then b (default 2 copies)", holders)
	}
	bp, err := b.store.Path(ar.Hash)
	if err != nil || !sameFile(t, ar.Path, bp) {
		t.Fatalf("b's copy: %v", err)
	}
	if got := b.store.List()[0].Tasks; !reflect.DeepEqual(got, []string{"org1-1"}) {
		t.Errorf("b attributes the copy to %v", got)
	}
	if c.store.Has(ar.Hash) {
		t.Error("c got a copy beyond the replication factor")
	}
	// Replicating again: b says it already has it; nothing is resent.
	if holders, err := a.svc.Replicate(ctx, "org1-1", ar.Hash, []peer.ID{b.h.ID()}, 2); err != nil || len(holders) != 2 {
		t.Fatalf("second Replicate: %v %v", holders, err)
	}
	// c fetches it from b.
	cp, err := c.svc.Fetch(ctx, "org1-1", ar.Hash, []peer.ID{b.h.ID()})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if !sameFile(t, ar.Path, cp) {
		t.Fatal("fetched copy differs")
	}
	// Held now: Fetch is local and needs no holder.
	if p, err := c.svc.Fetch(ctx, "org1-1", ar.Hash, nil); err != nil || p != cp {
		t.Fatalf("local Fetch: %s %v", p, err)
	}
}

func TestFetchFallsBackWhenHolderCrashed(t *testing.T) {
	n := newNet(t)
	a, b, c := n.peer(allowAll), n.peer(allowAll), n.peer(allowAll)
	know(a, b, c)
	ctx := ctxT(t)
	ar := packInto(t, a, "org1-1", 100<<10)
	holders, err := a.svc.Replicate(ctx, "org1-1", ar.Hash, []peer.ID{b.h.ID()}, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The peer that took the checkpoint crashes before the restore.
	if err := a.h.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := c.svc.Fetch(ctx, "org1-1", ar.Hash, holders)
	if err != nil {
		t.Fatalf("Fetch with the first holder down: %v", err)
	}
	if b2, _ := b.store.Path(ar.Hash); !sameFile(t, b2, got) {
		t.Fatal("fetched copy differs from the replica")
	}
	// With every holder down the error says so.
	if err := b.h.Close(); err != nil {
		t.Fatal(err)
	}
	d := n.peer(allowAll)
	know(a, b, d)
	_, err = d.svc.Fetch(ctx, "org1-1", ar.Hash, holders)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBadArchive) {
		t.Fatalf("Fetch with every holder down: %v, want ErrUnavailable only", err)
	}
	if d.store.Has(ar.Hash) || len(listDir(t, d.store.Dir())) != 0 {
		t.Error("a failed fetch left files")
	}
}

func TestFetchSkipsHolderWithDamagedCopy(t *testing.T) {
	n := newNet(t)
	a, b, c := n.peer(allowAll), n.peer(allowAll), n.peer(allowAll)
	know(a, b, c)
	ctx := ctxT(t)
	ar := packInto(t, a, "org1-1", 50<<10)
	if _, err := a.svc.Replicate(ctx, "org1-1", ar.Hash, []peer.ID{b.h.ID()}, 2); err != nil {
		t.Fatal(err)
	}
	// b's disk damages its copy: it now serves bytes with another hash.
	bp, _ := b.store.Path(ar.Hash)
	raw, _ := os.ReadFile(bp)
	must(t, os.WriteFile(bp, flip(raw, len(raw)/2), 0o600))

	if _, err := c.svc.FetchFrom(ctx, b.h.ID(), "org1-1", ar.Hash); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("FetchFrom the damaged holder: %v, want ErrHashMismatch", err)
	}
	if c.store.Has(ar.Hash) {
		t.Fatal("damaged bytes were kept")
	}
	got, err := c.svc.Fetch(ctx, "org1-1", ar.Hash, []peer.ID{b.h.ID(), a.h.ID()})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if !sameFile(t, ar.Path, got) {
		t.Fatal("fetched copy differs from the original")
	}
}

func TestAuthorisation(t *testing.T) {
	n := newNet(t)
	var (
		mu    sync.Mutex
		asked []string
	)
	// b keeps replicas only for a, and lets only d fetch.
	var aID, dID peer.ID
	auth := func(remote peer.ID, op Op, hash, task string) error {
		mu.Lock()
		asked = append(asked, fmt.Sprintf("%s %s", op, task))
		mu.Unlock()
		switch {
		case op == OpPush && remote == aID:
			return nil
		case op == OpFetch && remote == dID:
			return nil
		}
		return fmt.Errorf("%s may not %s checkpoints here", remote, op)
	}
	a, b, c, d := n.peer(allowAll), n.peer(auth), n.peer(allowAll), n.peer(allowAll)
	aID, dID = a.h.ID(), d.h.ID()
	noHook := n.peer(nil)
	know(a, b, c, d, noHook)
	ctx := ctxT(t)

	// c may not push to b.
	cr := packInto(t, c, "org3-1", 1000)
	holders, err := c.svc.Replicate(ctx, "org3-1", cr.Hash, []peer.ID{b.h.ID()}, 2)
	if !errors.Is(err, ErrNotEnoughCopies) || !reflect.DeepEqual(holders, []peer.ID{c.h.ID()}) {
		t.Fatalf("Replicate refused: %v %v, want only self and ErrNotEnoughCopies", holders, err)
	}
	if err := c.svc.Push(ctx, b.h.ID(), "org3-1", cr.Hash); p2p.Code(err) != CodeForbidden || !strings.Contains(err.Error(), "may not push") {
		t.Fatalf("Push: %v, want code %s with the hook's reason", err, CodeForbidden)
	}
	if b.store.Has(cr.Hash) {
		t.Fatal("refused push was stored")
	}
	// a may.
	ar := packInto(t, a, "org1-1", 1000)
	if _, err := a.svc.Replicate(ctx, "org1-1", ar.Hash, []peer.ID{b.h.ID()}, 2); err != nil {
		t.Fatal(err)
	}
	// c may not fetch from b; d may.
	if _, err := c.svc.FetchFrom(ctx, b.h.ID(), "org1-1", ar.Hash); p2p.Code(err) != CodeForbidden {
		t.Fatalf("FetchFrom by c: %v, want %s", err, CodeForbidden)
	}
	if c.store.Has(ar.Hash) {
		t.Fatal("refused fetch was stored")
	}
	if _, err := d.svc.Fetch(ctx, "org1-1", ar.Hash, []peer.ID{b.h.ID()}); err != nil {
		t.Fatalf("Fetch by d: %v", err)
	}
	// The hook saw every request with its operation and task.
	mu.Lock()
	got := strings.Join(asked, ",")
	mu.Unlock()
	for _, w := range []string{"push org3-1", "push org1-1", "fetch org1-1"} {
		if !strings.Contains(got, w) {
			t.Errorf("hook calls %q lack %q", got, w)
		}
	}
	// A service without a hook refuses everything.
	if err := a.svc.Push(ctx, noHook.h.ID(), "org1-1", ar.Hash); p2p.Code(err) != CodeForbidden {
		t.Fatalf("push to a peer without a hook: %v", err)
	}
}

func TestReplicateSkipsUnreachableAndFull(t *testing.T) {
	n := newNet(t)
	a, b := n.peer(allowAll), n.peer(allowAll)
	full := n.peer(allowAll, func(c *StoreConfig) { c.MaxPeerBytes = 100 })
	dead := n.peer(allowAll)
	know(a, b, full, dead)
	must(t, dead.h.Close())
	ctx := ctxT(t)
	ar := packInto(t, a, "org1-1", 2000)

	holders, err := a.svc.Replicate(ctx, "org1-1", ar.Hash, []peer.ID{dead.h.ID(), full.h.ID(), b.h.ID()}, 2)
	if err != nil {
		t.Fatalf("Replicate: %v", err)
	}
	if want := []peer.ID{a.h.ID(), b.h.ID()}; !reflect.DeepEqual(holders, want) {
		t.Fatalf("holders %v, want %v", holders, want)
	}
	if err := a.svc.Push(ctx, full.h.ID(), "org1-1", ar.Hash); p2p.Code(err) != CodeStoreFull {
		t.Fatalf("push to a full peer: %v, want %s", err, CodeStoreFull)
	}
	if len(listDir(t, full.store.Dir())) != 0 {
		t.Error("the full peer kept something")
	}
	// Three copies with only one live candidate: partial, and said so.
	holders, err = a.svc.Replicate(ctx, "org1-1", ar.Hash, []peer.ID{dead.h.ID(), b.h.ID()}, 3)
	if !errors.Is(err, ErrNotEnoughCopies) || len(holders) != 2 {
		t.Fatalf("3 copies: %v %v", holders, err)
	}
	// An archive this peer does not hold cannot be replicated.
	if _, err := a.svc.Replicate(ctx, "org1-1", HashBytes([]byte("x")), []peer.ID{b.h.ID()}, 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Replicate of a missing archive: %v", err)
	}
}

// TestServerRefusesMalformedRequests talks the wire protocol by hand.
func TestServerRefusesMalformedRequests(t *testing.T) {
	n := newNet(t)
	a, b := n.peer(allowAll), n.peer(allowAll)
	know(a, b)
	ctx := ctxT(t)
	ar := packInto(t, b, "org2-1", 1000)
	for _, c := range []struct {
		name string
		req  any
		body []byte
		code string
	}{
		{"unknown op", request{Op: "delete", Hash: ar.Hash}, nil, p2p.CodeBadRequest},
		{"bad hash", request{Op: OpFetch, Hash: "sha256:../../etc"}, nil, p2p.CodeBadRequest},
		{"bad task", request{Op: OpFetch, Hash: ar.Hash, Task: "../x"}, nil, p2p.CodeBadRequest},
		{"unknown field", map[string]any{"op": "fetch", "hash": ar.Hash, "extra": 1}, nil, p2p.CodeBadRequest},
		{"push without size", request{Op: OpPush, Hash: HashBytes([]byte("y")), Task: "org1-1"}, nil, p2p.CodeBadRequest},
		{"push over the limit", request{Op: OpPush, Hash: HashBytes([]byte("y")), Task: "org1-1", Size: 2 << 30}, nil, p2p.CodeTooLarge},
		{"fetch of a missing archive", request{Op: OpFetch, Hash: HashBytes([]byte("z"))}, nil, CodeNotFound},
		{"push of lying bytes", request{Op: OpPush, Hash: HashBytes([]byte("claimed")), Task: "org1-1", Size: 5}, []byte("other"), CodeHashMismatch},
		{"push cut short", request{Op: OpPush, Hash: HashBytes([]byte("claimed")), Task: "org1-1", Size: 500}, []byte("short"), p2p.CodeTruncated},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := a.h.NewStream(ctx, b.h.ID(), ProtocolID)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			must(t, writeMsg(st, c.req))
			br := bufio.NewReader(st)
			var resp response
			if c.body != nil {
				must(t, readMsg(br, &resp))
				if resp.Code != "" {
					t.Fatalf("refused before the body: %+v", resp)
				}
				_, _ = st.Write(c.body)
			}
			_ = st.CloseWrite()
			must(t, readMsg(br, &resp))
			if resp.Code != c.code {
				t.Fatalf("got %+v, want code %s", resp, c.code)
			}
			if got := b.store.List(); len(got) != 1 {
				t.Errorf("store changed: %+v", got)
			}
		})
	}
	// An oversized control frame is refused before it is read.
	st, err := a.h.NewStream(ctx, b.h.ID(), ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, _ = st.Write([]byte{0xff, 0xff, 0xff, 0x7f})
	var resp response
	if err := readMsg(bufio.NewReader(st), &resp); err != nil || resp.Code != p2p.CodeTooLarge {
		t.Fatalf("oversized frame: %+v %v", resp, err)
	}
}

func TestFetchRefusesOversizedAnnouncement(t *testing.T) {
	n := newNet(t)
	a := n.peer(allowAll)
	small := n.peer(allowAll, func(c *StoreConfig) { c.Limits.MaxArchiveBytes = 1000 })
	know(a, small)
	ctx := ctxT(t)
	ar := packInto(t, a, "org1-1", 5000)
	_, err := small.svc.Fetch(ctx, "org1-1", ar.Hash, []peer.ID{a.h.ID()})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "limit 1000") {
		t.Fatalf("Fetch: %v, want unavailable with the size limit named", err)
	}
	if len(listDir(t, small.store.Dir())) != 0 {
		t.Error("files left")
	}
}
