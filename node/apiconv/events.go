package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// TaskEvents are an applied entry's task transitions as watch events, in
// order (api.EventLog.Append numbers them); nil for a rejected entry.
func TaskEvents(res *ledger.Result) []api.TaskEvent {
	if len(res.Transitions) == 0 || !res.Applied() {
		return nil
	}
	out := make([]api.TaskEvent, len(res.Transitions))
	for i, t := range res.Transitions {
		out[i] = api.TaskEvent{Task: t.Task, Org: t.Org, From: string(t.From), To: string(t.To), Machine: t.Machine, Reason: t.Reason}
	}
	return out
}
