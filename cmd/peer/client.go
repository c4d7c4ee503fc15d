package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/coopgrid/coopgrid/api"
)

// The user-facing commands talk to the local peer's HTTP API (package
// api): they find its address and bearer token in the peer's data
// directory, or take them from flags.

// newClientCmds returns the commands that talk to a running peer.
func newClientCmds() []*cobra.Command {
	return []*cobra.Command{
		newSubmitCmd(), newTasksCmd(), newTaskCmd(), newLogsCmd(), newCancelCmd(), newRetryCmd(),
		newMachinesCmd(), newOrgsCmd(), newLedgerCmd(), newLimitCmd(), newStatusCmd(), newLeaveCmd(),
		newInviteCmd(), newRemoveCmd(), newMembersCmd(), newHistoryCmd(), newJobPolicyCmd(), newRetentionCmd(),
	}
}

// configFile is where `peer init` writes the peer's configuration; the
// client reads only its `api` key.
const configFile = "config.yaml"

// clientFlags are the flags every client command takes.
type clientFlags struct {
	data      string
	apiURL    string
	tokenFile string
	timeout   time.Duration
	json      bool
}

func addClientFlags(cmd *cobra.Command, f *clientFlags, withJSON bool) {
	// A misspelt flag is bad input: exit code 2, like every usage error.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "", "the peer's data directory (holds "+api.TokenFile+" and "+configFile+")")
	fl.StringVar(&f.apiURL, "api", "", "the peer's API address, HOST:PORT or URL (default: the api key of DATA/"+configFile+", else "+api.DefaultAddr+")")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the API's bearer token (default DATA/"+api.TokenFile+")")
	fl.DurationVar(&f.timeout, "timeout", defaultTimeout, "give up on the whole command after this long (0: never; a command that follows the peer with --watch or --wait: only when given)")
	if withJSON {
		fl.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	}
	boundWhole(cmd, f)
}

// usageArgs wraps a cobra argument check so that a wrong number of
// arguments is a usage error (exit code 2).
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("%w (usage: %s)", err, cmd.UseLine())}
		}
		return nil
	}
}

// conn is a client of the local peer's API, with where its token came
// from for error messages.
type conn struct {
	*api.Client
	tokenFrom string
}

// connect resolves the API's address and token. Problems with them are
// usage errors (exit 2): nothing has been sent yet.
func (f *clientFlags) connect() (*conn, error) {
	tokenFile := f.tokenFile
	if tokenFile == "" {
		if f.data == "" {
			return nil, usageErr("no API token: give --data DIR (the peer's data directory, holding %s; or set %s) or --token-file FILE", api.TokenFile, envData)
		}
		tokenFile = filepath.Join(f.data, api.TokenFile)
	}
	raw, err := os.ReadFile(tokenFile)
	if err != nil {
		hint := ""
		if errors.Is(err, fs.ErrNotExist) && f.tokenFile == "" {
			hint = " (is this a data directory made by `peer init`?)"
		}
		return nil, usageErr("read the API token: %v%s", err, hint)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return nil, usageErr("the API token file %s is empty or malformed", tokenFile)
	}
	addr, err := f.address()
	if err != nil {
		return nil, err
	}
	base, err := api.ParseBaseURL(addr)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	// No per-request timeout: --timeout bounds the command as a whole
	// (boundWhole), through the requests' context.
	hc := &http.Client{}
	return &conn{Client: api.NewClient(base, token, hc), tokenFrom: tokenFile}, nil
}

// address is --api, else the `api` key of DATA/config.yaml, else the
// default. A wildcard host ("0.0.0.0:9441", ":9441") is reached through
// loopback.
func (f *clientFlags) address() (string, error) {
	if f.apiURL != "" {
		return f.apiURL, nil
	}
	if f.data == "" {
		return api.DefaultAddr, nil
	}
	path := filepath.Join(f.data, configFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return api.DefaultAddr, nil
	}
	if err != nil {
		return "", usageErr("read %s: %v", path, err)
	}
	// Lenient on purpose: the daemon validates the whole file; the client
	// needs one key and must not break when the daemon learns new ones.
	var cfg struct {
		API string `yaml:"api"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", usageErr("read %s: %v", path, err)
	}
	if cfg.API == "" {
		return api.DefaultAddr, nil
	}
	if strings.Contains(cfg.API, "://") {
		return cfg.API, nil
	}
	host, port, err := net.SplitHostPort(cfg.API)
	if err != nil {
		return "", usageErr("%s: api %q: want HOST:PORT", path, cfg.API)
	}
	if port == "0" {
		return "", usageErr("%s: api %q has no fixed port: give --api HOST:PORT", path, cfg.API)
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}

// fail turns an API error into the command's error: a clear sentence, and
// exit code 2 when the request itself was wrong, 1 otherwise.
func (c *conn) fail(what string, err error) error {
	var e *api.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch e.Code {
	case api.CodeUnreachable:
		slog.Debug("api unreachable", "err", e.Message)
		return &exitError{code: 1, err: fmt.Errorf("cannot reach the peer's API at %s: is `peer run` running?", c.BaseURL())}
	case api.CodeUnauthorized:
		return &exitError{code: 1, err: fmt.Errorf("the peer's API at %s refused the token from %s: is it the token of this peer's data directory?", c.BaseURL(), c.tokenFrom)}
	case api.CodeNoQuorum:
		return &exitError{code: 1, err: fmt.Errorf("%s: no quorum: %s", what, e.Message)}
	case api.CodeDeadlineUnmeetable:
		return &exitError{code: 1, err: fmt.Errorf("%s: refused, nothing queued: %s: %s (give a later deadline, or on_miss: nice to queue it as a nice task instead)", what, e.Code, e.Message)}
	case api.CodeBadRequest, api.CodeTooLarge:
		return &exitError{code: 2, err: fmt.Errorf("%s: %s: %s", what, e.Code, e.Message)}
	}
	return &exitError{code: 1, err: fmt.Errorf("%s: %s: %s", what, e.Code, e.Message)}
}

// printJSON writes v indented, as every --json output.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// num prints a quantity without trailing zeros: 12.345, 300, 0.5.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// dpStr prints DP with three decimals, "-" when undefined (quota 0).
func dpStr(dp *float64) string {
	if dp == nil {
		return "-"
	}
	return strconv.FormatFloat(*dp, 'f', 3, 64)
}

// when prints a unix-ms time in UTC, "-" for 0.
func when(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
