package leader

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// The leader's own commands (its scheduling pass, its retention duty)
// are appended with Replica.AppendAsLeader, which skips admission. They
// pass the same version rule as a proposal (Admit, admitVersion): a
// command of a version above 1 (forget_tasks is version 2; a decision may
// carry a newer field) is not appended while some member does not announce
// that it applies it, since that member would stop applying the log at it.
// The duty tries again at its next round; the refusal is logged at most
// once a minute per kind.

// errVersionHeld wraps the refusal of one of the leader's own commands by
// the version rule: the duty waits for the members' upgrade.
var errVersionHeld = errors.New("held back until every member applies its command version")

// ownVersionLogEvery bounds how often a held-back kind is logged.
const ownVersionLogEvery = time.Minute

// appendOwn appends the leader's own encoded command data once the version
// rule lets it (errVersionHeld otherwise, nothing appended).
func (l *Leader) appendOwn(ctx context.Context, r Replica, data []byte) (ledger.Result, error) {
	if err := l.admitOwnVersion(data); err != nil {
		return ledger.Result{}, err
	}
	return r.AppendAsLeader(ctx, data)
}

// admitOwnVersion applies admitVersion to an encoded command of the
// leader's. Version-1 commands, the common case, cost a look at the
// encoding's first field ("v" comes first: ledger.Command).
func (l *Leader) admitOwnVersion(data []byte) error {
	if commandVersion(data) <= ledger.CommandVersion {
		return nil
	}
	c, err := ledger.DecodeCommand(data)
	if err != nil {
		return fmt.Errorf("decode the leader's own command: %w", err)
	}
	if err := l.admitVersion(c); err != nil {
		l.ownVersion.note(l, c.Kind(), err)
		return fmt.Errorf("%s %w: %w", c.Kind(), errVersionHeld, err)
	}
	return nil
}

// commandVersion reads an encoded command's "v" (its first field); 0
// when it is not there.
func commandVersion(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0
	}
	if t, err := dec.Token(); err != nil || t != "v" {
		var hdr struct{ V int }
		_ = json.Unmarshal(data, &hdr)
		return hdr.V
	}
	var v int
	if err := dec.Decode(&v); err != nil {
		return 0
	}
	return v
}

// ownVersionLog rate-limits the log of held-back commands, per kind.
type ownVersionLog struct {
	mu         sync.Mutex
	last       map[ledger.Kind]time.Time
	suppressed map[ledger.Kind]int
}

func (o *ownVersionLog) note(l *Leader, kind ledger.Kind, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last, o.suppressed = map[ledger.Kind]time.Time{}, map[ledger.Kind]int{}
	}
	now := time.Now()
	if t, ok := o.last[kind]; ok && now.Sub(t) < ownVersionLogEvery {
		o.suppressed[kind]++
		return
	}
	o.last[kind] = now
	l.log.Warn("leader: own command held back by the version rule", "kind", kind, "err", err, "held_since_last_log", o.suppressed[kind])
	o.suppressed[kind] = 0
}
