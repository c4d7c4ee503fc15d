package layers

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/coopgrid/coopgrid"

// rules says, for each package of the module (a path relative to the
// module, or a prefix ending in "/..."), which of the module's packages it
// may import directly in its non-test files. Every package must match a
// rule: a new package is added here and to docs/ARCHITECTURE.md together.
// The order is the table of docs/ARCHITECTURE.md, lowest layer first.
var rules = []struct {
	pkg string
	may []string
	why string
}{
	{"policy", nil, "the pure core: stdlib (and the pure hashicorp/go-version and google/btree) only"},
	{"internal/yamlfile", nil, "YAML primitives"},
	{"p2p", nil, "libp2p host: nothing of ours"},
	{"ledger", []string{"policy"}, "the state machine knows the policy's types, never the network"},
	{"jobfile", []string{"internal/yamlfile"}, "job files"},
	{"checkpoint", []string{"p2p"}, "archives and their replication"},
	{"internal/safeopen", nil, "opening files beneath a directory without following links"},
	{"internal/bboltmap", nil, "dropping a bbolt file's memory map from the RSS"},
	{"executor/internal/supervise", []string{"internal/safeopen"}, "the run supervisor and output copier (re-executed peer binary): stdlib, x/sys and safeopen only"},
	{"executor", []string{"internal/yamlfile", "internal/safeopen", "executor/internal/supervise"}, "running tasks"},
	{"executor/slurm", []string{"executor", "internal/yamlfile", "executor/slurm/slurmtest"}, "the Slurm backend: tasks as jobs of the institution's cluster"},
	{"executor/slurm/slurmtest", nil, "a private Slurm for tests"},
	{"consensus", []string{"ledger", "p2p", "internal/bboltmap"}, "generic replication: no policy, no scheduling"},
	{"leader", []string{"consensus", "ledger", "policy", "p2p"}, "every leader duty"},
	{"gossip", []string{"ledger", "p2p"}, "signed heartbeats"},
	{"history", []string{"ledger", "p2p", "internal/bboltmap"}, "the local store of forgotten tasks and its catch-up protocol"},
	{"transfer", []string{"ledger", "p2p", "internal/safeopen"}, "blobs, outputs and logs protocols"},
	{"runner", []string{"ledger", "executor", "checkpoint", "p2p", "consensus"}, "allocations → executor → reports"},
	{"config", []string{"api", "executor", "internal/yamlfile", "ledger", "p2p", "policy"}, "configuration and data directory"},
	{"api", []string{"api/dashboard"}, "the HTTP contract: nothing of the state model"},
	{"api/dashboard", nil, "the embedded dashboard"},
	{"node/apiconv", []string{"api", "ledger", "jobfile"}, "the one ledger → API converter"},
	{"node", []string{"api", "node/apiconv", "config", "consensus", "leader", "gossip", "runner", "transfer", "executor", "executor/slurm", "executor/slurm/slurmtest", "checkpoint", "history", "ledger", "p2p", "policy"}, "assembly"},
	{"node/nodetest", []string{"api", "config", "node"}, "a real node for tests"},
	{"api/apitest", []string{"api", "node/apiconv", "ledger", "jobfile"}, "the API test double over a real ledger"},
	{"internal/audit", []string{"consensus", "ledger"}, "peer verify"},
	{"lab/...", []string{"lab/...", "policy", "ledger", "node", "api", "config", "internal/yamlfile"}, "research tooling"},
	{"cmd/peer", []string{"node", "node/apiconv", "api", "jobfile", "config", "lab/...", "internal/audit"}, "the one binary: daemon and client commands"},
	{"internal/peerproc", []string{"api"}, "test harness for real peer processes"},
	{"internal/testcluster", []string{"ledger", "p2p"}, "the shared real-cluster test harness of consensus and leader"},
	{"internal/benche2e", []string{"api", "consensus", "ledger", "internal/peerproc"}, "the end-to-end benchmark"},
	{"internal/benchidle", []string{"api", "internal/peerproc"}, "the idle-cost benchmark"},
	{"internal/benchtable", nil, "benchmark tables"},
	{"internal/layers", nil, "this test"},
	{"chaos", nil, "fault injection (tests only)"},
	{"e2e", nil, "end-to-end tests (tests only)"},
}

type listed struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func goList(t *testing.T) []listed {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []listed
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	return pkgs
}

// matches reports whether rel (a module-relative path) is pattern, or under
// it when pattern ends in "/...".
func matches(pattern, rel string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

func ours(imports []string) []string {
	var out []string
	for _, i := range imports {
		if rel, ok := strings.CutPrefix(i, module+"/"); ok {
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out
}

func TestImportDirection(t *testing.T) {
	for _, p := range goList(t) {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		ri := -1
		for i, r := range rules {
			if matches(r.pkg, rel) {
				ri = i
				break
			}
		}
		if ri < 0 {
			t.Errorf("package %s is in no rule: add it to the table here and to docs/ARCHITECTURE.md", rel)
			continue
		}
		r := rules[ri]
		for _, imp := range ours(p.Imports) {
			if !allowed(r.may, imp) && !matches(r.pkg, imp) {
				t.Errorf("%s imports %s: against the documented direction (%s may import %v: %s)", rel, imp, r.pkg, r.may, r.why)
			}
		}
		// Tests may reach further down (a real ledger in an API test), but
		// nothing, not even a test, imports the binary or the research lab
		// from outside.
		for _, imp := range ours(append(append([]string{}, p.TestImports...), p.XTestImports...)) {
			if strings.HasPrefix(imp, "cmd/") {
				t.Errorf("%s (tests) imports %s: nothing imports cmd/", rel, imp)
			}
			// node's checkpoint test cross-checks real waste against the
			// simulator's (TestWasteAgreesWithSimulator): the one test
			// allowed to reach into the lab from below.
			if matches("lab/...", imp) && !matches("lab/...", rel) && !matches("cmd/...", rel) && rel != "node" {
				t.Errorf("%s (tests) imports %s: only cmd/peer and lab/ use the lab", rel, imp)
			}
		}
	}
}

func allowed(may []string, imp string) bool {
	for _, m := range may {
		if matches(m, imp) {
			return true
		}
	}
	return false
}

// TestRulesCatchAViolation checks the checker: a rule table that forbids an
// import the module really has must report it (else a typo in matches()
// would let everything through).
func TestRulesCatchAViolation(t *testing.T) {
	cases := []struct {
		pattern, rel string
		want         bool
	}{
		{"lab/...", "lab", true},
		{"lab/...", "lab/sim", true},
		{"lab/...", "labx", false},
		{"policy", "policy/sim", false},
		{"node", "node", true},
	}
	for _, c := range cases {
		if got := matches(c.pattern, c.rel); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.pattern, c.rel, got, c.want)
		}
	}
	if allowed([]string{"ledger", "p2p"}, "policy") {
		t.Error("allowed(ledger, p2p; policy) = true: consensus importing policy would pass")
	}
}
