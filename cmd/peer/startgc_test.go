package main

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func gcPercent() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestStartGC: until ready, GOGC is startGCPercent and restore puts the
// default back; a live heap of startGCHeapCap or more puts it back after a
// collection, before ready; an operator's GOGC is left as set.
func TestStartGC(t *testing.T) {
	t.Run("until ready", func(t *testing.T) {
		t.Setenv("GOGC", "")
		before := gcPercent()
		restore := relaxStartGC()
		if got := gcPercent(); got != startGCPercent {
			t.Fatalf("GOGC %d during the start, want %d", got, startGCPercent)
		}
		restore()
		restore()
		if got := gcPercent(); got != before {
			t.Fatalf("GOGC %d after ready, want %d back", got, before)
		}
	})
	t.Run("a large live heap", func(t *testing.T) {
		t.Setenv("GOGC", "")
		before := gcPercent()
		restore := relaxStartGC()
		defer restore()
		live := make([]byte, startGCHeapCap+(8<<20))
		for i := range live {
			live[i] = byte(i)
		}
		deadline := time.Now().Add(10 * time.Second)
		for gcPercent() != before {
			if time.Now().After(deadline) {
				t.Fatalf("GOGC still %d with %d MiB live, want %d back", gcPercent(), len(live)>>20, before)
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		runtime.KeepAlive(live)
	})
	t.Run("the operator's GOGC", func(t *testing.T) {
		t.Setenv("GOGC", "100")
		before := gcPercent()
		restore := relaxStartGC()
		defer restore()
		if got := gcPercent(); got != before {
			t.Fatalf("GOGC %d with the operator's set, want %d", got, before)
		}
	})
}
