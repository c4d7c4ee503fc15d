package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// keyed is c (a submit) with request ID id.
func keyed(c Command, id string) Command {
	c.SubmitTasks.RequestID = id
	return c
}

// replayStep is one command of a replay scenario and what it must do.
type replayStep struct {
	cmd Command
	// raw, if set, is applied instead of cmd's encoding (a log entry
	// repeated byte for byte).
	raw []byte
	// wantIDs are the task IDs returned; wantReplayed says they are an
	// earlier submit's; wantCode a rejection. A replay or a rejection must
	// leave the hash unchanged, a new submit must not.
	wantIDs      []string
	wantReplayed bool
	wantCode     Code
}

func TestSubmitReplay(t *testing.T) {
	// base(t): uni-a submitted uni-a-1..3, uni-b uni-b-1..2.
	first := keyed(submit("uni-a", 5000, 7, 8), "job-42")
	firstBytes := mustJSON(withVersion(first))
	cases := []struct {
		name  string
		steps []replayStep
	}{
		{"a resend returns the original IDs", []replayStep{
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}},
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}, wantReplayed: true},
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}, wantReplayed: true},
		}},
		{"the same log entry applied twice (duplicated command)", []replayStep{
			{raw: firstBytes, wantIDs: []string{"uni-a-4", "uni-a-5"}},
			{raw: firstBytes, wantIDs: []string{"uni-a-4", "uni-a-5"}, wantReplayed: true},
		}},
		{"a resend stamped later, after other commands, still replays", []replayStep{
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}},
			{cmd: keyed(submit("uni-a", 5100, 9), "job-43"), wantIDs: []string{"uni-a-6"}},
			{cmd: decide("uni-b", 5200, alloc("uni-a-4", "uni-a/m1"))},
			{cmd: keyed(submit("uni-a", 9_000_000, 7, 8), "job-42"), wantIDs: []string{"uni-a-4", "uni-a-5"}, wantReplayed: true},
			{cmd: keyed(submit("uni-a", 9_000_001, 9), "job-43"), wantIDs: []string{"uni-a-6"}, wantReplayed: true},
		}},
		{"the same request ID for different tasks is refused", []replayStep{
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}},
			{cmd: keyed(submit("uni-a", 5000, 7, 9), "job-42"), wantCode: CodeExists},
			{cmd: keyed(submit("uni-a", 5000, 7), "job-42"), wantCode: CodeExists},
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}, wantReplayed: true},
		}},
		{"different organisations, same request ID: independent", []replayStep{
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}},
			{cmd: keyed(submit("uni-b", 5000, 7, 8), "job-42"), wantIDs: []string{"uni-b-3", "uni-b-4"}},
			{cmd: keyed(submit("uni-b", 5000, 7, 8), "job-42"), wantIDs: []string{"uni-b-3", "uni-b-4"}, wantReplayed: true},
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}, wantReplayed: true},
		}},
		{"another organisation cannot replay a request (not_owner before the guard)", []replayStep{
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}},
			{cmd: func() Command { c := first; c.Peer = peerOf("uni-b"); return c }(), wantCode: CodeNotOwner},
		}},
		{"a rejected keyed submit is not remembered", []replayStep{
			{cmd: func() Command { c := first; c.Peer = peerOf("uni-b"); return c }(), wantCode: CodeNotOwner},
			{cmd: first, wantIDs: []string{"uni-a-4", "uni-a-5"}},
		}},
		{"without a request ID a resend queues again", []replayStep{
			{cmd: submit("uni-a", 5000, 7), wantIDs: []string{"uni-a-4"}},
			{cmd: submit("uni-a", 5000, 7), wantIDs: []string{"uni-a-5"}},
		}},
		{"a replay after the tasks ended still answers", []replayStep{
			{cmd: keyed(submit("uni-b", 5000, 7), "r"), wantIDs: []string{"uni-b-3"}},
			{cmd: decide("uni-b", 5100, alloc("uni-b-3", "uni-b/x1"))},
			{cmd: started("uni-b", "uni-b-3", "uni-b/x1", 5200)},
			{cmd: ended("uni-b", "uni-b-3", "uni-b/x1", 5300, 10, false)},
			{cmd: keyed(submit("uni-b", 5400, 7), "r"), wantIDs: []string{"uni-b-3"}, wantReplayed: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := base(t)
			runReplaySteps(t, f, tc.steps)
		})
	}
}

