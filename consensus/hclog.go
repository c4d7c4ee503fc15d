package consensus

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// newRaftLogger returns an hclog.Logger whose lines go to log. hclog writes
// one JSON object per line; slogWriter turns each into a slog record at the
// matching level, so raft's messages follow the program's handler and level.
func newRaftLogger(log *slog.Logger) hclog.Logger {
	level := hclog.Info
	if log.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "raft",
		Level:      level,
		Output:     &slogWriter{log: log, limit: newPeerLimiter(peerLogEvery)},
		JSONFormat: true,
	})
}

type slogWriter struct {
	log   *slog.Logger
	limit *peerLimiter
}

// peerLogEvery is how often one warning or error about one peer is logged:
// raft reports every failed heartbeat to a dead follower (four a second
// with the LAN preset, about 115 MB of log a day), and the line says
// nothing new after the first.
const peerLogEvery = 30 * time.Second

// peerKeys are the attributes under which raft and autopilot name the peer
// a line is about.
var peerKeys = [...]string{"peer", "server-id", "id"}

// peerLimiter lets one line per message and peer through every period and
// counts the others, which the next line let through reports.
type peerLimiter struct {
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func newPeerLimiter(every time.Duration) *peerLimiter {
	return &peerLimiter{every: every, now: time.Now, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// maxLimiterKeys bounds the limiter's memory (one entry per message and
// peer); past it the limiter starts afresh.
const maxLimiterKeys = 1024

// allow says whether the line keyed key goes out now and, if so, how many
// were held back since the last that did.
func (l *peerLimiter) allow(key string) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, seen := l.last[key]; seen && now.Sub(last) < l.every {
		l.suppressed[key]++
		return false, 0
	}
	if len(l.last) >= maxLimiterKeys {
		clear(l.last)
		clear(l.suppressed)
	}
	l.last[key] = now
	suppressed = l.suppressed[key]
	delete(l.suppressed, key)
	return true, suppressed
}

func (w *slogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(p, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			w.log.Info(string(line))
			continue
		}
		level := slog.LevelInfo
		switch lv, _ := m["@level"].(string); strings.ToLower(lv) {
		case "trace", "debug":
			level = slog.LevelDebug
		case "warn":
			level = slog.LevelWarn
		case "error":
			level = slog.LevelError
		}
		msg, _ := m["@message"].(string)
		module, _ := m["@module"].(string)
		attrs := []any{"module", module}
		if level >= slog.LevelWarn && w.limit != nil {
			if about := peerOf(m); about != "" {
				ok, n := w.limit.allow(msg + "\x00" + about)
				if !ok {
					continue
				}
				if n > 0 {
					attrs = append(attrs, "suppressed_since_last", n)
				}
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			if !strings.HasPrefix(k, "@") {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			attrs = append(attrs, k, m[k])
		}
		w.log.Log(context.Background(), level, msg, attrs...)
	}
	return len(p), nil
}

// peerOf is the peer a raft line is about, "" when it names none.
func peerOf(m map[string]any) string {
	for _, k := range peerKeys {
		switch v := m[k].(type) {
		case string:
			if v != "" {
				return v
			}
		case map[string]any:
			// A raft.Server, as hclog writes it.
			if id, ok := v["ID"].(string); ok && id != "" {
				return id
			}
		}
	}
	return ""
}
