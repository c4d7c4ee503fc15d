package ledger

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// fuzzSeeds are valid commands of every kind against the busy fixture, plus
// a few near misses. They are also committed under testdata/fuzz/FuzzApply
// (regenerate with LEDGER_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus).
func fuzzSeeds(t testing.TB) [][]byte {
	withBody := func(c Command, set func(*Command)) Command { set(&c); return c }
	cmds := []Command{
		register("uni-c", 50_000, mspec("y1", 800, 40_000)),
		withBody(act("uni-a", 9000), func(c *Command) { c.AddMachine = &AddMachine{Machine: mspec("m3", 10, 10)} }),
		withBody(act("uni-b", 9000), func(c *Command) { c.RemoveMachine = &RemoveMachine{Machine: "uni-b/x1"} }),
		withBody(act("uni-b", 9000), func(c *Command) { c.SetLimit = &SetLimit{LimitMilliW: 1} }),
		submit("uni-b", 9000, 5, 6),
		withBody(act("uni-a", 9000), func(c *Command) { c.CancelTask = &CancelTask{Task: "uni-a-1"} }),
		decide("uni-b", 9000, alloc("uni-a-3", "uni-b/x1"), preempt("uni-b-1", "uni-a/m2", "uni-a-1")),
		started("uni-a", "uni-a-1", "uni-a/m2", 9000),
		stopped("uni-a", "uni-b-1", "uni-a/m2", 9000, 77, &CheckpointData{Hash: "h1", ProgressMFlop: 10, Holders: []string{peerOf("uni-a")}}),
		ended("uni-a", "uni-a-1", "uni-a/m2", 9000, 5, false),
		ended("uni-a", "uni-a-1", "uni-a/m2", 9000, 5, true),
		heartbeat("uni-a", "uni-a/m1", 9000),
		lost("uni-b", "uni-a/m2", 9000),
		ckpt("uni-a", "uni-a-1", "uni-a/m2", 9000, 9999),
	}
	// The replay guard (after the older seeds, so that their corpus files
	// keep their names): a resend of fuzzBase's keyed submit (a replay),
	// the same key for other tasks, a new key, another organisation's.
	keyedCmds := []Command{
		keyed(submit("uni-a", 9000, 11, 12), "fuzz-key"),
		keyed(submit("uni-a", 9000, 11), "fuzz-key"),
		keyed(submit("uni-a", 9000, 11, 12), "fuzz-key-2"),
		keyed(submit("uni-b", 9000, 11, 12), "fuzz-key"),
	}
	var out [][]byte
	encode := func(cs []Command) {
		for _, c := range cs {
			b, err := EncodeCommand(c)
			if err != nil {
				t.Fatalf("seed %s: %v", c.Kind(), err)
			}
			out = append(out, b)
		}
	}
	encode(cmds)
	out = append(out,
		[]byte(`{"v":2,"org":"x"}`),
		[]byte(`{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"set_limit":{"limit_mw":1},"heartbeat":{"machine":"uni-a/m1"}}`),
		[]byte(`{"v":1,"org":"uni-b","peer":"12D3KooWunixb","at_ms":1,"decisions":{"view_index":0,"decisions":[{"kind":"preempt","task":"uni-a-2","machine":"uni-a/m2","victim":"uni-a-2"}]}}`),
		[]byte(`[]`),
	)
	encode(keyedCmds)
	out = append(out,
		[]byte(`{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":1,"submit_tasks":{"request_id":"bad key","tasks":[{"size_mflop":1,"spec":{}}]}}`),
	)
	// Reports batches (batch.go): accepted and refused items mixed, a
	// start and an end of one run, and near misses (an empty item, two
	// bodies in one item, another organisation's machine).
	encode([]Command{
		reports("uni-a", 9000,
			item(ckpt("uni-a", "uni-a-1", "uni-a/m2", 9000, 9999)),
			item(ended("uni-a", "uni-a-1", "uni-a/m2", 9000, 5, false)),
			item(ended("uni-a", "uni-a-1", "uni-a/m2", 9000, 5, false)),
			item(stopped("uni-a", "uni-b-1", "uni-a/m2", 9000, 77, nil))),
		reports("uni-b", 9000, item(started("uni-b", "uni-a-3", "uni-b/x1", 9000)), item(started("uni-b", "uni-b-1", "uni-b/x1", 9000))),
	})
	out = append(out,
		[]byte(`{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":9000,"reports":{"items":[{},{"task_started":{"task":"uni-a-3","machine":"uni-a/m1"},"heartbeat":{"machine":"uni-a/m1"}},{"task_ended":{"task":"uni-b-1","machine":"uni-b/x1","exit_code":0,"energy_mj":1,"source":"rapl"}}]}}`),
	)
	return out
}

