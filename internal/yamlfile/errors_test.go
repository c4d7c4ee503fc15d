package yamlfile

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestErrorListOrderOnceAndCap(t *testing.T) {
	l := ErrorList{File: "f.yaml"}
	if l.Err() != nil || l.Count() != 0 {
		t.Fatalf("empty list: err %v, count %d", l.Err(), l.Count())
	}
	late := &yaml.Node{Line: 9, Column: 3}
	early := &yaml.Node{Line: 2, Column: 5}
	l.At(late, "b", "late")
	l.Once(early, "a", fs.ErrNotExist, "early %d", 1)
	l.Once(early, "a", nil, "reported twice")
	err := l.Err()
	want := "f.yaml:2:5: a: early 1\nf.yaml:9:3: b: late"
	if err == nil || err.Error() != want {
		t.Fatalf("got %q, want %q (file order, Once once)", err, want)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("the cause of a problem is lost")
	}
	for i := 0; i < MaxErrors; i++ {
		l.Add(100+i, 0, "x", nil, "more")
	}
	if !l.Full() || l.Count() != MaxErrors+2 {
		t.Fatalf("full %v count %d, want true and %d", l.Full(), l.Count(), MaxErrors+2)
	}
	lines := strings.Split(l.Err().Error(), "\n")
	if len(lines) != MaxErrors+1 || lines[MaxErrors] != "f.yaml: 2 more errors not shown" {
		t.Errorf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

func TestErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{File: "j.yaml", Msg: "empty"}, "j.yaml: empty"},
		{Error{File: "j.yaml", Line: 3, Msg: "m"}, "j.yaml:3: m"},
		{Error{File: "j.yaml", Line: 3, Column: 7, Path: "tasks[0]", Msg: "m"}, "j.yaml:3:7: tasks[0]: m"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
