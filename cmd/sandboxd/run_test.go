package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// failWriter fails every write, as a closed pipe does.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// run's one streaming call: the command's output and exit code come back,
// a tool error is an error, a stdout that fails is 141.
func TestRunCommandOneCall(t *testing.T) {
	ts := servertest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, ts.URL, ts.Token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	s, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		command string
		out     string
		code    int
	}{
		{"echo hi", "hi\n", 0},
		{"exit 7", "", 7},
	} {
		var out bytes.Buffer
		code, err := runCommand(ctx, nil, nil, nil, s, tc.command, &out)
		if err != nil || code != tc.code || out.String() != tc.out {
			t.Errorf("%q: exit %d, %q, %v; want %d, %q", tc.command, code, out.String(), err, tc.code, tc.out)
		}
	}
	if _, err := runCommand(ctx, nil, nil, nil, s, "exit x", &bytes.Buffer{}); err == nil {
		t.Error("a tool error was not an error")
	}
	if code, err := runCommand(ctx, nil, nil, nil, s, "echo into a closed pipe", failWriter{}); err != nil || code != exitBrokenPipe {
		t.Errorf("closed stdout: exit %d, %v; want %d", code, err, exitBrokenPipe)
	}
}
