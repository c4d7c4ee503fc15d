package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// injector is a backend with the fault surface: it records what it was
// asked.
type injector struct {
	api.Backend
	got []api.FaultsRequest
}

func (f *injector) Faults(context.Context) (api.FaultsState, error) {
	return api.FaultsState{BlockPeers: []string{}}, nil
}

func (f *injector) SetFaults(_ context.Context, req api.FaultsRequest) (api.FaultsState, error) {
	f.got = append(f.got, req)
	st := api.FaultsState{BlockPeers: []string{}}
	if req.ClockOffsetMs != nil {
		st.ClockOffsetMs = *req.ClockOffsetMs
	}
	return st, nil
}

// TestDebugFaultsRoute: a backend without the fault surface answers 403
// fault_injection_disabled; the route needs the token; bounds are checked
// before the backend sees anything; a good request reaches it.
func TestDebugFaultsRoute(t *testing.T) {
	_, plain := serve(t, api.ServerOptions{})
	b, err := apitest.NewSeeded(func() int64 { return apitest.SeedStartMs })
	if err != nil {
		t.Fatal(err)
	}
	fi := &injector{Backend: b}
	faulty := serveBackend(t, fi, api.ServerOptions{})
	tests := []struct {
		name         string
		faulty       bool
		method, body string
		auth         string
		status       int
		code         string
	}{
		{name: "disabled POST", method: http.MethodPost, body: `{"clock_offset_ms": 5}`, status: 403, code: api.CodeFaultsDisabled},
		{name: "disabled GET", method: http.MethodGet, status: 403, code: api.CodeFaultsDisabled},
		{name: "no token", faulty: true, method: http.MethodPost, body: `{"clock_offset_ms": 5}`, auth: "-", status: 401, code: api.CodeUnauthorized},
		{name: "offset too large", faulty: true, method: http.MethodPost, body: `{"clock_offset_ms": 31536000001}`, status: 400, code: api.CodeBadRequest},
		{name: "negative delay", faulty: true, method: http.MethodPost, body: `{"disk_delay_ms": -1}`, status: 400, code: api.CodeBadRequest},
		{name: "unknown field", faulty: true, method: http.MethodPost, body: `{"partition": true}`, status: 400, code: api.CodeBadRequest},
		{name: "wrong method", faulty: true, method: http.MethodPut, body: `{}`, status: 405, code: api.CodeMethodInvalid},
		{name: "accepted", faulty: true, method: http.MethodPost, body: `{"clock_offset_ms": -30000, "block_peers": []}`, status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := plain
			if tc.faulty {
				srv = faulty
			}
			var auth []string
			if tc.auth != "" {
				auth = []string{tc.auth}
			}
			r := call(t, srv, tc.method, "/v1/debug/faults", tc.body, auth...)
			if r.status != tc.status {
				t.Fatalf("status %d (%s), want %d", r.status, r.body, tc.status)
			}
			if tc.code != "" {
				if e := apiError(t, r); e.Code != tc.code {
					t.Fatalf("code %q, want %q", e.Code, tc.code)
				}
				return
			}
			st := decode[api.FaultsState](t, r)
			if st.ClockOffsetMs != -30000 {
				t.Fatalf("state %+v", st)
			}
		})
	}
	// Only the accepted request reached the backend.
	if len(fi.got) != 1 || fi.got[0].BlockPeers == nil || len(*fi.got[0].BlockPeers) != 0 || *fi.got[0].ClockOffsetMs != -30000 || fi.got[0].DiskDelayMs != nil {
		t.Fatalf("backend saw %+v", fi.got)
	}
}
