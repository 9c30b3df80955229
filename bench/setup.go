package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	dclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// setup is what the suites that start sandboxes begin with.
type setup struct {
	bin   string       // the sandboxd binary under test (-agent, or built)
	image string       // the sessions' image: $SANDBOXD_TEST_IMAGE, or the test image
	quiet *slog.Logger // the in-process servers' log: warnings and errors only
}

// setup finds (or builds) the binary and reads the image from the
// environment.
func (e *env) setup() (setup, error) {
	bin, err := e.sandboxdBinary()
	if err != nil {
		return setup{}, err
	}
	return setup{
		bin:   bin,
		image: cmp.Or(os.Getenv("SANDBOXD_TEST_IMAGE"), testenv.DefaultTestImage),
		quiet: slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, nil
}

// scopeKey labels everything a run of a suite makes in Docker.
const scopeKey = "sandboxd.bench.run"

// runScope is one run's value of scopeKey and a Docker client that checks,
// when the suite ends, that nothing carrying it is left behind.
type runScope struct {
	cli   *dclient.Client
	value string
}

func newRunScope() (*runScope, error) {
	cli, err := dclient.NewClientWithOpts(dclient.FromEnv, dclient.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	return &runScope{cli: cli, value: strconv.FormatInt(time.Now().UnixNano(), 36)}, nil
}

// labels are the scope's label and the pairs given (key, value, ...).
func (r *runScope) labels(kv ...string) map[string]string {
	m := map[string]string{scopeKey: r.value}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// end runs deferred, after the suite's servers stopped: it joins to *err
// what was left behind (and is now removed), prefixed by who ("" for
// none), and closes the client.
func (r *runScope) end(err *error, who string) {
	if left := testenv.Leftovers(context.Background(), r.cli, scopeKey, r.value); len(left) > 0 {
		msg := "left behind (now removed): " + strings.Join(left, ", ")
		if who != "" {
			msg = who + ": " + msg
		}
		*err = errors.Join(*err, errors.New(msg))
	}
	_ = r.cli.Close()
}
