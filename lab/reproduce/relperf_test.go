package reproduce

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/sim"
)

// TestRelPerfWired runs test 1's HOSEP case and EHOSEP at 80 % for three
// runs and checks that tables.md carries seed 002's relative performance:
// one row over all 3 × 300 tasks of Model 1 whose shares add up to 100 %,
// and the CDF figure.
func TestRelPerfWired(t *testing.T) {
	dir := t.TempDir()
	err := Run(context.Background(), Options{
		Out: dir, Runs: 3, Seed: 1, Workers: 2, Only: `^P1-(hosep|ehosep-80%)$`,
		Scenarios: scenarioDir, Engines: []string{sim.EngineDefault},
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "tables.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`\| P1 \| 80% \| (\d+) \| ([\d.]+) / ([\d.]+) / ([\d.]+) \|`).FindStringSubmatch(string(md))
	if row == nil {
		t.Fatalf("tables.md has no relative-performance row for P1 at 80%%:\n%s", md)
	}
	if row[1] != "900" {
		t.Errorf("%s tasks, want 900 (3 runs × 300)", row[1])
	}
	var sum float64
	for _, s := range row[2:5] {
		v, _ := strconv.ParseFloat(s, 64)
		sum += v
	}
	if sum < 99.85 || sum > 100.15 {
		t.Errorf("shares %v add up to %v %%, want 100", row[2:5], sum)
	}
	if !strings.Contains(string(md), "![Relative performance (seed 002), test 1") {
		t.Error("tables.md does not show the CDF figure")
	}
	if _, err := os.Stat(filepath.Join(dir, "relperf-P1.png")); err != nil {
		t.Error(err)
	}
}
