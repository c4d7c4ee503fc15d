package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
)

// The replay guard of submissions. A client whose submit got no answer
// (timeout, leader change, connection reset) cannot know whether its tasks
// were queued; it resends the same SubmitTasks with the same RequestID, and
// the ledger answers a resend of an applied submit with the original task
// IDs instead of queuing the tasks again. The same holds for a command that
// reaches the log twice (a proposal retried inside the node after an
// unknown outcome, a replayed propose stream message): the second entry
// changes nothing.
//
// The remembered requests are replicated state (Hash, snapshots), kept per
// organisation for its last MaxRequestsPerOrg keyed submits. A resend that
// arrives after its record was forgotten is a new submit.

const (
	// MaxRequestIDLen bounds SubmitTasks.RequestID.
	MaxRequestIDLen = 128
	// MaxRequestsPerOrg is the replay window: how many keyed submits of one
	// organisation the ledger remembers. The oldest is forgotten when a new
	// one is applied beyond it.
	MaxRequestsPerOrg = 1024
)

// SubmitRecord is an applied keyed submit, remembered so that a resend of
// it is recognised. Its tasks are "<Org>-<First>" … "<Org>-<First+Count−1>":
// IDs of one submit are consecutive, so they need not be stored.
type SubmitRecord struct {
	Org       string `json:"org"`
	RequestID string `json:"request_id"`
	// Index is the log index of the submit that queued the tasks, AtMs the
	// proposer's clock then.
	Index uint64 `json:"index"`
	AtMs  int64  `json:"at_ms"`
	First uint64 `json:"first"`
	Count int    `json:"count"`
	// Digest is the sha256 (hex) of the submitted tasks' encoding: a
	// request ID reused for a different submission is refused, not
	// answered with tasks the client did not ask for.
	Digest string `json:"digest"`
}

// TaskIDs lists the record's task IDs in submission order.
func (r *SubmitRecord) TaskIDs() []string {
	ids := make([]string, r.Count)
	for i := range ids {
		ids[i] = taskID(r.Org, r.First+uint64(i))
	}
	return ids
}

func taskID(org string, n uint64) string { return org + "-" + strconv.FormatUint(n, 10) }

// ValidRequestID says whether id is a valid SubmitTasks.RequestID: 1 to
// MaxRequestIDLen characters of [A-Za-z0-9._:-] (a UUID fits).
func ValidRequestID(id string) bool {
	return id != "" && len(id) <= MaxRequestIDLen && isAlnumOr(id, "._:-")
}

func validRequestIDErr(id string) *Error {
	if !ValidRequestID(id) {
		return errf(CodeMalformed, "request ID %q: want 1-%d characters of [A-Za-z0-9._:-]", id, MaxRequestIDLen)
	}
	return nil
}

