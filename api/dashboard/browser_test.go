package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/node/nodetest"
)

// chromiumPath finds the browser: $COOPGRID_CHROMIUM, /usr/bin/chromium, or
// chromium / chromium-browser on PATH ("" if none).
func chromiumPath() string {
	if p := os.Getenv("COOPGRID_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactDir is where the screenshots go: $COOPGRID_ARTIFACTS/dashboard
// when set (kept after the test), else a temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("COOPGRID_ARTIFACTS")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts: %v", err)
	}
	return dir
}

// num formats a value as the page does (app.js num): rounded to two
// decimals, no trailing zeros.
func num(x float64) string {
	return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
}

// browser drives one tab.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// text is the text of the first element matching sel ("" if none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	q, _ := json.Marshal(sel)
	return b.eval(fmt.Sprintf(`(function(){const e=document.querySelector(%s);return e?e.textContent.trim():""})()`, q))
}

// waitText waits until ok(text of sel) holds; the page polls every 1.5 s.
func (b *browser) waitText(sel, what string, ok func(string) bool) string {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := b.text(sel)
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			b.shot("failure")
			b.t.Fatalf("%s: %s shows %q", what, sel, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) waitEqual(sel, want string) {
	b.t.Helper()
	b.waitText(sel, sel+" = "+want, func(s string) bool { return s == want })
}

func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", p)
}

func (b *browser) tab(name string) {
	b.t.Helper()
	b.do("tab "+name, chromedp.Click(chromedp.CSS(`#tabs button[data-tab="`+name+`"]`)))
	if b.eval(`document.getElementById("view-`+name+`").hidden ? "hidden" : "shown"`) != "shown" {
		b.t.Fatalf("tab %s: its view stays hidden", name)
	}
}

