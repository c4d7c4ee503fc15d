package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestWantedTimerSlack(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", runTimerSlack, false},
		{"0", 0, false},
		{"50us", 50 * time.Microsecond, false},
		{"2ms", 2 * time.Millisecond, false},
		{"1s", time.Second, false},
		{"2s", 0, true},
		{"-1ms", 0, true},
		{"fast", 0, true},
		{"100", 0, true}, // no unit
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(envTimerSlack, tc.env)
			got, err := wantedTimerSlack()
			var ee *exitError
			if tc.bad != (err != nil) || (err != nil && (!errors.As(err, &ee) || ee.code != 2)) {
				t.Fatalf("%s=%q: err %v, want a usage error %v", envTimerSlack, tc.env, err, tc.bad)
			}
			if got != tc.want {
				t.Fatalf("%s=%q: %v, want %v", envTimerSlack, tc.env, got, tc.want)
			}
		})
	}
}

// TestRaiseTimerSlackOnlyFromMain: a test's call of run (no re-execution
// allowed in its context) never re-executes the test binary, and a bad
// variable is refused before anything else.
func TestRaiseTimerSlackOnlyFromMain(t *testing.T) {
	t.Setenv(envTimerSlack, "5ms")
	if err := raiseTimerSlack(context.Background(), slog.Default()); err != nil {
		t.Fatalf("raiseTimerSlack without permission: %v", err)
	}
	// Still here: it did not exec. A bad variable is an error either way.
	t.Setenv(envTimerSlack, "soon")
	if err := raiseTimerSlack(withReexec(context.Background()), slog.Default()); err == nil {
		t.Fatal("a bad COOPGRID_TIMER_SLACK was accepted")
	}
}
