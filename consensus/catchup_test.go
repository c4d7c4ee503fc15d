package consensus

import (
	"testing"
	"time"
)

// infoLog keeps the attributes of the last Info line.
type infoLog struct {
	msg   string
	attrs map[string]any
}

func (l *infoLog) Info(msg string, args ...any) {
	l.msg, l.attrs = msg, map[string]any{}
	for i := 0; i+1 < len(args); i += 2 {
		l.attrs[args[i].(string)] = args[i+1]
	}
}

// TestCatchUpLogsTheReplayOnce: the start's replay is logged once, when
// the FSM has seen the log's last index at start, with the number of
// entries from the first one applied; batches after it log nothing.
func TestCatchUpLogsTheReplayOnce(t *testing.T) {
	cases := []struct {
		name    string
		batches [][2]uint64 // first index, last seen
		entries uint64
		doneAt  int // the batch after which it is done, -1: never
	}{
		{"replay in three batches", [][2]uint64{{101, 150}, {151, 180}, {181, 200}, {201, 201}}, 100, 2},
		{"one batch past the end", [][2]uint64{{101, 210}}, 100, 0},
		{"not done yet", [][2]uint64{{101, 150}}, 0, -1},
		{"nothing to replay (a clean stop)", [][2]uint64{{201, 201}}, 0, 0},
		{"a snapshot installed past it", [][2]uint64{{500, 520}}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &catchUp{start: time.Now(), last: 200}
			for i, b := range tc.batches {
				log := &infoLog{}
				c = c.note(b[0], b[1], log)
				if done := c == nil; done != (i >= tc.doneAt && tc.doneAt >= 0) {
					t.Fatalf("after batch %d: done %v", i, done)
				}
				if i == tc.doneAt {
					if log.msg == "" || log.attrs["entries"] != tc.entries {
						t.Fatalf("logged %q %v, want %d entries", log.msg, log.attrs, tc.entries)
					}
				} else if log.msg != "" {
					t.Fatalf("batch %d logged %q", i, log.msg)
				}
			}
		})
	}
}