// TestDashboardInBrowser opens the dashboard of a real single-peer
// federation (libp2p on loopback, Raft with bolt stores, the process
// executor) in headless Chromium and checks what a person would: a wrong
// token shows nothing but the refusal, the right one shows the
// organisation's numbers, a task submitted meanwhile appears and finishes
// without a reload, and the limit set from the page reaches the ledger.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real peer and headless Chromium (about 10 s)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The peer: one organisation, one 10 GFLOPS / 100 W machine.
	tmp := t.TempDir()
	peer := nodetest.Start(ctx, t)
	n, tok, base := peer.Node, peer.Token, peer.URL

	b, exceptions := newBrowser(ctx, t, tmp)
	// A browser opening the peer's address lands on the token form.
	b.do("open", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token-input")))
	if u := b.eval(`location.pathname`); u != "/ui/" {
		t.Fatalf("the root sent the browser to %q, want /ui/", u)
	}

	// A wrong token: the refusal and nothing else.
	b.do("wrong token", chromedp.SendKeys(chromedp.CSS("#token-input"), "not-the-token"), chromedp.Click(chromedp.CSS("#token-submit")))
	b.waitText("#token-error", "wrong token refused", func(s string) bool { return strings.HasPrefix(s, "Wrong token") })
	if got := b.eval(`[document.getElementById("app").hidden, document.getElementById("org-name").textContent, sessionStorage.length].join("/")`); got != "true//0" {
		t.Fatalf("after a wrong token: app hidden / org shown / stored = %q, want true//0", got)
	}
	b.shot("0-wrong-token")

	// The right token: the overview.
	b.eval(`document.getElementById("token-input").value = ""`)
	b.do("token", chromedp.SendKeys(chromedp.CSS("#token-input"), tok), chromedp.Click(chromedp.CSS("#token-submit")))
	b.waitEqual("#org-name", "alpha")
	b.eval(`window.__noReload = "yes"`)
	b.waitEqual("#leader-id", "this peer")
	b.waitEqual("#raft-state", "Leader")
	// The page follows the task events (GET /v1/events) instead of polling
	// every 1.5 s.
	for deadline := time.Now().Add(20 * time.Second); b.eval(`document.getElementById("conn").dataset.live || ""`) != "yes"; {
		if time.Now().After(deadline) {
			b.shot("failure")
			t.Fatal("the page never opened the event stream")
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.waitEqual(`#orgmachines-table tr[data-org="alpha"] td:nth-child(2)`, "1")
	// nodetest's machine runs tasks as the peer's own user: the table says so.
	b.waitEqual(`#machines-table tbody tr td:first-child`, "alpha/m1 (UNPROTECTED!: tasks run as its peer's own user)")
	// A federation made by this build tracks stability from its first
	// registration (a version-3 command: run_bounds): up since, no failure.
	b.waitText(`#machines-table tr[data-machine="alpha/m1"] .stability`, "MTBF, no failure, fully available", func(s string) bool {
		return strings.HasPrefix(s, "MTBF ") && strings.Contains(s, " 0 failures, 0 reclaims, 100.0% available")
	})
	b.shot("1-overview")

	orgs, err := n.Orgs(ctx)
	if err != nil || len(orgs) != 1 {
		t.Fatalf("orgs %+v, %v", orgs, err)
	}
	alpha := orgs[0]
	if alpha.QuotaGFLOPS != 10 || alpha.PowerQuotaW != 100 {
		t.Fatalf("the workload is not the one this test expects: %+v", alpha)
	}

	// Fairness: the quota the machine contributes.
	b.tab("fairness")
	b.waitEqual(`#fairness-table tr[data-org="alpha"] .quota`, "10")
	b.waitEqual(`#fairness-table tr[data-org="alpha"] .state`, "served")
	b.shot("2-fairness")

	// A task submitted behind the page's back appears, runs and finishes.
	sub, err := n.Submit(ctx, api.SubmitRequest{Job: "dash", Tasks: []api.SubmitTask{{
		Name: "hello", Argv: []string{"/bin/sh", "-c", "sleep 2; echo hello from the dashboard test"},
		SizeMFlop: 500, WallLimitMs: 60_000,
	}}})
	if err != nil || len(sub.TaskIDs) != 1 {
		t.Fatalf("submit: %+v, %v", sub, err)
	}
	id := sub.TaskIDs[0]
	b.tab("tasks")
	row := `#tasks-table tr[data-task="` + id + `"]`
	b.waitText(row+" .state", "task seen before it ends", func(s string) bool { return s != "" && s != "done" })
	b.waitEqual(row+" .state", "done")
	b.waitEqual("#count-done", "1")
	b.do("open task", chromedp.Click(chromedp.CSS(row)))
	b.waitText("#detail-stdout", "the task's log", func(s string) bool { return s == "hello from the dashboard test" })
	b.waitEqual(`#task-detail dd[data-field="state"]`, "done")
	if segs := b.eval(`String(document.querySelectorAll("#detail-segments tbody tr").length)`); segs != "1" {
		t.Errorf("the detail shows %s segments, want 1", segs)
	}
	b.do("search miss", chromedp.SendKeys(chromedp.CSS("#task-search"), "no-such-task"))
	b.waitEqual("#task-shown", "0 shown")
	b.eval(`document.getElementById("task-search").value = ""`)
	b.do("search hit", chromedp.SendKeys(chromedp.CSS("#task-search"), "hello"))
	b.waitEqual("#task-shown", "1 shown")
	b.shot("3-tasks")

	// A task no machine can take waits, and the queue says why (issue 14):
	// the pending reason names the label nobody offers.
	sub, err = n.Submit(ctx, api.SubmitRequest{Job: "dash-wait", Tasks: []api.SubmitTask{{
		Name: "matlab", Argv: []string{"/bin/sh", "-c", "true"}, SizeMFlop: 500,
		Requirements: []api.Requirement{{Attribute: "label.matlab", Operator: "is_set"}},
	}}})
	if err != nil || len(sub.TaskIDs) != 1 {
		t.Fatalf("submit the waiting task: %+v, %v", sub, err)
	}
	waiting := `#tasks-table tr[data-task="` + sub.TaskIDs[0] + `"] .state`
	b.eval(`document.getElementById("task-search").value = ""`)
	b.do("search all", chromedp.SendKeys(chromedp.CSS("#task-search"), " "))
	b.waitText(waiting, "the waiting task's reason", func(s string) bool {
		return strings.HasPrefix(s, "queued (waiting: ") && strings.Contains(s, "label.matlab")
	})
	b.shot("3b-waiting")
	if err := n.Cancel(ctx, sub.TaskIDs[0]); err != nil {
		t.Fatalf("cancel the waiting task: %v", err)
	}
	b.waitText(waiting, "the waiting task cancelled", func(s string) bool { return strings.HasPrefix(s, "cancelled") })

	// Energy: the page shows the ledger's figures, and draws them.
	led, err := n.Ledger(ctx)
	if err != nil || len(led.Orgs) != 1 || led.Orgs[0].UserJ <= 0 {
		t.Fatalf("ledger after the task: %+v, %v", led, err)
	}
	b.tab("energy")
	b.waitEqual(`#energy-table tr[data-org="alpha"] .user`, num(led.Orgs[0].UserJ))
	b.waitEqual(`#energy-table tr[data-org="alpha"] .owner`, num(led.Orgs[0].OwnerSelfJ+led.Orgs[0].OwnerOthersJ))
	b.waitText("#chart-energy .u-legend", "energy chart", func(s string) bool { return strings.Contains(s, "alpha as user J") })
	b.shot("4-energy")

	// Power: the limit, then a new one set from the page reaches the ledger.
	b.tab("power")
	b.waitEqual(`#power-table tr[data-org="alpha"] .limit`, num(alpha.LimitW))
	if forms := b.eval(`String(document.querySelectorAll("#power-table .limit-form").length) + "/" + String(document.querySelectorAll('#power-table tr[data-org="alpha"] .limit-form').length)`); forms != "1/1" {
		t.Fatalf("limit forms in the power table / in alpha's row = %s, want 1/1", forms)
	}
	const newLimit = 60
	b.do("set limit", chromedp.SendKeys(chromedp.CSS("#limit-input"), strconv.Itoa(newLimit)), chromedp.Click(chromedp.CSS("#limit-set")))
	b.waitText("#limit-msg", "limit set", func(s string) bool { return strings.Contains(s, fmt.Sprintf("is now %d W", newLimit)) })
	b.waitEqual(`#power-table tr[data-org="alpha"] .limit`, strconv.Itoa(newLimit))
	led, err = n.Ledger(ctx)
	if err != nil || len(led.Orgs) != 1 || led.Orgs[0].LimitW != newLimit {
		t.Fatalf("ledger after setting the limit from the page: %+v, %v", led, err)
	}
	b.waitText("#chart-power .u-legend", "power chart", func(s string) bool { return strings.Contains(s, "alpha limit W") })
	b.shot("5-power")

	// All of it without a reload.
	if v := b.eval(`String(window.__noReload)`); v != "yes" {
		t.Errorf("the page reloaded (marker %q)", v)
	}
	if ex := exceptions(); len(ex) > 0 {
		t.Errorf("uncaught exceptions in the page: %v", ex)
	}
}

// newBrowser starts headless Chromium with a fresh profile under tmp and
// nothing that calls home (the test skips when there is none), and
// returns its tab and the uncaught exceptions the page threw so far.
func newBrowser(ctx context.Context, t *testing.T, tmp string) (*browser, func() []string) {
	t.Helper()
	chrome := chromiumPath()
	if chrome == "" {
		t.Skip("Chromium not found (/usr/bin/chromium, chromium on PATH or $COOPGRID_CHROMIUM): install it with `apt-get install -y chromium` (.ci/run does)")
	}
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(tmp, "chromium-profile")),
		chromedp.WindowSize(1280, 1000),
	)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Skipf("Chromium at %s does not start: %v", chrome, err)
	}
	// Uncaught exceptions in the page fail the test.
	var (
		mu         sync.Mutex
		exceptions []string
	)
	msgs := chromedp.Console(bctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() {
				mu.Lock()
				exceptions = append(exceptions, m.String())
				mu.Unlock()
			}
		}
	}()
	b := &browser{t: t, ctx: bctx, dir: artifactDir(t)}
	t.Logf("screenshots in %s", b.dir)
	return b, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), exceptions...)
	}
}

