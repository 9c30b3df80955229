package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"
)

// dumpOnFailure logs, when t has failed, what the engine knows of the
// test's containers before its manager removes them: each one's state
// (exit code, OOMKilled, times), the engine's events for it since the test
// began (a kill names the signal and who sent it through the engine; an
// oom event is the kernel's), and the end of its log (the agent's stderr).
// A session that dies under load leaves its cause here, not only in the
// manager's one-line description (issue 23).
func dumpOnFailure(t *testing.T) {
	if _, dup := dumping.LoadOrStore(t, true); dup {
		return // one dump per test, however many managers it made
	}
	since := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		label := filters.Arg("label", labelTest+"="+unsafeLabel.ReplaceAllString(t.Name(), "_"))
		ctrs, err := docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(label)})
		if err != nil {
			t.Logf("failure dump: listing containers: %v", err)
			return
		}
		evs := eventsSince(ctx, since, label)
		for _, c := range ctrs {
			var b strings.Builder
			fmt.Fprintf(&b, "failure dump: container %.12s (%s)\n", c.ID, c.Labels["sandboxd.session"])
			if in, err := docker.ContainerInspect(ctx, c.ID); err == nil && in.State != nil {
				s := in.State
				fmt.Fprintf(&b, "  state %s exit %d oom_killed %v error %q started %s finished %s\n",
					s.Status, s.ExitCode, s.OOMKilled, s.Error, s.StartedAt, s.FinishedAt)
			}
			// Runs of one action (the kernel's oom events come by the
			// dozen) are one line with their count and span.
			var mine []events.Message
			for _, e := range evs {
				if e.Actor.ID == c.ID {
					mine = append(mine, e)
				}
			}
			at := func(e events.Message) string { return time.Unix(0, e.TimeNano).UTC().Format("15:04:05.000") }
			for i := 0; i < len(mine); {
				j := i + 1
				for j < len(mine) && mine[j].Action == mine[i].Action && fmt.Sprint(eventAttrs(mine[j])) == fmt.Sprint(eventAttrs(mine[i])) {
					j++
				}
				if n := j - i; n > 1 {
					fmt.Fprintf(&b, "  event %s-%s %s x%d %v\n", at(mine[i]), at(mine[j-1]), mine[i].Action, n, eventAttrs(mine[i]))
				} else {
					fmt.Fprintf(&b, "  event %s %s %v\n", at(mine[i]), mine[i].Action, eventAttrs(mine[i]))
				}
				i = j
			}
			b.WriteString("  log (end):\n")
			b.WriteString(containerLogTail(ctx, c.ID, 40))
			t.Log(b.String())
		}
	})
}

var dumping sync.Map // *testing.T → true

// eventsSince returns the engine's container events matching f between
// since and now.
func eventsSince(ctx context.Context, since time.Time, f filters.KeyValuePair) []events.Message {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, errs := docker.Events(ctx, events.ListOptions{
		Since:   fmt.Sprint(since.Unix()),
		Until:   fmt.Sprint(time.Now().Unix() + 1),
		Filters: filters.NewArgs(f, filters.Arg("type", string(events.ContainerEventType))),
	})
	var out []events.Message
	for {
		select {
		case m := <-msgs:
			out = append(out, m)
		case err := <-errs:
			_ = err // io.EOF once Until has passed; an error ends the list as well
			return out
		case <-ctx.Done():
			return out
		}
	}
}

// eventAttrs are the attributes of an event worth a line (the labels
// are left out).
func eventAttrs(e events.Message) map[string]string {
	out := map[string]string{}
	for k, v := range e.Actor.Attributes {
		if k == "exitCode" || k == "signal" || k == "name" {
			out[k] = v
		}
	}
	return out
}

// containerLogTail is the last n lines of a container's stderr (its
// stdout is the agent's framed stream).
func containerLogTail(ctx context.Context, id string, n int) string {
	rc, err := docker.ContainerLogs(ctx, id, container.LogsOptions{ShowStderr: true, Tail: fmt.Sprint(n), Timestamps: true})
	if err != nil {
		return fmt.Sprintf("  (logs: %v)\n", err)
	}
	defer rc.Close()
	var out, errb bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &errb, rc)
	return indent(out.String() + errb.String())
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "    " + strings.Join(lines, "\n    ") + "\n"
}
