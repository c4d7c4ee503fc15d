package api_test

import (
	"errors"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// TestEventLogPositions: what a position can still read, through
// appends, replays, evictions and a restored snapshot.
func TestEventLogPositions(t *testing.T) {
	l := api.NewEventLog(3)
	ev := func(task string) api.TaskEvent { return api.TaskEvent{Task: task, To: "queued", Reason: "submitted"} }
	l.Append(1, nil)
	l.Append(2, []api.TaskEvent{ev("a"), ev("b")})
	l.Append(2, []api.TaskEvent{ev("replayed")}) // not above the last index: ignored
	l.Append(4, []api.TaskEvent{ev("c")})
	ids := func(pos string) (string, error) {
		p, err := api.ParseEventPos(pos)
		if err != nil {
			t.Fatal(err)
		}
		evs, _, err := l.Read(p, 10)
		s := ""
		for _, e := range evs {
			s += e.Task + "@" + e.ID + " "
		}
		return s, err
	}
	for _, c := range []struct{ pos, want string }{
		{"0", "a@2.0 b@2.1 c@4.0 "}, {"2.0", "b@2.1 c@4.0 "}, {"2", "c@4.0 "}, {"3", "c@4.0 "}, {"4", ""}, {"9", ""},
	} {
		if got, err := ids(c.pos); err != nil || got != c.want {
			t.Errorf("after %s: %q, %v; want %q", c.pos, got, err, c.want)
		}
	}
	l.Append(5, []api.TaskEvent{ev("d")}) // evicts a (2.0)
	if _, err := ids("1"); !errors.Is(err, api.ErrEventsGone) {
		t.Errorf("after 1 once 2.0 is evicted: %v, want gone", err)
	}
	if got, err := ids("2.0"); err != nil || got != "b@2.1 c@4.0 d@5.0 " {
		t.Errorf("after 2.0 once it is evicted: %q, %v", got, err)
	}
	l.Reset(9) // a snapshot at 9 replaced the state
	for _, pos := range []string{"5", "8.3"} {
		if _, err := ids(pos); !errors.Is(err, api.ErrEventsGone) {
			t.Errorf("after %s, before the snapshot at 9: %v, want gone", pos, err)
		}
	}
	if got, err := ids("9"); err != nil || got != "" || l.Now().String() != "9" {
		t.Errorf("after 9: %q, %v, now %s", got, err, l.Now())
	}
	for _, bad := range []string{"", "x", "1.", "1.-2", "-1"} {
		if _, err := api.ParseEventPos(bad); err == nil {
			t.Errorf("ParseEventPos(%q) accepted", bad)
		}
	}
}
