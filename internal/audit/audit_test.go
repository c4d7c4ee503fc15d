package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/consensus"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Test federation: a owns a/m1 (100 W) and a/m2 (150 W), limit 300 W; b
// owns b/x1 (120 W), limit 200 W.
func peerOf(org string) string { return "12D3KooW" + strings.Repeat(org, 8) }

func env(org string, at int64) ledger.Command {
	return ledger.Command{V: ledger.CommandVersion, Org: org, Peer: peerOf(org), AtMs: at}
}

func enc(t *testing.T, c ledger.Command) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// commands is a valid history: registrations, submits, a decisions batch
// whose second allocation would put b over its limit (refused by Apply),
// starts, ends with energy, and a limit change below b's PI (rejected).
func commands(t *testing.T) [][]byte {
	t.Helper()
	reg := func(org string, lim int64, ms ...ledger.MachineSpec) []byte {
		c := env(org, 1000)
		c.RegisterOrg = &ledger.RegisterOrg{LimitMilliW: lim, Machines: ms}
		return enc(t, c)
	}
	sub := func(org string, n int) []byte {
		c := env(org, 2000)
		c.SubmitTasks = &ledger.SubmitTasks{}
		for i := 0; i < n; i++ {
			c.SubmitTasks.Tasks = append(c.SubmitTasks.Tasks, ledger.TaskSpec{SizeMFlop: 1000, Spec: ledger.Spec{Argv: []string{"/bin/true"}}})
		}
		return enc(t, c)
	}
	dec := func(ds ...ledger.Decision) []byte {
		c := env("a", 3000)
		c.Decisions = &ledger.Decisions{Decisions: ds}
		return enc(t, c)
	}
	alloc := func(task, m string) ledger.Decision {
		return ledger.Decision{Kind: ledger.DecideAllocate, Task: task, Machine: m}
	}
	start := func(org, task, m string) []byte {
		c := env(org, 4000)
		c.TaskStarted = &ledger.TaskStarted{Task: task, Machine: m}
		return enc(t, c)
	}
	end := func(org, task, m string, mj int64) []byte {
		c := env(org, 5000)
		c.TaskEnded = &ledger.TaskEnded{Task: task, Machine: m, EnergyMilliJ: mj, Source: ledger.EnergyDeclared}
		return enc(t, c)
	}
	limit := func(org string, mw int64) []byte {
		c := env(org, 4500)
		c.SetLimit = &ledger.SetLimit{LimitMilliW: mw}
		return enc(t, c)
	}
	return [][]byte{
		reg("a", 300_000, ledger.MachineSpec{Name: "m1", MFLOPS: 1000, BusyMilliW: 100_000}, ledger.MachineSpec{Name: "m2", MFLOPS: 2000, BusyMilliW: 150_000}),
		reg("b", 200_000, ledger.MachineSpec{Name: "x1", MFLOPS: 1500, BusyMilliW: 120_000}),
		sub("b", 2),
		// b-2 on a/m2 would take b to 270 W > 200 W: refused.
		dec(alloc("b-1", "b/x1"), alloc("b-2", "a/m2")),
		start("b", "b-1", "b/x1"),
		// Below b's PI of 120 W: rejected (limit_exceeded).
		limit("b", 100_000),
		end("b", "b-1", "b/x1", 7_000),
		dec(alloc("b-2", "a/m1")),
		start("a", "b-2", "a/m1"),
		end("a", "b-2", "a/m1", 9_000),
	}
}

// built is the history as raft would store it: a configuration entry
// first, a no-op after each election, commands in between.
type entry struct {
	index, term uint64
	typ         raft.LogType
	data        []byte
}

func history(t *testing.T) []entry {
	t.Helper()
	es := []entry{{1, 1, raft.LogConfiguration, nil}, {2, 2, raft.LogNoop, nil}}
	idx := uint64(3)
	for i, c := range commands(t) {
		term := uint64(2)
		if i >= 5 {
			term = 3
		}
		if i == 5 {
			es = append(es, entry{idx, 3, raft.LogNoop, nil})
			idx++
		}
		es = append(es, entry{idx, term, raft.LogCommand, c})
		idx++
	}
	return es
}

