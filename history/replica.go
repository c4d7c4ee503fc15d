package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/coopgrid/coopgrid/p2p"
)

// ProtoHistory serves a member the history records of a range of log
// indices, so that a peer that installed a snapshot (far behind, or new)
// gets the records of the tasks forgotten in the entries it skipped
// (docs/HISTORY.md, "Catching up by snapshot").
//
// Who may ask: a member of the federation (in the Raft configuration), no
// one else (not_member). What it answers: only history records, of the
// range asked, a bounded page at a time, and only a range its own store
// covers entirely (incomplete otherwise, and the asker tries another
// member): a partial answer would close the asker's gap on a subset.
const ProtoHistory = "/coopgrid/history/1.0.0"

// Error codes of ProtoHistory.
const (
	CodeNotMember  = "not_member"
	CodeIncomplete = "incomplete"
)

// Page bounds of one answer: records and encoded bytes (well below the
// p2p message limit, p2p.DefaultMaxMessageSize).
const (
	PageRecords = 500
	PageBytes   = 1 << 20
)

// Host is what the replica needs of the libp2p host (a *p2p.Host).
type Host interface {
	Handle(proto protocol.ID, fn p2p.HandlerFunc)
	RemoveStreamHandler(proto protocol.ID)
	Request(ctx context.Context, p peer.ID, proto protocol.ID, req []byte) ([]byte, error)
}

// Members is the federation's membership as the replica needs it.
type Members interface {
	// IsMember says whether p is in the Raft configuration.
	IsMember(p peer.ID) bool
	// Others lists the members to ask, other than this peer, the leader
	// first.
	Others() []peer.ID
}

// ReplicaConfig configures a Replica; Logger may be nil.
type ReplicaConfig struct {
	Host    Host
	Members Members
	Store   *Store
	Logger  *slog.Logger
	// MaxPause bounds the pause between rounds while a gap stays open
	// (default one minute).
	MaxPause time.Duration
}

// Replica serves ProtoHistory and fills the store's gaps from other
// members. It owns one goroutine; Close stops it.
type Replica struct {
	cfg    ReplicaConfig
	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type rangeRequest struct {
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
	After Cursor `json:"after"`
}

type rangeResponse struct {
	Records []Record `json:"records"`
	Next    *Cursor  `json:"next,omitempty"`
}

// NewReplica serves ProtoHistory on the host and starts filling the gaps
// the store already has (a fill a restart interrupted).
func NewReplica(cfg ReplicaConfig) *Replica {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxPause <= 0 {
		cfg.MaxPause = time.Minute
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replica{cfg: cfg, kick: make(chan struct{}, 1), cancel: cancel}
	cfg.Host.Handle(ProtoHistory, r.handle)
	r.wg.Add(1)
	go r.run(ctx)
	r.Kick()
	return r
}

// Kick starts a round of filling now (after a snapshot was installed).
func (r *Replica) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Close stops serving and filling.
func (r *Replica) Close() {
	r.cfg.Host.RemoveStreamHandler(ProtoHistory)
	r.cancel()
	r.wg.Wait()
}

func (r *Replica) handle(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	if !r.cfg.Members.IsMember(remote) {
		return nil, p2p.Errorf(CodeNotMember, "peer %s is not a member of the federation", remote)
	}
	var req rangeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "history request: %v", err)
	}
	if req.From >= req.To {
		return nil, p2p.Errorf(p2p.CodeBadRequest, "history request: empty range (%d, %d]", req.From, req.To)
	}
	ok, err := r.cfg.Store.Covers(req.From, req.To)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, p2p.Errorf(CodeIncomplete, "this peer's history does not hold all of (%d, %d]", req.From, req.To)
	}
	recs, next, err := r.cfg.Store.Range(ctx, req.From, req.To, req.After, PageRecords, PageBytes)
	if err != nil {
		return nil, err
	}
	return json.Marshal(rangeResponse{Records: recs, Next: next})
}

// run fills the gaps on every kick, and again after a growing pause while
// one stays open (no member holds it yet, or none answered).
func (r *Replica) run(ctx context.Context) {
	defer r.wg.Done()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = time.Second, r.cfg.MaxPause
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			bo.Reset()
		case <-retry:
		}
		retry = nil
		if open := r.fillAll(ctx); open > 0 && ctx.Err() == nil {
			retry = time.After(bo.NextBackOff())
		}
	}
}

// fillAll tries every gap once with every member; it returns how many
// stay open.
func (r *Replica) fillAll(ctx context.Context) (open int) {
	gaps, err := r.cfg.Store.Gaps()
	if err != nil {
		r.cfg.Logger.Error("history: read the gaps", "err", err)
		return 1
	}
	for _, g := range gaps {
		if err := r.fill(ctx, g); err != nil {
			open++
			r.cfg.Logger.Warn("history: records of a skipped range not fetched yet", "from", g.From, "to", g.To, "err", err)
			continue
		}
		r.cfg.Logger.Info("history: records of a skipped range fetched", "from", g.From, "to", g.To)
	}
	return open
}

// fill asks each member in turn for gap g until one sends all of it.
func (r *Replica) fill(ctx context.Context, g Gap) error {
	var errs []error
	for _, m := range r.cfg.Members.Others() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n, err := r.fetch(ctx, m, g)
		if err == nil {
			r.cfg.Logger.Debug("history: gap filled", "from", g.From, "to", g.To, "peer", m, "records", n)
			return r.cfg.Store.Filled(g)
		}
		errs = append(errs, fmt.Errorf("%s: %w", m, err))
	}
	if len(errs) == 0 {
		return errors.New("no other member to ask")
	}
	return errors.Join(errs...)
}

// fetch reads gap g from member m page by page, storing each page.
func (r *Replica) fetch(ctx context.Context, m peer.ID, g Gap) (int, error) {
	n := 0
	req := rangeRequest{From: g.From, To: g.To}
	for {
		b, _ := json.Marshal(req)
		data, err := r.cfg.Host.Request(ctx, m, ProtoHistory, b)
		if err != nil {
			return n, err
		}
		var resp rangeResponse
		if err := json.Unmarshal(data, &resp); err != nil {
			return n, fmt.Errorf("bad history page: %w", err)
		}
		if err := checkPage(g, req.After, resp); err != nil {
			return n, err
		}
		if err := r.cfg.Store.PutRecords(resp.Records); err != nil {
			return n, err
		}
		n += len(resp.Records)
		if resp.Next == nil {
			return n, nil
		}
		req.After = *resp.Next
	}
}

// checkPage refuses a page that leaves the range asked, goes backwards or
// does not move on: a member's bug must not loop the asker or write
// records of other indices.
func checkPage(g Gap, after Cursor, p rangeResponse) error {
	last := after
	for _, rec := range p.Records {
		if rec.Index <= g.From || rec.Index > g.To {
			return fmt.Errorf("bad history page: record %s of index %d outside (%d, %d]", rec.Task.ID, rec.Index, g.From, g.To)
		}
		if rec.Index < last.Index || (rec.Index == last.Index && rec.Task.Seq <= last.Seq) {
			return fmt.Errorf("bad history page: record %s out of order", rec.Task.ID)
		}
		last = Cursor{Index: rec.Index, Seq: rec.Task.Seq}
	}
	if p.Next != nil && (len(p.Records) == 0 || *p.Next != last) {
		return errors.New("bad history page: its cursor does not follow its records")
	}
	return nil
}
