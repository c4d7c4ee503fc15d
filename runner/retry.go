package runner

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// pacing is an exponential backoff without jitter: the first wait is
// initial, each next one doubles, up to ceiling.
type pacing struct {
	initial, ceiling time.Duration
	// tries bounds the attempts, the first included (0: until ctx ends).
	tries uint
}

// retry runs op until it succeeds, op marks its error final
// (backoff.Permanent), the tries are spent, or ctx ends; it waits by p
// between attempts and calls notify (if not nil) before each wait.
//
// On failure it returns op's last result and error (unwrapped), also when
// ctx ends during a wait: the caller learns why the last attempt failed,
// not merely that it stopped waiting.
func retry[T any](ctx context.Context, p pacing, op backoff.Operation[T], notify backoff.Notify) (T, error) {
	var last error
	res, err := backoff.Retry(ctx, func() (T, error) {
		res, err := op()
		last = err
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			last = perm.Unwrap()
		}
		return res, err
	},
		backoff.WithBackOff(&backoff.ExponentialBackOff{
			InitialInterval: p.initial,
			Multiplier:      2,
			MaxInterval:     p.ceiling,
		}),
		backoff.WithMaxTries(p.tries),
		// The loops this replaces had no overall deadline: ctx and the
		// tries bound them.
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(notify),
	)
	if err != nil && last != nil {
		err = last
	}
	return res, err
}
