package demo

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coopgrid/coopgrid/ledger"
)

// demoSnap is what one progress frame shows: the federation as one live
// peer's replica of the ledger holds it.
type demoSnap struct {
	elapsed     time.Duration // wall clock since the workload started
	simSeconds  float64       // the same in simulated time
	leader      string        // organisation of the leading peer, "" if none
	observer    string        // whose replica this is
	orgs        []ledger.OrgInfo
	dead        map[string]bool
	late        string
	lateIn      bool // the late organisation has arrived
	done, total int
}

// demoEvent is a line of the demo's story (late arrival, kill, fail-over).
type demoEvent struct {
	elapsed    time.Duration
	simSeconds float64
	text       string
}

func (e demoEvent) String() string {
	return fmt.Sprintf("%6s  (sim %s)  %s", fmtWall(e.elapsed), fmtSim(e.simSeconds), e.text)
}

// demoView draws the progress: on a terminal, a table redrawn in place
// with the latest events under it; otherwise (a pipe, a file, CI logs)
// plain lines: each event as it happens and a status line every few
// seconds.
type demoView struct {
	out    io.Writer
	tty    bool
	width  int           // terminal columns: longer lines are cut, so that the frame's height is its line count
	every  time.Duration // plain mode: between status lines
	last   time.Time
	lines  int // lines of the last frame (tty)
	events []demoEvent
	shown  int // events already printed (plain)
	// legendShown: plain mode prints the legend once, before the first
	// status line.
	legendShown bool
}

// demoLegend names what the progress shows for each organisation.
var demoLegend = []string{
	"legend: per organisation, DP = (allocated - quota) / quota: below 0 it gets less computing than it contributes, above 0 more;",
	"        PI / limit W = the power now serving its tasks against its limit (EHOSEP keeps PI <= limit);",
	"        queued, running, done = its tasks; on a terminal, peer = its peer's role (leader, up, killed, not arrived: the late one before it submits).",
}

// maxShownEvents bounds the event lines under the live table.
const maxShownEvents = 6

func newDemoView(out io.Writer, allowTTY bool) *demoView {
	v := &demoView{out: out, every: 2 * time.Second}
	if allowTTY {
		v.width, v.tty = terminalWidth(out)
	}
	return v
}

func (v *demoView) event(e demoEvent) {
	v.events = append(v.events, e)
	if !v.tty {
		fmt.Fprintf(v.out, "%s\n", e)
		v.shown = len(v.events)
	}
}

// frame draws one snapshot; force draws a plain status line even if one
// was drawn recently (the first and the last).
func (v *demoView) frame(s demoSnap, force bool) {
	if v.tty {
		var b bytes.Buffer
		v.table(&b, s)
		evs := v.events
		if len(evs) > maxShownEvents {
			evs = evs[len(evs)-maxShownEvents:]
		}
		for _, l := range demoLegend {
			fmt.Fprintf(&b, "%s\n", l)
		}
		for _, e := range evs {
			fmt.Fprintf(&b, "%s\n", e)
		}
		frame := clipLines(b.String(), v.width-1)
		if v.lines > 0 {
			// Back to the top of the last frame, and clear below.
			fmt.Fprintf(v.out, "\x1b[%dA\x1b[J", v.lines)
		}
		v.lines = strings.Count(frame, "\n")
		io.WriteString(v.out, frame)
		return
	}
	now := time.Now()
	if !force && now.Sub(v.last) < v.every {
		return
	}
	v.last = now
	if !v.legendShown {
		v.legendShown = true
		for _, l := range demoLegend {
			fmt.Fprintf(v.out, "%s\n", l)
		}
	}
	fmt.Fprintf(v.out, "%s\n", plainStatus(s))
}

// clipLines cuts every line of s to at most width runes.
func clipLines(s string, width int) string {
	if width <= 0 {
		return s
	}
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		nl := strings.HasSuffix(l, "\n")
		r := []rune(strings.TrimSuffix(l, "\n"))
		if len(r) > width {
			l = string(r[:width])
			if nl {
				l += "\n"
			}
			lines[i] = l
		}
	}
	return strings.Join(lines, "")
}

// table is the terminal frame: a header and one row per organisation.
func (v *demoView) table(w io.Writer, s demoSnap) {
	leader := s.leader
	if leader == "" {
		leader = "none (election)"
	}
	fmt.Fprintf(w, "t = %s wall, %s simulated   leader %s   tasks done %d/%d %s\n",
		fmtWall(s.elapsed), fmtSim(s.simSeconds), leader, s.done, s.total, bar(s.done, s.total, 24))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "org\tpeer\tmachines up\tDP\tPI / limit W\tqueued\trunning\tdone\t")
	for _, o := range s.orgs {
		name := o.Name
		if o.Name == s.late {
			name += " (late)"
		}
		state := "up"
		switch {
		case s.dead[o.Name]:
			state = "killed"
		case o.Name == s.leader:
			state = "leader"
		case o.Name == s.late && !s.lateIn:
			state = "not arrived"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%d\t%d\t%d\t\n", name, state, o.MachinesUp, o.Machines,
			fmtDP(o.DP), fmtPI(o), o.Queued, o.Assigned+o.Running, o.Done)
	}
	tw.Flush()
}

// plainStatus is one line for logs.
func plainStatus(s demoSnap) string {
	var b strings.Builder
	leader := s.leader
	if leader == "" {
		leader = "none"
	}
	fmt.Fprintf(&b, "%6s  (sim %s)  leader %s  done %d/%d |", fmtWall(s.elapsed), fmtSim(s.simSeconds), leader, s.done, s.total)
	for _, o := range s.orgs {
		fmt.Fprintf(&b, " %s: DP %s, PI/limit %s W, queued %d, running %d, done %d |", o.Name, fmtDP(o.DP), fmtPI(o), o.Queued, o.Assigned+o.Running, o.Done)
	}
	return strings.TrimSuffix(b.String(), " |")
}

func fmtDP(dp *float64) string {
	if dp == nil {
		return "-" // no machine up: the policy treats DP as +Inf
	}
	return fmt.Sprintf("%+.2f", *dp)
}

// fmtPI writes PI against the limit, in watts.
func fmtPI(o ledger.OrgInfo) string {
	return fmt.Sprintf("%.0f/%s", float64(o.PIMilliW)/1000, fmtLimit(o.LimitMilliW))
}

func fmtLimit(mw int64) string {
	return fmt.Sprintf("%.0f", float64(mw)/1000)
}

func bar(done, total, width int) string {
	if total <= 0 {
		return ""
	}
	k := done * width / total
	return "[" + strings.Repeat("#", k) + strings.Repeat(".", width-k) + "]"
}

func fmtWall(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// fmtSim writes simulated seconds as h:mm:ss.
func fmtSim(s float64) string {
	t := int64(s + 0.5)
	return fmt.Sprintf("%d:%02d:%02d", t/3600, t/60%60, t%60)
}
