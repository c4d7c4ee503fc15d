package ledger

import "sync"

// hashMemo keeps the state hash of one applied index. Every change of the
// state goes through Apply, which advances the applied index even when it
// refuses the command, or through Restore, which replaces the ledger and
// its memo: a hash computed at an applied index stays the state's hash
// until the index moves. Readers (View holds the replica's read lock, so
// several may ask at once) share the memo under its own mutex. The choice
// of memoising the full hash over an incremental one is argued in
// docs/LEDGER.md ("The state hash").
type hashMemo struct {
	mu      sync.Mutex
	valid   bool
	applied uint64
	hash    string
}

// get returns the hash of the state at applied, computing it with compute
// when the memo holds another index's (or none). A nil memo (a Ledger not
// made by New) computes every time.
func (m *hashMemo) get(applied uint64, compute func() string) string {
	if m == nil {
		return compute()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid || m.applied != applied {
		m.hash, m.applied, m.valid = compute(), applied, true
	}
	return m.hash
}
