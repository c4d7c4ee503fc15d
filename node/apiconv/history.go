package apiconv

import (
	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
)

// HistoryNote is api.HistoryView.Note.
const HistoryNote = "reconstructed from the task segments this peer holds; DP compares the allocation then with the quota now, and the limit's history is not recorded"

// History converts the ledger's reconstruction at times (see
// ledger.History) to the API's units, with DP against each organisation's
// quota now (orgs).
func History(times []int64, hist []ledger.OrgHistory, orgs []ledger.OrgInfo) api.HistoryView {
	quota := make(map[string]int64, len(orgs))
	for _, o := range orgs {
		quota[o.Name] = o.QuotaMFLOPS
	}
	v := api.HistoryView{TimesMs: times, Orgs: make([]api.OrgHistView, len(hist)), Note: HistoryNote}
	for i, h := range hist {
		o := api.OrgHistView{Name: h.Org, AllocGFLOPS: make([]float64, len(times)), DP: make([]*float64, len(times)),
			PIW: make([]float64, len(times)), UserJ: make([]float64, len(times)), OwnerJ: make([]float64, len(times))}
		q := quota[h.Org]
		for k := range times {
			o.AllocGFLOPS[k] = gflops(h.AllocatedMFLOPS[k])
			o.PIW[k] = watts(h.PIMilliW[k])
			o.UserJ[k] = joules(h.UserMilliJ[k])
			o.OwnerJ[k] = joules(h.OwnerMilliJ[k])
			if q > 0 {
				dp := policy.DP(h.AllocatedMFLOPS[k], q)
				o.DP[k] = &dp
			}
		}
		v.Orgs[i] = o
	}
	return v
}