func withVersion(c Command) Command {
	if c.V == 0 {
		c.V = CommandVersion
	}
	return c
}

func runReplaySteps(t *testing.T, f *fed, steps []replayStep) {
	t.Helper()
	for i, st := range steps {
		before := f.l.Hash()
		var tasksBefore int
		for _, o := range f.l.Orgs() {
			tasksBefore += int(o.Submitted)
		}
		var r Result
		if st.raw != nil {
			r = f.raw(st.raw)
		} else {
			r = f.apply(st.cmd)
		}
		after := f.l.Hash()
		switch {
		case st.wantCode != "":
			if r.Err == nil || r.Err.Code != st.wantCode {
				t.Fatalf("step %d: result %+v, want code %s", i, r, st.wantCode)
			}
			if after != before {
				t.Fatalf("step %d: a rejected submit changed the hash", i)
			}
			continue
		case !r.Applied():
			t.Fatalf("step %d: rejected: %v", i, r.Err)
		}
		if st.wantIDs != nil && !slices.Equal(r.TaskIDs, st.wantIDs) {
			t.Fatalf("step %d: task IDs %v, want %v", i, r.TaskIDs, st.wantIDs)
		}
		if r.Replayed != st.wantReplayed {
			t.Fatalf("step %d: replayed %v, want %v (notes %v)", i, r.Replayed, st.wantReplayed, r.Notes)
		}
		var tasksAfter int
		for _, o := range f.l.Orgs() {
			tasksAfter += int(o.Submitted)
		}
		if st.wantReplayed {
			if after != before || tasksAfter != tasksBefore {
				t.Fatalf("step %d: a replay changed the state (hash moved: %v, tasks %d → %d)", i, after != before, tasksBefore, tasksAfter)
			}
			if len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "was applied at index") {
				t.Fatalf("step %d: a replay without its note: %v", i, r.Notes)
			}
		} else if after == before {
			t.Fatalf("step %d: an applied command left the hash unchanged", i)
		}
	}
}

func TestRequestIDValidation(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"", true}, // no key: an unguarded submit
		{"a", true},
		{"0f8fad5b-d9cb-469f-a165-70867728950e", true},
		{"peer:cli.2026-11-22_01", true},
		{strings.Repeat("k", MaxRequestIDLen), true},
		{strings.Repeat("k", MaxRequestIDLen+1), false},
		{"has space", false},
		{"slash/in", false},
		{"nul\x00", false},
		{"é", false},
		{"new\nline", false},
		{"{}", false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%.20q", tc.id), func(t *testing.T) {
			c := keyed(submit("uni-a", 5000, 7), tc.id)
			_, err := EncodeCommand(c)
			if (err == nil) != tc.ok {
				t.Fatalf("encode: %v, want ok=%v", err, tc.ok)
			}
			if ValidRequestID(tc.id) != (tc.ok && tc.id != "") {
				t.Fatalf("ValidRequestID = %v", !(tc.ok && tc.id != ""))
			}
			f := base(t)
			before := f.l.Hash()
			r := f.apply(c) // bypasses the encoder's check: Apply decodes and checks again
			if tc.ok {
				if !r.Applied() || len(r.TaskIDs) != 1 {
					t.Fatalf("a valid request ID was refused: %v", r.Err)
				}
				return
			}
			if r.Err == nil || r.Err.Code != CodeMalformed || !strings.Contains(r.Err.Msg, "request ID") {
				t.Fatalf("result %+v, want malformed naming the request ID", r.Err)
			}
			if f.l.Hash() != before {
				t.Fatal("a refused request ID changed the state")
			}
		})
	}
}

// fillWindow applies MaxRequestsPerOrg keyed one-task submits of org,
// keys w-0, w-1, …
func fillWindow(f *fed, org string) {
	for i := 0; i < MaxRequestsPerOrg; i++ {
		f.must(keyed(submit(org, 6000+int64(i), 1), fmt.Sprintf("w-%d", i)))
	}
}

