package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// busy is base plus a running task with a checkpoint, a preempted run
// awaiting its report, a finished task and a lost machine.
func busy(t testing.TB) *fed {
	f := base(t)
	placeAndStart(f, "uni-b-1", "uni-a/m2", 3000)
	f.must(decide("uni-b", 4000, preempt("uni-a-1", "uni-a/m2", "uni-b-1")))
	f.must(started("uni-a", "uni-a-1", "uni-a/m2", 4100))
	f.must(ckpt("uni-a", "uni-a-1", "uni-a/m2", 5000, 2500))
	placeAndStart(f, "uni-b-2", "uni-b/x1", 5000)
	f.must(ended("uni-b", "uni-b-2", "uni-b/x1", 8000, 360_000, false))
	placeAndStart(f, "uni-a-2", "uni-a/m1", 8000)
	f.must(lost("uni-b", "uni-a/m1", 9000))
	return f
}

func TestSnapshotRoundTrip(t *testing.T) {
	f := busy(t)
	snap := snapshotOf(t, f.l)
	nl := New()
	if err := nl.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if nl.Hash() != f.l.Hash() || nl.AppliedIndex() != f.l.AppliedIndex() {
		t.Fatalf("restored hash %s index %d, want %s %d", nl.Hash(), nl.AppliedIndex(), f.l.Hash(), f.l.AppliedIndex())
	}
	if err := nl.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// The snapshot of the restored ledger is byte for byte the same.
	if !bytes.Equal(snapshotOf(t, nl), snap) {
		t.Fatal("snapshot of the restored ledger differs")
	}
	// Both continue identically, derived indexes included: the pending stop
	// is found, PI is right, the next IDs follow on.
	next := [][]byte{
		mustEncode(t, stopped("uni-a", "uni-b-1", "uni-a/m2", 9500, 10, nil)),
		mustEncode(t, submit("uni-b", 9600, 100)),
		mustEncode(t, decide("uni-b", 9700, alloc("uni-b-3", "uni-b/x1"), alloc("uni-a-3", "uni-a/m2"))),
	}
	for i, b := range next {
		idx := f.idx + uint64(i) + 1
		r1, r2 := f.l.Apply(idx, b), nl.Apply(idx, b)
		if !r1.Applied() || !r2.Applied() {
			t.Fatalf("entry %d: %v / %v", i, r1.Err, r2.Err)
		}
		if f.l.Hash() != nl.Hash() {
			t.Fatalf("entry %d: diverged after restore", i)
		}
	}
	if tk := mustTask(t, nl, "uni-b-3"); tk.State != TaskAssigned || tk.Seq != 6 {
		t.Fatalf("task %+v", tk)
	}
}

