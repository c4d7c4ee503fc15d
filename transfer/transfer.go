// Package transfer moves the files of tasks between peers: the inputs a
// submitting peer keeps by content and the executing peer fetches
// (ProtoBlob), the outputs the executing peer pushes back (ProtoOutputs),
// and the captured stdout and stderr the task's organisation reads
// (ProtoLogs). Every request is authorised on the ledger: membership of the
// federation, then the task's placement or ownership.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Host is what transfer needs of the libp2p host (a *p2p.Host).
type Host interface {
	ID() peer.ID
	Handle(proto protocol.ID, fn p2p.HandlerFunc)
	RemoveStreamHandler(proto protocol.ID)
	Request(ctx context.Context, p peer.ID, proto protocol.ID, req []byte) ([]byte, error)
}

// Members is the federation's membership, as the protocols check it.
type Members interface {
	// IsMember says whether p is in the federation's Raft configuration.
	IsMember(p peer.ID) bool
	// PeerOf returns the peer registered for org.
	PeerOf(org string) (peer.ID, error)
}

// Check accepts or refuses a task read from the ledger l.
type Check func(t ledger.Task, l *ledger.Ledger) error

// Tasks reads tasks from the ledger.
type Tasks interface {
	// Task returns task id once check accepts it. A local view may lag the
	// leader, so a refusal there should be read again consistently before
	// it is final. A task not in the ledger is a *p2p.Error with
	// CodeNotFound; check's error is returned as is.
	Task(ctx context.Context, id string, check Check) (ledger.Task, error)
}

// Dirs are the folders of the data directory the transfers use.
type Dirs struct {
	// Blobs keeps inputs by content: Blobs/<sha256 hex>. New creates it.
	Blobs string
	// Outputs keeps the outputs of this organisation's tasks:
	// Outputs/<task id>/<name>.
	Outputs string
	// Tasks holds the executor's work directories, where a run's stdout
	// and stderr are captured: Tasks/<task id>/attempt-<n>/<stream>.
	Tasks string
}

// Limits bound the files that travel between peers (config's files
// section).
type Limits struct {
	// MaxInputBytes bounds the inputs of one task.
	MaxInputBytes int64
	// MaxOutputBytes bounds the outputs of one task this peer accepts.
	MaxOutputBytes int64
	// MaxLogBytes bounds a task's stdout or stderr served to others.
	MaxLogBytes int64
	// FetchTimeout is how long FetchInputs keeps trying.
	FetchTimeout time.Duration
}

// Config configures a Service. Every field is required but Logger.
type Config struct {
	Host Host
	// Org is the organisation this peer acts for: outputs are accepted for
	// its tasks only.
	Org     string
	Dirs    Dirs
	Limits  Limits
	Members Members
	Tasks   Tasks
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Service serves the three file protocols and fetches and ships files for
// this peer's runs.
type Service struct {
	host    Host
	self    peer.ID
	org     string
	dirs    Dirs
	limits  Limits
	members Members
	tasks   Tasks
	log     *slog.Logger
	blobs   *blobStore

	// outMu serialises writes of received outputs.
	outMu sync.Mutex
}

// New opens the blob store and registers the protocol handlers on the
// host. Close removes them.
func New(cfg Config) (*Service, error) {
	if cfg.Host == nil || cfg.Members == nil || cfg.Tasks == nil {
		return nil, errors.New("transfer: Host, Members and Tasks are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	blobs, err := newBlobStore(cfg.Dirs.Blobs)
	if err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	s := &Service{
		host: cfg.Host, self: cfg.Host.ID(), org: cfg.Org, dirs: cfg.Dirs, limits: cfg.Limits,
		members: cfg.Members, tasks: cfg.Tasks, log: cfg.Logger, blobs: blobs,
	}
	s.host.Handle(ProtoBlob, s.handleBlob)
	s.host.Handle(ProtoOutputs, s.HandleOutputs)
	s.host.Handle(ProtoLogs, s.handleLogs)
	return s, nil
}

// Close stops serving the protocols. Requests in progress run to their end.
func (s *Service) Close() {
	for _, p := range []string{ProtoBlob, ProtoOutputs, ProtoLogs} {
		s.host.RemoveStreamHandler(protocolID(p))
	}
}

// PutBlob stores an input by content and returns its digest, so that the
// peers its task is placed on can fetch it. A blob already present is kept.
func (s *Service) PutBlob(b []byte) (string, error) { return s.blobs.put(b) }
