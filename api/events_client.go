package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// DefaultStreamIdleTimeout is how long Client.Events waits without a byte
// (the server pings every DefaultEventKeepAlive) before it takes the peer
// for lost.
const DefaultStreamIdleTimeout = 3 * DefaultEventKeepAlive

// EventQuery says where GET /v1/events starts and what it keeps.
type EventQuery struct {
	// After resumes after this event ID (sent as Last-Event-ID).
	After string
	// From, when After is "", is the first log index wanted; 0 means the
	// present.
	From uint64
	// Org keeps the changes of one organisation's tasks.
	Org string
	// OnOpen, when set, is called once the stream is open, with the
	// position it starts after.
	OnOpen func(after string)
}

// Events streams GET /v1/events: fn sees each task event in log order. It
// returns when the stream ends: with the server's end event as an *Error
// (CodeTooSlow, CodeShuttingDown), an *Error for a refused request
// (CodeEventsGone when the peer no longer holds the events after the
// position), CodeUnreachable when the connection is lost or silent for
// StreamIdleTimeout, fn's error, or ctx's. last is the position reached:
// the ID to resume after ("" if the stream never opened).
func (c *Client) Events(ctx context.Context, q EventQuery, fn func(TaskEvent) error) (last string, err error) {
	last = q.After
	if c.baseErr != nil {
		return last, &Error{Code: CodeBadRequest, Message: c.baseErr.Error()}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := c.openEvents(ctx, q)
	if err != nil {
		return last, err
	}
	defer resp.Body.Close()
	idle := c.StreamIdleTimeout
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	silent := errors.New("silent")
	watchdog := time.AfterFunc(idle, func() { cancel(silent) })
	defer watchdog.Stop()
	lost := func(err error) error {
		if context.Cause(ctx) == silent {
			err = fmt.Errorf("no byte for %v", idle)
		}
		if ctx.Err() != nil && context.Cause(ctx) != silent {
			return ctx.Err()
		}
		return &Error{Code: CodeUnreachable, Message: fmt.Sprintf("event stream from %s lost after %s: %v", c.BaseURL(), last, err)}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var name, id string
	var data strings.Builder
	for sc.Scan() {
		watchdog.Reset(idle)
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				name = value
			case "id":
				id = value
			case "data":
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(value)
			}
			continue
		}
		done, err := c.dispatch(name, id, data.String(), &last, q, fn)
		if done || err != nil {
			return last, err
		}
		name, id = "", ""
		data.Reset()
	}
	err = sc.Err()
	if err == nil {
		err = errors.New("the peer closed the stream")
	}
	return last, lost(err)
}

func (c *Client) openEvents(ctx context.Context, q EventQuery) (*http.Response, error) {
	u := *c.base
	u.Path += "/v1/events"
	v := url.Values{}
	if q.After == "" && q.From > 0 {
		v.Set("from", strconv.FormatUint(q.From, 10))
	}
	if q.Org != "" {
		v.Set("org", q.Org)
	}
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("GET /v1/events: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token)
	if q.After != "" {
		req.Header.Set("Last-Event-ID", q.After)
	}
	// The stream lives as long as the caller wants: not bounded by the
	// client's timeout for calls.
	hc := *c.hc
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("GET /v1/events: %w", ctx.Err())
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &Error{Code: CodeUnreachable, Message: fmt.Sprintf("cannot reach the peer's API at %s: %v", c.BaseURL(), err)}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var buf strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&limitedWriter{w: &buf, n: 64 << 10})
		return nil, decodeError(resp.StatusCode, []byte(buf.String()))
	}
	return resp, nil
}

// dispatch handles one event; done says the stream ended.
func (c *Client) dispatch(name, id, data string, last *string, q EventQuery, fn func(TaskEvent) error) (bool, error) {
	switch name {
	case "open":
		*last = id
		if q.OnOpen != nil {
			q.OnOpen(id)
		}
	case "ping":
		*last = id
	case "task":
		var e TaskEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return true, fmt.Errorf("event %s from %s: %w", id, c.BaseURL(), err)
		}
		if err := fn(e); err != nil {
			return true, err
		}
		*last = e.ID
	case "end":
		var e streamEnd
		if err := json.Unmarshal([]byte(data), &e); err != nil || e.Code == "" {
			return true, fmt.Errorf("end of the event stream from %s: %q", c.BaseURL(), data)
		}
		return true, &Error{Code: e.Code, Message: e.Message}
	}
	return false, nil
}

type limitedWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		p = p[:l.n]
	}
	l.n -= len(p)
	_, err := l.w.Write(p)
	return len(p), err
}

// Resumable says whether a stream that ended with err may resume after its
// last position, on the same peer or another: the connection was lost or
// the peer shut down or is briefly unavailable. Any other end (the
// position is gone, the client too slow, a refused request) needs a new
// listing first, or a fix.
func Resumable(err error) bool {
	switch CodeOf(err) {
	case CodeUnreachable, CodeShuttingDown, CodeUnavailable, CodeInternal:
		return true
	}
	return false
}

// Follow streams task events from clients' peers, surviving their loss:
// when a stream ends resumably (Resumable), it resumes after the last
// position on the next client in turn (the same one if there is only
// one), pausing with a backoff while none answers. It returns fn's error,
// ctx's, or the first end that is not resumable: CodeEventsGone and
// CodeTooSlow mean list the state again, then follow from the present.
// The position reached is returned too.
func Follow(ctx context.Context, clients []*Client, q EventQuery, fn func(TaskEvent) error) (string, error) {
	if len(clients) == 0 {
		return q.After, errors.New("follow events: no peer to ask")
	}
	bo := &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: 3 * time.Second}
	bo.Reset()
	open := q.OnOpen
	for i := 0; ; i++ {
		c := clients[i%len(clients)]
		opened := false
		q.OnOpen = func(after string) {
			opened = true
			if open != nil {
				open(after)
				open = nil // once: the first stream only
			}
		}
		last, err := c.Events(ctx, q, fn)
		if last != "" {
			q.After = last
		}
		if ctx.Err() != nil {
			return q.After, ctx.Err()
		}
		if !Resumable(err) {
			return q.After, err
		}
		if opened {
			bo.Reset()
		}
		select {
		case <-ctx.Done():
			return q.After, ctx.Err()
		case <-time.After(bo.NextBackOff()):
		}
	}
}
