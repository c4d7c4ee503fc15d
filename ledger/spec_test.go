package ledger

import (
	"bytes"
	"strings"
	"testing"
)

const (
	digestA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	digestB = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
)

// TestSpecNameAndInputDigests covers the two optional Spec fields: what is
// accepted, what is rejected, and that an accepted value reaches the task.
func TestSpecNameAndInputDigests(t *testing.T) {
	withSpec := func(set func(*Spec)) Command {
		c := submit("uni-a", 3000, 7)
		set(&c.SubmitTasks.Tasks[0].Spec)
		return c
	}
	cases := []struct {
		name string
		set  func(*Spec)
		code Code // "" = accepted
	}{
		{name: "neither field", set: func(*Spec) {}},
		{name: "one digest per input", set: func(s *Spec) { s.InputDigests = []string{digestA} }},
		{name: "two inputs, two digests, same content twice", set: func(s *Spec) {
			s.Inputs = []string{"a", "b"}
			s.InputDigests = []string{digestA, digestA}
		}},
		{name: "a name", set: func(s *Spec) { s.Name = "sweep n=3 (α)" }},
		{name: "name of the maximum length", set: func(s *Spec) { s.Name = strings.Repeat("x", MaxTaskNameBytes) }},
		{name: "fewer digests than inputs", set: func(s *Spec) {
			s.Inputs = []string{"a", "b"}
			s.InputDigests = []string{digestA}
		}, code: CodeMalformed},
		{name: "digests without inputs", set: func(s *Spec) {
			s.Inputs = nil
			s.InputDigests = []string{digestA}
		}, code: CodeMalformed},
		{name: "uppercase digest", set: func(s *Spec) { s.InputDigests = []string{strings.ToUpper(digestA)} }, code: CodeMalformed},
		{name: "short digest", set: func(s *Spec) { s.InputDigests = []string{digestA[:63]} }, code: CodeMalformed},
		{name: "non-hex digest", set: func(s *Spec) { s.InputDigests = []string{"g" + digestA[1:]} }, code: CodeMalformed},
		{name: "name too long", set: func(s *Spec) { s.Name = strings.Repeat("x", MaxTaskNameBytes+1) }, code: CodeMalformed},
		{name: "name with a newline", set: func(s *Spec) { s.Name = "a\nb" }, code: CodeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := base(t)
			before := f.l.Hash()
			c := withSpec(tc.set)
			_, encErr := EncodeCommand(c)
			r := f.apply(c)
			if tc.code != "" {
				if r.Err == nil || r.Err.Code != tc.code {
					t.Fatalf("applied %+v, want %s", r, tc.code)
				}
				if CodeOf(encErr) != tc.code {
					t.Fatalf("EncodeCommand: %v, want %s", encErr, tc.code)
				}
				if f.l.Hash() != before {
					t.Fatal("a rejected submission changed the state")
				}
				return
			}
			if !r.Applied() || encErr != nil {
				t.Fatalf("rejected: %v / %v", r.Err, encErr)
			}
			got := mustTask(t, f.l, r.TaskIDs[0]).Spec
			want := c.SubmitTasks.Tasks[0].Spec
			if got.Name != want.Name || strings.Join(got.InputDigests, ",") != strings.Join(want.InputDigests, ",") {
				t.Fatalf("task spec %+v, submitted %+v", got, want)
			}
		})
	}
}

// TestSpecOldEncodingUnchanged: a spec without the optional fields encodes
// exactly as before they existed, and an entry written before them still
// decodes, so old logs and snapshots replay to the same hashes.
func TestSpecOldEncodingUnchanged(t *testing.T) {
	b, err := EncodeCommand(submit("uni-a", 3000, 7))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"name"`, `"input_digests"`} {
		if bytes.Contains(b, []byte(key)) {
			t.Fatalf("encoding without the field carries %s: %s", key, b)
		}
	}
	old := `{"v":1,"org":"uni-a","peer":"12D3KooWunixa","at_ms":3000,"submit_tasks":{"tasks":[{"size_mflop":7,"spec":{"argv":["./work"],"inputs":["in/data.csv"],"outputs":["out.txt"]}}]}}`
	c, err := DecodeCommand([]byte(old))
	if err != nil {
		t.Fatalf("old encoding rejected: %v", err)
	}
	again, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != old {
		t.Fatalf("re-encoding of an old command differs:\n%s\n%s", old, again)
	}
}

// JSON cannot carry invalid UTF-8 into the log (the encoder replaces it), so
// the proposer's check is the one that matters.
func TestSpecNameNotUTF8RejectedAtEncode(t *testing.T) {
	c := submit("uni-a", 3000, 7)
	c.SubmitTasks.Tasks[0].Spec.Name = "a\xffb"
	if _, err := EncodeCommand(c); CodeOf(err) != CodeMalformed {
		t.Fatalf("EncodeCommand: %v, want malformed", err)
	}
}

func TestSpecCloneCopiesDigests(t *testing.T) {
	f := base(t)
	c := submit("uni-a", 3000, 7)
	c.SubmitTasks.Tasks[0].Spec.InputDigests = []string{digestA}
	id := f.must(c).TaskIDs[0]
	h := f.l.Hash()
	tk := mustTask(t, f.l, id)
	tk.Spec.InputDigests[0] = digestB
	if f.l.Hash() != h || mustTask(t, f.l, id).Spec.InputDigests[0] != digestA {
		t.Fatal("mutating a returned task's digests changed the ledger")
	}
}

func TestValidDigest(t *testing.T) {
	for d, want := range map[string]bool{
		digestA:                  true,
		"":                       false,
		digestA + "0":            false,
		strings.ToUpper(digestA): false,
		"z" + digestA[1:]:        false,
	} {
		if got := ValidDigest(d); got != want {
			t.Errorf("ValidDigest(%q) = %v, want %v", d, got, want)
		}
	}
}
