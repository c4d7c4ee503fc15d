// Package apiconv is the one place where the state model meets the HTTP
// contract: ledger (and job file) values become api views, an api
// submission or limit becomes a ledger command body, and a ledger refusal
// becomes an *api.Error with its status. Package api knows nothing of the
// ledger; the daemon's backend (package node) and the test double
// (api/apitest) both convert through here, so that they cannot disagree.
package apiconv
