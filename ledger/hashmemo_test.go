package ledger

import (
	"bytes"
	"sync"
	"testing"
)

// TestHashMemo: the memoised hash is the computed hash after every kind
// of step (accepted, refused, restored), and readers may ask at once.
func TestHashMemo(t *testing.T) {
	f := base(t)
	h0 := f.l.Hash()
	if h0 != f.l.computeHash() {
		t.Fatal("first hash differs from the computed one")
	}
	f.must(submit("uni-a", 3000, 500))
	if h := f.l.Hash(); h == h0 || h != f.l.computeHash() {
		t.Fatalf("after a submit: memo %s, computed %s, before %s", h, f.l.computeHash(), h0)
	}
	h1 := f.l.Hash()
	if r := f.apply(forget(4000, "uni-a-1")); r.Err == nil {
		t.Fatal("a forget without retention applied")
	}
	if h := f.l.Hash(); h != h1 || h != f.l.computeHash() {
		t.Fatalf("a refused command moved the hash: %s → %s", h1, h)
	}
	l2 := New()
	if err := l2.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
		t.Fatal(err)
	}
	if l2.Hash() != h1 {
		t.Fatalf("restored hash %s, want %s", l2.Hash(), h1)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h := l2.Hash(); h != h1 {
				t.Errorf("concurrent reader got %s", h)
			}
		}()
	}
	wg.Wait()
}
