package node

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestOnlineBackup: a running peer's backup over the API (POST
// /v1/backup) is refused without the API token or with a wrong one, and
// with it is an archive `peer snapshot restore` (config.RestoreBackup)
// accepts. A peer started from the restored directory holds the state of
// the backup: the task still in the state, and the history of the task
// forgotten before the backup.
func TestOnlineBackup(t *testing.T) {
	a := federation(t, "sim", []string{"bk-a"}, map[string]string{"bk-a": simMachine("m1", 10, 100)},
		map[string]func(*config.Config){"bk-a": func(c *config.Config) { c.Consensus.RetentionAfter = time.Second }})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	old, err := a.n.Submit(ctx, api.SubmitRequest{Job: "old", Tasks: []api.SubmitTask{{Argv: []string{"true"}, SizeMFlop: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the old task in the history", func() bool {
		n, _ := a.n.history.Len()
		return n == 1
	})
	// A task still in the state at the backup: far too large to end
	// before it.
	live, err := a.n.Submit(ctx, api.SubmitRequest{Job: "live", Tasks: []api.SubmitTask{{Argv: []string{"true"}, SizeMFlop: 1e9}}})
	if err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(api.NewServer(a.n, api.ServerOptions{Token: "admin-token"}))
	defer srv.Close()
	var ae *api.Error
	for _, tok := range []string{"", "wrong"} {
		var buf bytes.Buffer
		if err := api.NewClient(srv.URL, tok, nil).Backup(ctx, &buf); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || buf.Len() != 0 {
			t.Fatalf("backup with token %q: %v, %d bytes", tok, err, buf.Len())
		}
	}
	if err := rawGet(ctx, srv.URL+"/v1/backup", "admin-token"); !errors.As(err, &ae) || ae.Status != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/backup: %v", err)
	}
	var archive bytes.Buffer
	if err := api.NewClient(srv.URL, "admin-token", nil).Backup(ctx, &archive); err != nil {
		t.Fatal(err)
	}
	m, err := config.ReadBackupManifest(bytes.NewReader(archive.Bytes()))
	if err != nil || m.Org != "bk-a" || m.Peer != a.peerID {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	a.close()

	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := config.RestoreBackup(bytes.NewReader(archive.Bytes()), dir); err != nil {
		t.Fatalf("restore: %v", err)
	}
	r := &tnode{tb: t, org: "bk-a", dir: dir, peerID: a.peerID}
	r.start()
	if tk := r.task(live.TaskIDs[0]); tk.ID == "" || tk.State == ledger.TaskDone {
		t.Fatalf("the live task in the restored peer: %+v", tk)
	}
	var ok bool
	r.n.cons.View(func(l *ledger.Ledger) { _, ok = l.Task(old.TaskIDs[0]) })
	if ok {
		t.Fatal("the forgotten task is back in the restored state")
	}
	p, err := r.n.History(ctx, api.HistoryQuery{Limit: 10})
	if err != nil || len(p.Records) != 1 || p.Records[0].ID != old.TaskIDs[0] {
		t.Fatalf("the restored history: %+v, %v", p, err)
	}
	if g, err := r.n.history.Gaps(); err != nil || len(g) != 0 {
		t.Fatalf("the restored history has gaps %v (%v)", g, err)
	}
}
