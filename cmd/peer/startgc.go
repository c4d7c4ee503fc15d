package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// A `peer run` process collects its garbage less often until its peer is
// ready (issue 17, forming 100 peers). A new peer's start (package init,
// libp2p, the stores, the join and catch-up) grows its heap from nothing
// to about 20 MiB, and at the runtime's default (GOGC=100, a 4 MiB
// minimum goal) that took several collections: a fifth of a joiner's own
// CPU until ready at 50 peers on one host (docs/BENCHMARKS.md, "Forming
// 100 peers, session 11"). At startGCPercent the goals are five times the
// live heap, so a small start takes one or two.
//
// A restart of a large state (a restore and replay of hundreds of MiB)
// must not hold five times its live heap: after every collection the
// live heap is checked, and from startGCHeapCap on the default comes
// back at once, so the start's heap exceeds the default's by at most
// about startGCPercent/100 × startGCHeapCap. The default comes back at
// ready in any case. An operator's GOGC is left as set.
const (
	startGCPercent = 400
	startGCHeapCap = 32 << 20
)

// relaxStartGC sets the start's GOGC and returns the function that puts
// the default back (safe to call more than once).
func relaxStartGC() (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	var done atomic.Bool
	old := debug.SetGCPercent(startGCPercent)
	restore = func() {
		if done.CompareAndSwap(false, true) {
			debug.SetGCPercent(old)
		}
	}
	watchLiveHeap(func(live uint64) bool {
		if done.Load() {
			return false
		}
		if live >= startGCHeapCap {
			restore()
			return false
		}
		return true
	})
	return restore
}

// watchLiveHeap calls check with the live heap after every collection
// while it returns true.
func watchLiveHeap(check func(live uint64) bool) {
	// Not a tiny allocation: the runtime may batch those, and their
	// cleanups need not run.
	type sentinel struct {
		_ *int
		_ [48]byte
	}
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(sentinel), func(struct{}) {
			if check(liveHeap()) {
				arm()
			}
		}, struct{}{})
	}
	arm()
}

// liveHeap is the heap the last collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