// submitDigest is the digest of a submission's tasks. The encoding is the
// command's own (fields in struct order, map keys sorted), so the same
// tasks always give the same digest.
func submitDigest(ts []TaskSpec) string {
	b, err := json.Marshal(ts)
	if err != nil {
		// Task specs hold only strings, integers, bools, slices and string
		// maps: encoding cannot fail. A digest that matches nothing keeps a
		// resend from being mistaken for the original.
		return "error: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SubmitRequest returns the remembered submit of org with request ID id.
func (l *Ledger) SubmitRequest(org, id string) (SubmitRecord, bool) {
	r := l.requests[org][id]
	if r == nil {
		return SubmitRecord{}, false
	}
	return *r, true
}

// replay answers a resend of the remembered submit r: the original IDs,
// nothing changed. A different submission under the same ID is refused.
func (l *Ledger) replay(r *SubmitRecord, digest string, res *Result) *Error {
	if r.Digest != digest {
		return errf(CodeExists, "request ID %q of %q was used at index %d for a different submission (%d tasks from %s): choose a new request ID",
			r.RequestID, r.Org, r.Index, r.Count, taskID(r.Org, r.First))
	}
	res.TaskIDs = r.TaskIDs()
	res.Replayed = true
	res.Notes = append(res.Notes, "request "+strconv.Quote(r.RequestID)+" was applied at index "+strconv.FormatUint(r.Index, 10)+
		": its "+strconv.Itoa(r.Count)+" tasks are returned and nothing is queued again")
	return nil
}

// remember records an applied keyed submit and forgets the organisation's
// oldest record beyond the window.
func (l *Ledger) remember(r *SubmitRecord) {
	byID := l.requests[r.Org]
	if byID == nil {
		byID = map[string]*SubmitRecord{}
		l.requests[r.Org] = byID
	}
	byID[r.RequestID] = r
	order := append(l.reqOrder[r.Org], r.RequestID)
	if len(order) > MaxRequestsPerOrg {
		delete(byID, order[0])
		order = order[1:]
	}
	l.reqOrder[r.Org] = order
}

// canonicalRequests lists every remembered submit by log index (each
// organisation's records thus oldest first).
func (l *Ledger) canonicalRequests() []*SubmitRecord {
	var out []*SubmitRecord
	for _, byID := range l.requests {
		for _, r := range byID {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *SubmitRecord) int {
		switch {
		case a.Index < b.Index:
			return -1
		case a.Index > b.Index:
			return 1
		}
		return 0
	})
	return out
}

// validate checks a record's shape, independent of the tasks it names.
func (r *SubmitRecord) validate() *Error {
	if err := validRequestIDErr(r.RequestID); err != nil {
		return err
	}
	if r.Index == 0 || r.AtMs < 0 || r.AtMs > MaxTimeMs || r.First == 0 || r.Count < 1 || r.Count > MaxTasksPerCommand || !ValidDigest(r.Digest) {
		return errf(CodeMalformed, "request %q of %q: index %d, time %d, tasks %d+%d or digest %q out of range",
			r.RequestID, r.Org, r.Index, r.AtMs, r.First, r.Count, r.Digest)
	}
	return nil
}

// restoreRequests rebuilds the replay guard from a decoded state: records
// in log index order, of registered organisations, no request ID twice for
// one organisation, at most MaxRequestsPerOrg each.
func (l *Ledger) restoreRequests(rs []*SubmitRecord) *Error {
	for i, r := range rs {
		if r == nil {
			return errf(CodeMalformed, "request record %d is null", i)
		}
		if l.orgs[r.Org] == nil {
			return errf(CodeUnknownOrg, "request %q: unknown organisation %q", r.RequestID, r.Org)
		}
		if err := r.validate(); err != nil {
			return err
		}
		if i > 0 && r.Index <= rs[i-1].Index {
			return errf(CodeMalformed, "request records not in log order at %q of %q", r.RequestID, r.Org)
		}
		if _, dup := l.requests[r.Org][r.RequestID]; dup {
			return errf(CodeExists, "request %q of %q twice", r.RequestID, r.Org)
		}
		if len(l.reqOrder[r.Org]) == MaxRequestsPerOrg {
			return errf(CodeMalformed, "more than %d request records for %q", MaxRequestsPerOrg, r.Org)
		}
		l.remember(r)
	}
	return nil
}

// checkRequests reports every inconsistency of the replay guard (part of
// CheckInvariants): each organisation's records are indexed both ways, in
// log order, within the window, and name tasks of that organisation that
// exist (the first and last: a submit's IDs are consecutive and tasks are
// never deleted).
func (l *Ledger) checkRequests(fail func(format string, args ...any)) {
	for org, byID := range l.requests {
		order := l.reqOrder[org]
		o := l.orgs[org]
		if o == nil {
			fail("request records of unknown organisation %q", org)
			continue
		}
		if len(order) != len(byID) || len(order) > MaxRequestsPerOrg {
			fail("organisation %q: %d request records in order, %d indexed (at most %d)", org, len(order), len(byID), MaxRequestsPerOrg)
		}
		for i, id := range order {
			r := byID[id]
			if r == nil || r.Org != org || r.RequestID != id {
				fail("organisation %q: request %q in order is not indexed to it", org, id)
				continue
			}
			if err := r.validate(); err != nil {
				fail("organisation %q: %v", org, err)
				continue
			}
			if i > 0 {
				if prev := byID[order[i-1]]; prev != nil && prev.Index >= r.Index {
					fail("organisation %q: request %q (index %d) not after %q (index %d)", org, id, r.Index, prev.RequestID, prev.Index)
				}
			}
			last := r.First + uint64(r.Count) - 1
			if last > o.Submitted {
				fail("organisation %q: request %q names task %s beyond the %d submitted", org, id, taskID(org, last), o.Submitted)
				continue
			}
			for _, n := range []uint64{r.First, last} {
				t := l.tasks[taskID(org, n)]
				if t == nil && l.Forgotten(org).Tasks > 0 {
					continue // forgotten (retention.go)
				}
				if t == nil || t.Org != org {
					fail("organisation %q: request %q names task %s, not one of its tasks", org, id, taskID(org, n))
				}
			}
		}
	}
	for org := range l.reqOrder {
		if _, ok := l.requests[org]; !ok {
			fail("request order of %q without records", org)
		}
	}
}
