package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/ledger"
)

// progressScript counts to 100, one step a second on a/a0 (a machine
// busy with its local user's work, say) and twenty a second anywhere
// else, saving its count to $CHECKPOINT_DIR after every step (with the
// work it holds, 50 MFlop a step) and reporting done/total to
// $COOPGRID_PROGRESS.
const progressScript = `set -eu
d=$CHECKPOINT_DIR
i=0
if [ -s "$d/n" ]; then i=$(cat "$d/n"); fi
step=0.05
if [ "$COOPGRID_MACHINE" = a0 ]; then step=1; fi
trap 'exit 143' TERM
while [ "$i" -lt 100 ]; do
	sleep "$step"
	i=$((i + 1))
	printf '%s\n' "$i" >"$d/n.tmp"
	mv -f "$d/n.tmp" "$d/n"
	printf '{"done_mflop": %d}\n' $((i * 50)) >"$d/p.tmp"
	mv -f "$d/p.tmp" "$d/coopgrid-progress.json"
	echo "$i/100" >>"$COOPGRID_PROGRESS"
done
`

// TestProgressMigratesOnRealPeers is issue 20 item 4 with real peers
// (libp2p, Raft, bolt, real processes). a's machine a/a0 (1 GFLOPS,
// 10 W) and b's b/b0 (100 GFLOPS, 5 W: within a's power limit, its own
// 10 W); b/b0 is drained at first. a submits a
// checkpointable soft-deadline task of 5,000 MFlop due in 60 s: a/a0, the
// only machine, meets that on its declared speed (5.5 s with the margin),
// so it runs there; but its progress reports say 1 % a second, 100 s in
// all.
//   - No machine can meet the deadline: a's peer reports it, the ledger
//     keeps the run and the task's deadline note says why.
//   - b, another member, tries to migrate the run: refused (not_owner),
//     never in the log.
//   - b/b0 is offered again: at its next look a's peer reports the miss
//     again, the ledger moves the task (stopped with a checkpoint, a/a0
//     avoided), it resumes on b/b0 from the checkpoint and is done before
//     its deadline.
func TestProgressMigratesOnRealPeers(t *testing.T) {
	peers := federation(t, "process", []string{"a", "b"}, map[string]string{
		"a": machinesFile("a", 1, 1, 10, "", "  allow: [/bin/sh]\n"),
		"b": machinesFile("b", 1, 100, 5, "", "  allow: [/bin/sh]\n"),
	}, nil)
	a, b := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	if _, err := b.n.DrainMachine(ctx, api.DrainRequest{Machine: "b/b0", Drained: true}); err != nil {
		t.Fatal(err)
	}
	resp, err := a.n.Submit(ctx, api.SubmitRequest{Job: "prog", Tasks: []api.SubmitTask{{Name: "slow",
		Argv: []string{"/bin/sh", "-c", progressScript}, SizeMFlop: 5_000, WallLimitMs: 150_000, Checkpointable: true,
		Class: ledger.ClassSoftDeadline, DeadlineInMs: 60_000}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]

	waitFor(t, 60*time.Second, id+"'s miss recorded", func() bool {
		tk := a.task(id)
		if tk.State.Terminal() {
			t.Fatalf("%s is %s: %s", id, tk.State, tk.Reason)
		}
		return tk.DeadlineNote != ""
	})
	detail, err := a.n.Task(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deadline note: %s", detail.DeadlineNote)
	if detail.State != string(ledger.TaskRunning) || detail.Machine != "a/a0" || detail.Migrations != 0 ||
		!strings.Contains(detail.DeadlineNote, "will miss its deadline") || !strings.Contains(detail.DeadlineNote, "keeps running") {
		t.Fatalf("with no machine able to meet the deadline: %s on %s, %d migrations, note %q", detail.State, detail.Machine, detail.Migrations, detail.DeadlineNote)
	}

	// Another member cannot move a's run: refused by the leader's dry run.
	tk := a.task(id)
	res, err := b.n.propose(ctx, func(c *ledger.Command) {
		c.MigrateTask = &ledger.MigrateTask{Task: id, Machine: "a/a0", Attempt: tk.Attempts, DoneMFlop: 100, PredictedFinishMs: tk.Spec.DeadlineMs + 60_000}
	})
	if ledger.CodeOf(err) != ledger.CodeNotOwner || !res.NotAppended {
		t.Fatalf("b migrating a's run: %v (not appended %v), want not_owner before the log", err, res.NotAppended)
	}
	if tk := a.task(id); tk.State != ledger.TaskRunning || tk.Machine != "a/a0" || tk.Migrations != 0 {
		t.Fatalf("after b's refused migration: %s on %s", tk.State, tk.Machine)
	}

	if _, err := b.n.DrainMachine(ctx, api.DrainRequest{Machine: "b/b0", Drained: false}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, id+" done", func() bool {
		tk := a.task(id)
		if tk.State == ledger.TaskFailed || tk.State == ledger.TaskCancelled {
			t.Fatalf("%s is %s: %s", id, tk.State, tk.Reason)
		}
		return tk.State == ledger.TaskDone
	})
	tk = a.task(id)
	t.Logf("segments %+v; note %s", tk.Segments, tk.DeadlineNote)
	if tk.Migrations != 1 || !strings.Contains(tk.DeadlineNote, "migrated off a/a0") {
		t.Fatalf("%d migrations, note %q", tk.Migrations, tk.DeadlineNote)
	}
	last := tk.Segments[len(tk.Segments)-1]
	if tk.Segments[0].Machine != "a/a0" || last.Machine != "b/b0" || last.FromMFlop <= 0 {
		t.Fatalf("segments %+v: want a/a0 first, then b/b0 resumed from a checkpoint", tk.Segments)
	}
	if tk.EndedMs > tk.Spec.DeadlineMs {
		t.Fatalf("done at %d, after its deadline %d", tk.EndedMs, tk.Spec.DeadlineMs)
	}
	for _, p := range peers {
		if got := p.task(id); got.DeadlineNote != tk.DeadlineNote || got.Migrations != 1 {
			t.Fatalf("%s sees note %q, %d migrations", p.org, got.DeadlineNote, got.Migrations)
		}
	}
}
