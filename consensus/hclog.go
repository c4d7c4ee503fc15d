package consensus

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"

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
		Output:     &slogWriter{log: log},
		JSONFormat: true,
	})
}

type slogWriter struct{ log *slog.Logger }

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