func mustEncode(t *testing.T, c Command) []byte {
	t.Helper()
	b, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resealed decodes a snapshot, lets edit change its state, and re-seals it
// with a correct hash, as a buggy writer would.
func resealed(t *testing.T, snap []byte, edit func(*snapshotFile)) []byte {
	t.Helper()
	var s snapshotFile
	if err := json.Unmarshal(snap, &s); err != nil {
		t.Fatal(err)
	}
	edit(&s)
	h, err := hashOf(&s.State)
	if err != nil {
		t.Fatal(err)
	}
	s.Hash = h
	return mustJSON(&s)
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	good := snapshotOf(t, busy(t).l)
	cases := []struct {
		name string
		snap []byte
		want string
	}{
		{"empty", nil, "decode"},
		{"truncated", good[:len(good)/2], "decode"},
		{"no version", bytes.Replace(good, []byte(`{"v":2,`), []byte(`{`), 1), "no version"},
		{"unknown version", bytes.Replace(good, []byte(`{"v":2,`), []byte(`{"v":3,`), 1), "version 3"},
		{"version 0", bytes.Replace(good, []byte(`{"v":2,`), []byte(`{"v":0,`), 1), "version 0"},
		// The version is read without decoding the state (snapshotVersion):
		// wherever it stands, and whatever is not an object.
		{"unknown version, last", versionLast(good, 3), "version 3"},
		{"null version", bytes.Replace(good, []byte(`{"v":2,`), []byte(`{"v":null,`), 1), "no version"},
		{"not an object", []byte(`[{"v":2}]`), "decode"},
		{"unknown field", bytes.Replace(good, []byte(`{"v":2,`), []byte(`{"v":2,"extra":0,`), 1), "unknown field"},
		{"trailing data", append(bytes.Clone(good), []byte(" {}")...), "decode"},
		{"tampered value", bytes.Replace(good, []byte(`"limit_mw":300000`), []byte(`"limit_mw":300001`), 1), "does not match"},
		{"broken invariant, resealed", resealed(t, good, func(s *snapshotFile) { s.State.Orgs[0].LimitMilliW = 1 }), "above its limit"},
		{"energy not matching segments, resealed", resealed(t, good, func(s *snapshotFile) { s.State.Orgs[1].Energy.UserMilliJ++ }), "energy"},
		{"duplicate organisation, resealed", resealed(t, good, func(s *snapshotFile) { s.State.Orgs = append(s.State.Orgs, s.State.Orgs[0]) }), "twice"},
		{"null task, resealed", resealed(t, good, func(s *snapshotFile) { s.State.Tasks[0] = nil }), "null"},
		{"dangling machine owner, resealed", resealed(t, good, func(s *snapshotFile) { s.State.Machines[0].Org = "ghost" }), "unknown organisation"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The target holds a different state; it must keep it.
			f := base(t)
			placeAndStart(f, "uni-a-1", "uni-a/m1", 3000)
			before, idx := f.l.Hash(), f.l.AppliedIndex()
			err := f.l.Restore(bytes.NewReader(tc.snap))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
			if f.l.Hash() != before || f.l.AppliedIndex() != idx {
				t.Fatal("a rejected snapshot changed the ledger")
			}
			if err := f.l.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			// And it still works.
			f.must(ended("uni-a", "uni-a-1", "uni-a/m1", 4000, 5, false))
		})
	}
}

// versionLast moves a snapshot's version field to the end, as v.
func versionLast(snap []byte, v int) []byte {
	b := bytes.Replace(snap, []byte(`{"v":2,`), []byte(`{`), 1)
	return append(b[:bytes.LastIndexByte(b, '}')], []byte(fmt.Sprintf(`,"v":%d}`, v))...)
}

// TestRestoreReadsTheVersionAnywhere: a snapshot whose version is not its
// first field (WriteSnapshot writes it first) restores the same state.
func TestRestoreReadsTheVersionAnywhere(t *testing.T) {
	f := busy(t)
	nl := New()
	if err := nl.Restore(bytes.NewReader(versionLast(snapshotOf(t, f.l), 2))); err != nil {
		t.Fatal(err)
	}
	if nl.Hash() != f.l.Hash() || nl.AppliedIndex() != f.l.AppliedIndex() {
		t.Fatal("restored a different state")
	}
}

func TestHashIgnoresAppliedIndexButNotState(t *testing.T) {
	a, b := base(t), base(t)
	if a.l.Hash() != b.l.Hash() {
		t.Fatal("same log, different hash")
	}
	// A rejected command advances the index only.
	b.apply(started("uni-a", "uni-a-1", "uni-a/m1", 1))
	if a.l.Hash() != b.l.Hash() || a.l.AppliedIndex() == b.l.AppliedIndex() {
		t.Fatal("rejected command changed the hash, or the index did not move")
	}
	b.must(heartbeat("uni-a", "uni-a/m1", 5000))
	if a.l.Hash() == b.l.Hash() {
		t.Fatal("a heartbeat time is state: the hash must change")
	}
}

func heartbeat(org, machine string, at int64) Command {
	c := act(org, at)
	c.Heartbeat = &Heartbeat{Machine: machine}
	return c
}
