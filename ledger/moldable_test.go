package ledger

import (
	"strings"
	"testing"
)

// TestMoldableValidate: the record's bounds, and the spec must run the
// chosen alternative (nodes as the gang's size, cpus, limit).
func TestMoldableValidate(t *testing.T) {
	alts := func() []Alternative {
		return []Alternative{{Nodes: 2, CPUs: 4, WallLimitMs: 1000}, {Nodes: 1, CPUs: 4, WallLimitMs: 2000, PredictedStartMs: 5, PredictedEndMs: 2005}}
	}
	one := Spec{WallLimitMs: 2000, TaskRequest: TaskRequest{CPUs: 4}}
	gang := Spec{WallLimitMs: 1000, TaskRequest: TaskRequest{CPUs: 4}, Gang: &Gang{Size: 2}}
	for _, c := range []struct {
		name string
		s    Spec
		m    Moldable
		want string
	}{
		{"one machine", one, Moldable{Alternatives: alts(), Chosen: 1}, ""},
		{"gang", gang, Moldable{Alternatives: alts(), Chosen: 0}, ""},
		{"not the chosen one", one, Moldable{Alternatives: alts(), Chosen: 0}, "its chosen alternative 0 is 2 of 4 for 1000 ms"},
		{"chosen out of range", one, Moldable{Alternatives: alts(), Chosen: 2}, "chosen 2 of 2"},
		{"too wide", one, Moldable{Alternatives: append(alts(), Alternative{Nodes: MaxGangSize + 1, WallLimitMs: 1}), Chosen: 1}, "nodes 1025"},
		{"negative cpus", one, Moldable{Alternatives: append(alts(), Alternative{Nodes: 1, CPUs: -1, WallLimitMs: 1}), Chosen: 1}, "cpus -1"},
		{"prediction backwards", one, Moldable{Alternatives: append(alts(), Alternative{Nodes: 1, WallLimitMs: 1, PredictedStartMs: 9, PredictedEndMs: 8}), Chosen: 1}, "predicted 9 to 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			s.Moldable = &c.m
			err := s.validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want != "" && (err == nil || err.Code != CodeMalformed || !strings.Contains(err.Msg, c.want)):
				t.Fatalf("got %v, want malformed %q", err, c.want)
			}
		})
	}
	// Clone shares nothing.
	m := &Moldable{Alternatives: alts()}
	c := m.Clone()
	c.Alternatives[0].Nodes = 9
	if m.Alternatives[0].Nodes != 2 || (*Moldable)(nil).Clone() != nil {
		t.Fatal("Clone shares the alternatives")
	}
}
