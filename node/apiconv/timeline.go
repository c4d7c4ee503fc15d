package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// TimelineNote is api.TimelineView.Note.
const TimelineNote = "reconstructed from the task segments this peer holds; DP compares the allocation then with the quota now, and the limit's history is not recorded"

// Timeline converts the ledger's reconstruction at times (see
// ledger.Timeline) to the API's units.
func Timeline(times []int64, hist []ledger.OrgTimeline) api.TimelineView {
	v := api.TimelineView{TimesMs: times, Orgs: make([]api.OrgHistView, len(hist)), Note: TimelineNote}
	for i, h := range hist {
		o := api.OrgHistView{Name: h.Org, AllocGFLOPS: make([]float64, len(times)), DP: make([]*float64, len(times)),
			PIW: make([]float64, len(times)), UserJ: make([]float64, len(times)), OwnerJ: make([]float64, len(times))}
		for k := range times {
			o.AllocGFLOPS[k] = gflops(h.AllocatedMFLOPS[k])
			o.PIW[k] = watts(h.PIMilliW[k])
			o.UserJ[k] = joules(h.UserMilliJ[k])
			o.OwnerJ[k] = joules(h.OwnerMilliJ[k])
			o.DP[k] = h.DP[k]
		}
		v.Orgs[i] = o
	}
	return v
}