// login opens the peer's address and gives the token.
func (b *browser) login(base, tok string) {
	b.t.Helper()
	b.loginAt(base+"/", tok)
}

// loginAt opens the dashboard at url and gives it the token.
func (b *browser) loginAt(url, tok string) {
	b.t.Helper()
	b.do("open", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#token-input")))
	b.do("token", chromedp.SendKeys(chromedp.CSS("#token-input"), tok), chromedp.Click(chromedp.CSS("#token-submit")))
}

// recordFetches makes the page note every URL it fetches (window.__fetched).
func (b *browser) recordFetches() {
	b.t.Helper()
	b.eval(`(() => { window.__fetched = []; const f = window.fetch; window.fetch = (u, init) => { window.__fetched.push(String(u)); return f(u, init); }; return "ok"; })()`)
}

// fetched is every URL the page fetched since recordFetches.
func (b *browser) fetched() []string {
	b.t.Helper()
	urls, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`window.__fetched || []`))
	if err != nil {
		b.t.Fatalf("fetched URLs: %v", err)
	}
	return urls
}

// TestDashboardHealthWithAKilledPeer opens the first view of a real
// three-peer federation (alpha, beta, gamma; libp2p on loopback, Raft,
// the process executor) and checks that it answers "is the federation
// healthy?": quorum, the leader by organisation, every peer reachable;
// the charts open with the ledger's recent past (a task finished before
// the page opened); a drained machine is marked; and once a peer other
// than the page's and the leader's is stopped without leaving, the page
// says it is unreachable, the quorum it leaves, and its machine lost.
// Leadership may move under load: the test follows it.
func TestDashboardHealthWithAKilledPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three real peers and headless Chromium")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	tmp := t.TempDir()
	peers := nodetest.StartFederation(ctx, t, "alpha", "beta", "gamma")
	alpha := peers[0]

	// A task that ran and finished before the page opened: its energy is
	// in the ledger's history.
	sub, err := alpha.Node.Submit(ctx, api.SubmitRequest{Job: "before", Tasks: []api.SubmitTask{{
		Name: "early", Argv: []string{"/bin/sh", "-c", "sleep 1"}, SizeMFlop: 500, WallLimitMs: 60_000}}})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	for {
		d, err := alpha.Node.Task(ctx, sub.TaskIDs[0])
		if err == nil && d.State == "done" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the early task never finished: %+v, %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := alpha.Node.DrainMachine(ctx, api.DrainRequest{Machine: "m1", Drained: true}); err != nil {
		t.Fatalf("drain alpha/m1: %v", err)
	}
	// status is alpha's view now: its voters, the leader's organisation,
	// and whether org votes.
	status := func() (voters int, leaderOrg string, votes map[string]bool) {
		st, err := alpha.Node.Status(ctx)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		votes = map[string]bool{}
		for _, p := range st.Peers {
			if p.Voter {
				voters++
				votes[p.Org] = true
			}
			if p.Leader {
				leaderOrg = p.Org
			}
		}
		return voters, leaderOrg, votes
	}
	voters, _, votes := status()

	b, exceptions := newBrowser(ctx, t, tmp)
	// Pages of two (?page=2): the three organisations' status, timeline,
	// machines and members come on two pages each, which the page follows.
	b.do("open", chromedp.Navigate(alpha.URL+"/ui/?page=2"), chromedp.WaitVisible(chromedp.CSS("#token-input")))
	b.recordFetches()
	b.do("token", chromedp.SendKeys(chromedp.CSS("#token-input"), alpha.Token), chromedp.Click(chromedp.CSS("#token-submit")))
	b.waitEqual("#org-name", "alpha")
	b.waitText("#health", "healthy", func(string) bool { return b.eval(`document.getElementById("health").dataset.health`) == "healthy" })
	b.waitEqual("#health-verdict", "Healthy")
	b.waitEqual("#quorum", fmt.Sprintf("%d of %d voters up", voters, voters))
	b.waitText("#leader-org", "the leader's organisation", func(s string) bool {
		_, org, _ := status()
		if org == "alpha" {
			org += " (this peer)"
		}
		return org != "" && s == org
	})
	b.waitEqual("#peers-down", "none")
	b.waitEqual(`#machines-table tr[data-machine="alpha/m1"] .state`, "drained")
	b.waitEqual(`#orgmachines-table tr[data-org="alpha"] .drained`, "1")
	b.waitEqual("#machines-drained", "1")
	// Every organisation shows, the third from the second pages.
	for _, org := range []string{"alpha", "beta", "gamma"} {
		b.waitEqual(`#orgmachines-table tr[data-org="`+org+`"] td:nth-child(2)`, "1")
	}
	urls := b.fetched()
	for _, want := range []struct {
		prefix string
		parts  []string
	}{
		{"/v1/status?limit=2", []string{"after="}},
		{"/v1/machines?limit=2", []string{"after="}},
		{"/v1/members?limit=2", []string{"after="}},
		{"/v1/timeline?window_s=", []string{"limit=2", "end_ms=", "after="}},
	} {
		if !slices.ContainsFunc(urls, func(u string) bool {
			return strings.HasPrefix(u, want.prefix) && !slices.ContainsFunc(want.parts, func(p string) bool { return !strings.Contains(u, p) })
		}) {
			t.Errorf("the page never asked for a second page %s…%v: it fetched %q", want.prefix, want.parts, urls)
		}
	}
	for _, u := range urls {
		if path, _, _ := strings.Cut(u, "?"); (path == "/v1/status" || path == "/v1/timeline" || path == "/v1/machines" || path == "/v1/members") && !strings.Contains(u, "limit=") {
			t.Errorf("the page asked for a whole list: %s", u)
		}
	}
	b.shot("h1-healthy")

	// The charts open with the past: the energy chart holds samples from
	// the ledger's history, the finished task's joules among them.
	b.tab("energy")
	b.waitText("#chart-energy .u-legend", "energy chart", func(s string) bool { return strings.Contains(s, "alpha as user J") })
	if seeded := b.eval(`document.getElementById("chart-energy").dataset.seeded`); seeded == "" || seeded == "0" {
		t.Errorf("the energy chart opened without the ledger's history (seeded %q)", seeded)
	}
	b.shot("h2-energy-seeded")

	// A peer that neither serves the page nor leads (gamma, else beta)
	// stops without leaving: unreachable, its machine lost, the quorum one
	// voter short.
	b.tab("overview")
	victim := peers[2]
	if _, org, _ := status(); org == "gamma" {
		victim = peers[1]
	}
	org := map[*nodetest.Peer]string{peers[1]: "beta", peers[2]: "gamma"}[victim]
	victimID := victim.Node.ID().String()
	b.waitEqual(`#peers-table tr[data-peer="`+victimID+`"] .reach`, "yes")
	victim.Stop()
	b.waitEqual(`#peers-table tr[data-peer="`+victimID+`"] .reach`, "NO")
	b.waitText(`#peers-table tr[data-peer="`+victimID+`"] .contact`, org+"'s last contact", func(s string) bool {
		return strings.HasSuffix(s, " ago") || s == "never"
	})
	if b.eval(`document.querySelector('#peers-table tr[data-peer="`+victimID+`"]').classList.contains("unreachable") ? "y" : "n"`) != "y" {
		t.Errorf("%s's row is not marked unreachable", org)
	}
	b.waitEqual("#peers-down", org)
	b.waitEqual(`#machines-table tr[data-machine="`+org+`/m1"] .state`, "LOST")
	b.waitEqual(`#orgmachines-table tr[data-org="`+org+`"] .lost`, "1")
	up := voters
	if votes[org] {
		up--
	}
	b.waitEqual("#quorum", fmt.Sprintf("%d of %d voters up", up, voters))
	b.waitEqual("#health-verdict", "Degraded")
	b.shot("h3-killed-peer")
	if ex := exceptions(); len(ex) > 0 {
		t.Errorf("uncaught exceptions in the page: %v", ex)
	}
}