func TestReplayWindow(t *testing.T) {
	f := base(t)
	b := f.must(keyed(submit("uni-b", 5000, 3), "w-0")) // uni-b's own w-0
	fillWindow(f, "uni-a")                              // uni-a-4 … uni-a-1027
	// Full: every key is remembered, the oldest first.
	if r, ok := f.l.SubmitRequest("uni-a", "w-0"); !ok || r.TaskIDs()[0] != "uni-a-4" {
		t.Fatalf("w-0: %+v %v", r, ok)
	}
	// One more forgets uni-a's oldest, not uni-b's.
	f.must(keyed(submit("uni-a", 9000, 1), "w-new"))
	steps := []replayStep{
		// w-0 of uni-a is outside the window: a new submit.
		{cmd: keyed(submit("uni-a", 9100, 1), "w-0"), wantIDs: []string{"uni-a-1029"}},
		// That pushed w-1 out; w-2 is still inside (a replay takes no
		// slot).
		{cmd: keyed(submit("uni-a", 9200, 1), "w-2"), wantIDs: []string{"uni-a-6"}, wantReplayed: true},
		// uni-b's w-0 is untouched by uni-a's window.
		{cmd: keyed(submit("uni-b", 9300, 3), "w-0"), wantIDs: b.TaskIDs, wantReplayed: true},
	}
	runReplaySteps(t, f, steps)
	// w-2 is now the oldest: the next keyed submit forgets it.
	if _, ok := f.l.SubmitRequest("uni-a", "w-2"); !ok {
		t.Fatal("w-2 forgotten too early")
	}
	f.must(keyed(submit("uni-a", 9400, 1), "w-last"))
	if _, ok := f.l.SubmitRequest("uni-a", "w-2"); ok {
		t.Fatal("w-2 still remembered past the window")
	}
	var n int
	for _, r := range f.l.canonicalRequests() {
		if r.Org == "uni-a" {
			n++
		}
	}
	if n != MaxRequestsPerOrg {
		t.Fatalf("uni-a has %d remembered requests, want the window's %d", n, MaxRequestsPerOrg)
	}
}

func TestReplaySnapshot(t *testing.T) {
	f := base(t)
	fillWindow(f, "uni-a")
	f.must(keyed(submit("uni-b", 9000, 5, 6), "b-1"))
	snap := snapshotOf(t, f.l)
	if !bytes.HasPrefix(snap, []byte(`{"v":2,`)) || !bytes.Contains(snap, []byte(`"requests":[`)) {
		t.Fatalf("snapshot does not carry the version 2 request records: %.80s", snap)
	}
	nl := New()
	if err := nl.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if nl.Hash() != f.l.Hash() || !bytes.Equal(snapshotOf(t, nl), snap) {
		t.Fatal("the restored ledger differs")
	}
	// Both go on identically: the same replays, and the same record
	// forgotten when the window moves (the order survived the round trip).
	next := [][]byte{
		mustEncode(t, keyed(submit("uni-a", 9100, 1), "w-0")),              // replay
		mustEncode(t, keyed(submit("uni-b", 9200, 5, 6), "b-1")),           // replay
		mustEncode(t, keyed(submit("uni-a", 9300, 2, 3), "after-restore")), // forgets w-0
		mustEncode(t, keyed(submit("uni-a", 9400, 1), "w-0")),              // new again
	}
	want := [][]string{{"uni-a-4"}, {"uni-b-3", "uni-b-4"}, {"uni-a-1028", "uni-a-1029"}, {"uni-a-1030"}}
	for i, b := range next {
		idx := f.idx + uint64(i) + 1
		r1, r2 := f.l.Apply(idx, b), nl.Apply(idx, b)
		if !r1.Applied() || !r2.Applied() || !slices.Equal(r1.TaskIDs, want[i]) || !slices.Equal(r2.TaskIDs, want[i]) || r1.Replayed != r2.Replayed {
			t.Fatalf("entry %d: %+v / %+v, want IDs %v", i, r1, r2, want[i])
		}
		if f.l.Hash() != nl.Hash() {
			t.Fatalf("entry %d: diverged after restore", i)
		}
	}
}

// TestHashCoversRequests: two states that differ only in a remembered
// request hash differently (the guard is replicated state), while a state
// with none hashes as before the guard existed (omitted field).
func TestHashCoversRequests(t *testing.T) {
	a, b := base(t), base(t)
	a.must(submit("uni-a", 5000, 7))
	b.must(keyed(submit("uni-a", 5000, 7), "k"))
	if a.l.Hash() == b.l.Hash() {
		t.Fatal("a remembered request is not part of the hash")
	}
	c := canonical{}
	if bytes.Contains(mustJSON(&c), []byte("requests")) {
		t.Fatal("an empty guard must not appear in the canonical encoding")
	}
}

