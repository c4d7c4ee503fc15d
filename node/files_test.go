package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
	"github.com/coopgrid/coopgrid/transfer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// fileProtocolChecks runs on a live federation (TestFederationRunsRealTasks):
// a long task of uni-a is placed on some peer P's machine; the blob,
// outputs and logs protocols serve P and refuse everyone else; then uni-a
// cancels the task and P reports the stop with the measured energy.
func fileProtocolChecks(t *testing.T, ctx context.Context, a, b, c *tnode, done []string) {
	input := []byte("the input of a long task\n")
	resp, err := a.n.Submit(ctx, api.SubmitRequest{Tasks: []api.SubmitTask{{
		Argv:      []string{"/bin/sh", "-c", "sleep 30"},
		SizeMFlop: 1000,
		Inputs:    []api.InputFile{{Name: "data/in.bin", Data: input}},
		Outputs:   []string{"*.txt"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]
	waitFor(t, 20*time.Second, id+" running", func() bool { return a.task(id).State == ledger.TaskRunning })
	tk := a.task(id)
	owner, other := b, c
	if strings.HasPrefix(tk.Machine, "uni-c/") {
		owner, other = c, b
	} else if strings.HasPrefix(tk.Machine, "uni-a/") {
		owner, other = a, b
	}
	t.Logf("the long task runs on %s", tk.Machine)
	digest := tk.Spec.InputDigests[0]
	ask := func(from *tnode, proto string, v any) ([]byte, error) {
		body, _ := json.Marshal(v)
		return from.n.host.Request(ctx, a.n.self, protocol.ID(proto), body)
	}

	if owner != a {
		// The owner of the machine fetches the input; nobody else does.
		got, err := ask(owner, transfer.ProtoBlob, transfer.BlobRequest{Task: id, Digest: digest})
		if err != nil {
			t.Fatalf("owner fetches the input: %v", err)
		}
		var br transfer.BlobResponse
		if err := json.Unmarshal(got, &br); err != nil || !bytes.Equal(br.Data, input) || br.Size != int64(len(input)) {
			t.Fatalf("blob response %s (%v)", got, err)
		}
		if _, err := ask(other, transfer.ProtoBlob, transfer.BlobRequest{Task: id, Digest: digest}); p2p.Code(err) != transfer.CodeForbidden {
			t.Fatalf("another member fetches the input: %v", err)
		}
		if _, err := ask(owner, transfer.ProtoBlob, transfer.BlobRequest{Task: done[0], Digest: digest}); p2p.Code(err) != transfer.CodeNotFound {
			t.Fatalf("input of the wrong task: %v", err)
		}
		if _, err := ask(owner, transfer.ProtoBlob, map[string]any{"task": id, "digest": digest, "extra": 1}); p2p.Code(err) != p2p.CodeBadRequest {
			t.Fatalf("malformed blob request: %v", err)
		}

		// Outputs: only from the machine's owner, only declared names,
		// never outside the task's directory.
		push := func(from *tnode, name string) error {
			_, err := ask(from, transfer.ProtoOutputs, transfer.OutputChunk{Task: id, Machine: tk.Machine, Name: name, Size: 2, Data: []byte("ok")})
			return err
		}
		if err := push(owner, "early.txt"); err != nil {
			t.Fatalf("owner pushes an output: %v", err)
		}
		if got, err := os.ReadFile(filepath.Join(a.dir, config.OutputsDir, id, "early.txt")); err != nil || string(got) != "ok" {
			t.Fatalf("pushed output: %q %v", got, err)
		}
		for name, code := range map[string]string{
			"../escape.txt":    p2p.CodeBadRequest,
			"/etc/passwd.txt":  p2p.CodeBadRequest,
			"a/../../x.txt":    p2p.CodeBadRequest,
			"undeclared.bin":   transfer.CodeForbidden,
			".incoming-xx.txt": p2p.CodeBadRequest,
		} {
			if err := push(owner, name); p2p.Code(err) != code {
				t.Fatalf("push %q: %v, want %s", name, err, code)
			}
		}
		if err := push(other, "other.txt"); p2p.Code(err) != transfer.CodeForbidden {
			t.Fatalf("push from a peer whose machine did not run the task: %v", err)
		}
		if _, err := os.Stat(filepath.Join(a.dir, config.OutputsDir, "escape.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("an escaping name was written: %v", err)
		}
		// Logs of uni-a's task are for uni-a only.
		body, _ := json.Marshal(transfer.LogsRequest{Task: id, Stream: "stdout"})
		if _, err := other.n.host.Request(ctx, owner.n.self, protocol.ID(transfer.ProtoLogs), body); p2p.Code(err) != transfer.CodeForbidden {
			t.Fatalf("another organisation reads the logs: %v", err)
		}
	}

	// A host holding the secret but not a member of the federation gets
	// nothing.
	outsider, err := p2p.New(p2p.Config{DataDir: t.TempDir(), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, SecretFile: a.secret(), Logger: testLogger("outsider")})
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	if _, err := outsider.ConnectAddr(ctx, a.addr()); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(transfer.BlobRequest{Task: id, Digest: digest})
	if _, err := outsider.Request(ctx, a.n.self, protocol.ID(transfer.ProtoBlob), body); p2p.Code(err) != transfer.CodeForbidden {
		t.Fatalf("a non-member fetches an input: %v", err)
	}
	body, _ = json.Marshal(transfer.OutputChunk{Task: id, Machine: tk.Machine, Name: "x.txt", Size: 1, Data: []byte("x")})
	if _, err := outsider.Request(ctx, a.n.self, protocol.ID(transfer.ProtoOutputs), body); p2p.Code(err) != transfer.CodeForbidden {
		t.Fatalf("a non-member pushes an output: %v", err)
	}

	// Cancel: the machine's peer stops the real process and reports the
	// stop with its energy.
	if err := a.n.Cancel(ctx, id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitFor(t, 20*time.Second, id+" stop reported", func() bool {
		tk := a.task(id)
		return tk.State == ledger.TaskCancelled && len(tk.Segments) == 1 && tk.Segments[0].Outcome == ledger.OutcomeCancelled
	})
	if s := a.task(id).Segments[0]; s.EnergyMilliJ <= 0 {
		t.Fatalf("cancelled segment %+v", s)
	}
	waitFor(t, 10*time.Second, "machine free again", func() bool { return a.machine(tk.Machine).Task == "" })
}