// ledgerAt applies the command entries of es with an index ≤ upTo.
func ledgerAt(es []entry, upTo uint64) *ledger.Ledger {
	l := ledger.New()
	for _, e := range es {
		if e.index <= upTo && e.typ == raft.LogCommand {
			l.Apply(e.index, e.data)
		}
	}
	return l
}

// raftDir writes es to a real bolt log store and each snapshot with raft's
// own file snapshot store.
func raftDir(t testing.TB, es []entry, snaps ...snap) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, consensus.RaftDBFile)})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if err := store.StoreLog(&raft.Log{Index: e.index, Term: e.term, Type: e.typ, Data: e.data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if len(snaps) > 0 {
		fs, err := raft.NewFileSnapshotStoreWithLogger(dir, 10, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range snaps {
			sink, err := fs.Create(raft.SnapshotVersionMax, s.index, s.term, raft.Configuration{}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sink.Write(s.data); err != nil {
				t.Fatal(err)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
			if s.damage {
				p := filepath.Join(dir, consensus.SnapshotDir, sink.ID(), "state.bin")
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)/2] ^= 0x01
				if err := os.WriteFile(p, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return dir
}

type snap struct {
	index, term uint64
	data        []byte
	// damage flips a byte of state.bin on disk after raft wrote it (and
	// its CRC).
	damage bool
}

func snapshotOf(t *testing.T, l *ledger.Ledger) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := l.WriteSnapshot(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rehash rewrites a ledger snapshot's state with edit and recomputes the
// recorded hash the way the ledger does (sha256 of the state's JSON line),
// so that only the ledger's own validation can catch the edit.
func rehash(t *testing.T, data []byte, edit func(state string) string) []byte {
	t.Helper()
	var f struct {
		V       int             `json:"v"`
		Applied uint64          `json:"applied"`
		Hash    string          `json:"hash"`
		State   json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	hash := func(state []byte) string {
		h := sha256.Sum256(append(append([]byte(nil), state...), '\n'))
		return hex.EncodeToString(h[:])
	}
	// The technique is sound only if it reproduces the recorded hash.
	if hash(f.State) != f.Hash {
		t.Fatalf("recomputed hash %s, recorded %s", hash(f.State), f.Hash)
	}
	edited := edit(string(f.State))
	if edited == string(f.State) {
		t.Fatal("the edit changed nothing")
	}
	f.State, f.Hash = json.RawMessage(edited), hash([]byte(edited))
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerifyHistories(t *testing.T) {
	full := history(t)
	last := full[len(full)-1].index
	want := ledgerAt(full, last)
	// Index of the entry that starts b-1 (the first task_started).
	var firstStart uint64
	for _, e := range full {
		if e.typ == raft.LogCommand && bytes.Contains(e.data, []byte(`"task_started"`)) && firstStart == 0 {
			firstStart = e.index
		}
	}
	// A snapshot taken at index 8 (b-1 running on b/x1, PI_b = 120 W).
	const at = 8
	valid := snapshotOf(t, ledgerAt(full, at))
	overLimit := rehash(t, valid, func(s string) string {
		return strings.Replace(s, `"limit_mw":200000`, `"limit_mw":100000`, 1)
	})
	divergent := func() []byte {
		l := ledgerAt(full, at)
		c := env("a", 9999)
		c.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: 5, Spec: ledger.Spec{Argv: []string{"x"}}}}}
		if r := l.Apply(at+1, enc(t, c)); !r.Applied() {
			t.Fatal(r.Err)
		}
		b := snapshotOf(t, l)
		// Same applied index as the replay at 8, different state.
		return bytes.Replace(b, []byte(fmt.Sprintf(`"applied":%d`, at+1)), []byte(fmt.Sprintf(`"applied":%d`, at)), 1)
	}()

	without := func(skip uint64) []entry {
		var out []entry
		for _, e := range full {
			if e.index != skip {
				out = append(out, e)
			}
		}
		return out
	}
	after := func(from uint64) []entry {
		var out []entry
		for _, e := range full {
			if e.index > from {
				out = append(out, e)
			}
		}
		return out
	}
	termDown := append([]entry(nil), full...)
	termDown[9].term = 1
	garbage := append([]entry(nil), full...)
	garbage = append(garbage, entry{last + 1, 3, raft.LogCommand, []byte(`{"v":1,"org":"a"`)})

	for _, c := range []struct {
		name    string
		dir     string
		opt     Options
		kind    string // the violation's kind; "" for none
		atIndex uint64
		message string // in the violation
		check   func(t *testing.T, r *Report)
	}{
		{name: "valid history", dir: raftDir(t, full), check: func(t *testing.T, r *Report) {
			if r.Hash != want.Hash() || r.AppliedIndex != last || r.Index != last || r.BaseIndex != 0 || r.Entries != len(full) {
				t.Errorf("report %+v; want hash %s at %d from the empty ledger", r, want.Hash(), last)
			}
			// Apply's validation refused the over-limit decision and the
			// limit below PI: refusals, not violations.
			if r.Commands != 10 || r.Checked != 10 || r.Rejected != 1 || r.RejectedByCode["limit_exceeded"] != 1 || r.RejectedByKind["set_limit limit_exceeded"] != 1 || r.RefusedDecisions != 1 {
				t.Errorf("commands %d rejected %d %v refused decisions %d; want 10, 1 limit_exceeded, 1", r.Commands, r.Rejected, r.RejectedByCode, r.RefusedDecisions)
			}
			if len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "commit index") {
				t.Errorf("no note about the uncommitted tail: %v", r.Notes)
			}
		}},
		{name: "garbage command is rejected, not a violation", dir: raftDir(t, garbage), check: func(t *testing.T, r *Report) {
			if r.Rejected != 2 || r.RejectedByCode["malformed"] != 1 || r.Hash != want.Hash() || r.AppliedIndex != last+1 {
				t.Errorf("report %+v", r)
			}
		}},
		{name: "up to an index", dir: raftDir(t, full), opt: Options{UpTo: at}, check: func(t *testing.T, r *Report) {
			if r.Index != at || r.Hash != ledgerAt(full, at).Hash() || len(r.Notes) != 0 {
				t.Errorf("report %+v", r)
			}
		}},
		{name: "valid snapshot inside a complete log", dir: raftDir(t, full, snap{at, 2, valid, false}), check: func(t *testing.T, r *Report) {
			if r.BaseIndex != 0 || len(r.Snapshots) != 1 || !r.Snapshots[0].Matched || r.Hash != want.Hash() {
				t.Errorf("report %+v", r)
			}
		}},
		{name: "compacted log continues a snapshot", dir: raftDir(t, after(at), snap{at, 2, valid, false}), check: func(t *testing.T, r *Report) {
			if r.BaseIndex != at || !r.Snapshots[0].Base || r.Hash != want.Hash() || r.Entries != int(last-at) {
				t.Errorf("report %+v", r)
			}
		}},
		{name: "missing entry", dir: raftDir(t, without(7)), kind: KindLog, atIndex: 7, message: "missing"},
		{name: "term goes down", dir: raftDir(t, termDown), kind: KindLog, atIndex: termDown[9].index, message: "never go down"},
		{name: "snapshot over a limit", dir: raftDir(t, full, snap{at, 2, overLimit, false}), kind: KindSnapshot, atIndex: at, message: "limit"},
		{name: "snapshot over a limit as the base", dir: raftDir(t, after(at), snap{at, 2, overLimit, false}), kind: KindSnapshot, atIndex: at, message: "limit"},
		{name: "damaged snapshot", dir: raftDir(t, full, snap{at, 2, valid, true}), kind: KindSnapshot, atIndex: at, message: "CRC"},
		{name: "snapshot disagrees with the log", dir: raftDir(t, full, snap{at, 2, divergent, false}), kind: KindSnapshot, atIndex: at, message: "the replay reached"},
		{name: "first entry that breaks a stricter check", dir: raftDir(t, full),
			opt: Options{Check: func(l *ledger.Ledger) error {
				if len(l.Tasks(ledger.TaskFilter{States: []ledger.TaskState{ledger.TaskRunning}})) > 0 {
					return errors.New("a task runs")
				}
				return nil
			}},
			kind: KindInvariant, atIndex: firstStart, message: "a task runs", check: func(t *testing.T, r *Report) {
				if r.Violation.Command != string(ledger.KindTaskStarted) {
					t.Errorf("violation %+v, want after task_started", r.Violation)
				}
			}},
		{name: "checked every 3 commands", dir: raftDir(t, full),
			opt: Options{CheckEvery: 3, Check: func(l *ledger.Ledger) error {
				if len(l.Tasks(ledger.TaskFilter{States: []ledger.TaskState{ledger.TaskRunning}})) > 0 {
					return errors.New("a task runs")
				}
				return nil
			}},
			// Commands 1-3 (indexes 3-5) are checked at 5, 4-6 (indexes 6,
			// 7 and 9, a no-op at 8) at 9: b-1 starts at 7.
			kind: KindInvariant, atIndex: 9, message: "entries 6-9"},
		{name: "valid history checked every 4 commands", dir: raftDir(t, full), opt: Options{CheckEvery: 4}, check: func(t *testing.T, r *Report) {
			// 10 commands: checked after the 4th, the 8th and the last.
			if r.Checked != 3 || r.Hash != want.Hash() {
				t.Errorf("checked %d states (want 3), hash %s", r.Checked, r.Hash)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Verify(context.Background(), c.dir, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.kind == "" && r.Violation != nil:
				t.Fatalf("violation %v", r.Violation)
			case c.kind != "" && r.Violation == nil:
				t.Fatalf("no violation; report %+v", r)
			case c.kind != "" && (r.Violation.Kind != c.kind || r.Violation.Index != c.atIndex || !strings.Contains(r.Violation.Message, c.message)):
				t.Fatalf("violation %+v, want %s at %d mentioning %q", r.Violation, c.kind, c.atIndex, c.message)
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

// What prevents an audit is an error, not a report.
func TestVerifyErrors(t *testing.T) {
	full := history(t)
	var from5 []entry
	for _, e := range full {
		if e.index >= 5 {
			from5 = append(from5, e)
		}
	}
	for _, c := range []struct {
		name, dir string
		opt       Options
		want      string
	}{
		{"no raft.db", t.TempDir(), Options{}, "no Raft log"},
		{"compacted without a snapshot", raftDir(t, from5), Options{}, "no snapshot"},
		{"up to past the end", raftDir(t, full), Options{UpTo: 999}, "past what this peer holds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Verify(context.Background(), c.dir, c.opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error about %q", err, c.want)
			}
		})
	}
	t.Run("locked by a running peer", func(t *testing.T) {
		dir := raftDir(t, full)
		store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, consensus.RaftDBFile)})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if _, err := Verify(context.Background(), dir, Options{}); !errors.Is(err, ErrInUse) {
			t.Fatalf("got %v, want ErrInUse", err)
		}
	})
}

// Verify opens nothing for writing: the files are byte for byte the same
// afterwards.
func TestVerifyIsReadOnly(t *testing.T) {
	full := history(t)
	dir := raftDir(t, full, snap{8, 2, snapshotOf(t, ledgerAt(full, 8)), false})
	before := digestTree(t, dir)
	if _, err := Verify(context.Background(), dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if after := digestTree(t, dir); after != before {
		t.Fatalf("the raft directory changed:\n%s\n---\n%s", before, after)
	}
}

func digestTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			fmt.Fprintf(&b, "%s/\n", p)
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %x\n", p, h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestVerifyStopsAtANewerCommand: an entry of a command version above this
// build's is not skipped (the replay would then describe a diverged
// replica): verification stops there with an error that names it.
func TestVerifyStopsAtANewerCommand(t *testing.T) {
	es := history(t)
	last := es[len(es)-1]
	newer := `{"v":` + strconv.Itoa(ledger.MaxCommandVersion()+1) + `,"org":"x","peer":"p","at_ms":1,"future_kind":{}}`
	es = append(es, entry{last.index + 1, last.term, raft.LogCommand, []byte(newer)})
	_, err := Verify(context.Background(), raftDir(t, es), Options{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("log entry %d is command version %d", last.index+1, ledger.MaxCommandVersion()+1)) {
		t.Fatalf("verify: %v, want it to stop at the newer entry", err)
	}
}