// TestRestoreVersion1Snapshot restores testdata/snapshot-v1.json, written by
// the ledger before the replay guard existed (the busy fixture): it
// restores with no request records, hashes as it did then, and goes on.
func TestRestoreVersion1Snapshot(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var hdr struct {
		V       int    `json:"v"`
		Applied uint64 `json:"applied"`
		Hash    string `json:"hash"`
	}
	if err := json.Unmarshal(old, &hdr); err != nil || hdr.V != 1 {
		t.Fatalf("fixture header %+v, %v", hdr, err)
	}
	l := New()
	if err := l.Restore(bytes.NewReader(old)); err != nil {
		t.Fatal(err)
	}
	if l.Hash() != hdr.Hash || l.AppliedIndex() != hdr.Applied {
		t.Fatalf("restored hash %s index %d, want the recorded %s %d", l.Hash(), l.AppliedIndex(), hdr.Hash, hdr.Applied)
	}
	if l.Hash() != busy(t).l.Hash() {
		t.Fatal("the version 1 fixture no longer matches the busy fixture's state")
	}
	if len(l.canonicalRequests()) != 0 {
		t.Fatal("a version 1 snapshot restored with request records")
	}
	// It goes on with the guard, and snapshots as version 2.
	c := mustEncode(t, keyed(submit("uni-a", 9000, 5), "after-upgrade"))
	r1 := l.Apply(l.AppliedIndex()+1, c)
	h := l.Hash()
	r2 := l.Apply(l.AppliedIndex()+1, c)
	if !r1.Applied() || r1.Replayed || !r2.Replayed || !slices.Equal(r1.TaskIDs, r2.TaskIDs) || l.Hash() != h {
		t.Fatalf("after restore: %+v then %+v", r1, r2)
	}
	if snap := snapshotOf(t, l); !bytes.HasPrefix(snap, []byte(`{"v":2,`)) {
		t.Fatalf("snapshot after restore: %.20s", snap)
	}
}

func TestRestoreRejectsBadRequestRecords(t *testing.T) {
	f := base(t)
	f.must(keyed(submit("uni-a", 5000, 7, 8), "a-1"))
	f.must(keyed(submit("uni-a", 5100, 9), "a-2"))
	f.must(keyed(submit("uni-b", 5200, 9), "b-1"))
	good := snapshotOf(t, f.l)
	v1, err := os.ReadFile("testdata/snapshot-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		snap []byte
		want string
	}{
		{"version 1 carrying requests", resealed(t, v1, func(s *snapshotFile) {
			s.State.Requests = []*SubmitRecord{{Org: "uni-a", RequestID: "x", Index: 3, First: 1, Count: 1, Digest: strings.Repeat("a", 64)}}
		}), "version 1 has no request records"},
		{"null record", resealed(t, good, func(s *snapshotFile) { s.State.Requests[0] = nil }), "null"},
		{"unknown organisation", resealed(t, good, func(s *snapshotFile) { s.State.Requests[0].Org = "ghost" }), "unknown organisation"},
		{"the same request twice", resealed(t, good, func(s *snapshotFile) {
			r := *s.State.Requests[0]
			r.Index = s.State.Requests[2].Index + 1
			s.State.Requests = append(s.State.Requests, &r)
		}), "twice"},
		{"not in log order", resealed(t, good, func(s *snapshotFile) {
			s.State.Requests[0], s.State.Requests[1] = s.State.Requests[1], s.State.Requests[0]
		}), "log order"},
		{"bad request ID", resealed(t, good, func(s *snapshotFile) { s.State.Requests[0].RequestID = "a b" }), "request ID"},
		{"bad digest", resealed(t, good, func(s *snapshotFile) { s.State.Requests[0].Digest = "zz" }), "out of range"},
		{"names tasks never submitted", resealed(t, good, func(s *snapshotFile) { s.State.Requests[1].Count = 50 }), "beyond"},
		{"tampered record", bytes.Replace(good, []byte(`"request_id":"a-1"`), []byte(`"request_id":"a-9"`), 1), "does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := base(t).l
			before, idx := l.Hash(), l.AppliedIndex()
			err := l.Restore(bytes.NewReader(tc.snap))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
			if l.Hash() != before || l.AppliedIndex() != idx {
				t.Fatal("a rejected snapshot changed the ledger")
			}
		})
	}
}
