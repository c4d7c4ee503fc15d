package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// HistoryNote is api.HistoryView.Note.
const HistoryNote = "reconstructed from the task segments this peer holds; DP compares the allocation then with the quota now, and the limit's history is not recorded"

// History converts the ledger's reconstruction at times (see
// ledger.History) to the API's units.
func History(times []int64, hist []ledger.OrgHistory) api.HistoryView {
	v := api.HistoryView{TimesMs: times, Orgs: make([]api.OrgHistView, len(hist)), Note: HistoryNote}
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