// fuzzBase is the busy fixture plus a keyed submit of uni-a (request ID
// "fuzz-key"), so that the fuzzer reaches replays.
func fuzzBase(t testing.TB) *fed {
	f := busy(t)
	f.must(keyed(submit("uni-a", 8500, 11, 12), "fuzz-key"))
	return f
}

// FuzzApply feeds arbitrary bytes to Apply on a ledger holding every kind of
// record (running, preempted, done, lost, a remembered keyed submit).
// Apply must not panic, the invariants must hold, a rejected or replayed
// entry must leave the hash unchanged (a replay with the original task
// IDs), and whatever decodes must re-encode to a fixed point.
func FuzzApply(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	fuzzApply(f, snapshotOf(f, fuzzBase(f).l))
}

// fuzzApply is FuzzApply's property on the ledger restored from snap.
func fuzzApply(f *testing.F, snap []byte) {
	f.Fuzz(func(t *testing.T, data []byte) {
		l := New()
		if err := l.Restore(bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		if c, err := DecodeCommand(data); err == nil {
			b1, err := EncodeCommand(c)
			if err != nil {
				t.Fatalf("decoded command does not re-encode: %v", err)
			}
			c2, err := DecodeCommand(b1)
			if err != nil {
				t.Fatalf("re-encoded command does not decode: %v", err)
			}
			if b2, _ := EncodeCommand(c2); !bytes.Equal(b1, b2) {
				t.Fatalf("encoding is not a fixed point:\n%s\n%s", b1, b2)
			}
		} else if CodeOf(err) == "" {
			t.Fatalf("decode error without a code: %v", err)
		}
		// Twice: the second application sees the state the first left.
		for i := uint64(1); i <= 2; i++ {
			before := l.Hash()
			r := l.Apply(l.AppliedIndex()+1, data)
			if err := l.CheckInvariants(); err != nil {
				t.Fatalf("invariants after %q: %v", data, err)
			}
			if !r.Applied() && l.Hash() != before {
				t.Fatalf("rejected entry changed the state: %v", r.Err)
			}
			if r.Kind == KindReports && r.Applied() && r.AcceptedReports() == 0 && l.Hash() != before {
				t.Fatalf("a reports batch whose items were all refused changed the state: %+v", r.Reports)
			}
			if r.Replayed {
				if l.Hash() != before {
					t.Fatalf("replayed entry changed the state: %v", r.Notes)
				}
				c, _ := DecodeCommand(data)
				rec, ok := l.SubmitRequest(c.Org, c.SubmitTasks.RequestID)
				if !ok || !slices.Equal(rec.TaskIDs(), r.TaskIDs) {
					t.Fatalf("replay returned %v, the record holds %v", r.TaskIDs, rec.TaskIDs())
				}
			} else if i == 2 && r.Applied() && r.Kind == KindSubmitTasks {
				if c, _ := DecodeCommand(data); c.SubmitTasks.RequestID != "" {
					t.Fatalf("a keyed submit applied twice was not replayed: %v", r.TaskIDs)
				}
			}
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzApply from fuzzSeeds
// when LEDGER_WRITE_CORPUS=1; otherwise it checks the committed corpus is
// present.
func TestWriteFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzApply")
	seeds := fuzzSeeds(t)
	if os.Getenv("LEDGER_WRITE_CORPUS") == "1" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("committed fuzz corpus: %v", err)
	}
	if len(entries) < len(seeds) {
		t.Fatalf("%d corpus files, want at least %d", len(entries), len(seeds))
	}
}
