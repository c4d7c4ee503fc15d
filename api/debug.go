package api

import (
	"context"
	"net/http"
)

// The fault-injection surface: a test-only route that the chaos harness
// (package chaos, issue 7) uses to partition a federation, step a peer's
// clock and slow its disk. A peer serves it only when started with
// `peer run --fault-injection` (a hidden flag); otherwise the route
// answers 403 CodeFaultsDisabled and changes nothing. Like every route
// but /healthz it needs the API token. docs/RELIABILITY.md explains why
// it is safe to ship.

// CodeFaultsDisabled is the stable error code of /v1/debug/faults on a
// peer started without fault injection (403).
const CodeFaultsDisabled = "fault_injection_disabled"

// MaxClockOffsetMs bounds a clock offset (one year either way): enough
// for any plausible step, far from overflowing a Unix-ms stamp.
const MaxClockOffsetMs = 365 * 24 * 3600 * 1000

// MaxDiskDelayMs bounds the delay added to each Raft store write.
const MaxDiskDelayMs = 10_000

// MaxBlockedPeers bounds the list of blocked peers.
const MaxBlockedPeers = 1024

// FaultsRequest is POST /v1/debug/faults. An absent field leaves that
// fault as it is; block_peers replaces the whole set ([] heals).
type FaultsRequest struct {
	// BlockPeers are libp2p peer IDs this peer must neither dial nor
	// accept; existing connections to them are closed. A partition needs
	// the block on both sides.
	BlockPeers *[]string `json:"block_peers,omitempty"`
	// ClockOffsetMs steps this peer's wall clock (the time it stamps on
	// log commands and heartbeats) by this many milliseconds from the
	// real one; 0 puts it back. Durations it measures (timeouts) use the
	// monotonic clock, which a real step does not move either.
	ClockOffsetMs *int64 `json:"clock_offset_ms,omitempty"`
	// DiskDelayMs delays every write to this peer's Raft log and stable
	// store by this many milliseconds (a slow disk); 0 removes it.
	DiskDelayMs *int64 `json:"disk_delay_ms,omitempty"`
}

// FaultsState is the answer of GET and POST /v1/debug/faults: the faults
// in force.
type FaultsState struct {
	BlockPeers    []string `json:"block_peers"`
	ClockOffsetMs int64    `json:"clock_offset_ms"`
	DiskDelayMs   int64    `json:"disk_delay_ms"`
}

// FaultInjector is implemented by a backend that has the fault surface
// (package node). The server answers CodeFaultsDisabled for a backend
// without it; the backend answers it too when its surface is off.
type FaultInjector interface {
	Faults(ctx context.Context) (FaultsState, error)
	SetFaults(ctx context.Context, req FaultsRequest) (FaultsState, error)
}

// ErrFaultsDisabled is the error of the fault surface when it is off.
func ErrFaultsDisabled() *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeFaultsDisabled,
		Message: "fault injection is off on this peer (a test-only surface: peer run --fault-injection)"}
}

// ValidateFaults checks a FaultsRequest's bounds (the backend checks the
// peer IDs).
func ValidateFaults(req FaultsRequest) error {
	if req.BlockPeers != nil && len(*req.BlockPeers) > MaxBlockedPeers {
		return Errorf(CodeBadRequest, "block_peers: %d peers, at most %d", len(*req.BlockPeers), MaxBlockedPeers)
	}
	if o := req.ClockOffsetMs; o != nil && (*o > MaxClockOffsetMs || *o < -MaxClockOffsetMs) {
		return Errorf(CodeBadRequest, "clock_offset_ms %d out of range [-%d, %d]", *o, int64(MaxClockOffsetMs), int64(MaxClockOffsetMs))
	}
	if d := req.DiskDelayMs; d != nil && (*d < 0 || *d > MaxDiskDelayMs) {
		return Errorf(CodeBadRequest, "disk_delay_ms %d out of range [0, %d]", *d, MaxDiskDelayMs)
	}
	return nil
}

func (s *Server) injector() (FaultInjector, error) {
	fi, ok := s.b.(FaultInjector)
	if !ok {
		return nil, ErrFaultsDisabled()
	}
	return fi, nil
}

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	fi, err := s.injector()
	if err != nil {
		return err
	}
	st, err := fi.Faults(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) setFaults(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	fi, err := s.injector()
	if err != nil {
		return err
	}
	var req FaultsRequest
	if err := decodeBody(w, r, s.opts.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if err := ValidateFaults(req); err != nil {
		return err
	}
	st, err := fi.SetFaults(r.Context(), req)
	if err != nil {
		return err
	}
	s.log.Warn("api: fault injection changed (test-only surface)", "block_peers", st.BlockPeers, "clock_offset_ms", st.ClockOffsetMs, "disk_delay_ms", st.DiskDelayMs)
	writeJSON(w, http.StatusOK, st)
	return nil
}

// Faults calls GET /v1/debug/faults.
func (c *Client) Faults(ctx context.Context) (FaultsState, error) {
	var st FaultsState
	_, err := c.do(ctx, http.MethodGet, "/v1/debug/faults", nil, nil, &st, true)
	return st, err
}

// SetFaults calls POST /v1/debug/faults.
func (c *Client) SetFaults(ctx context.Context, req FaultsRequest) (FaultsState, error) {
	var st FaultsState
	_, err := c.do(ctx, http.MethodPost, "/v1/debug/faults", nil, req, &st, true)
	return st, err
}
