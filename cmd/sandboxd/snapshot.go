package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// The snapshot commands (docs/snapshots.md): each prints its result as one
// JSON document on stdout, for scripts.

func init() {
	register(&command{
		name:    "snapshot",
		summary: "snapshots of a session's files: snapshot create|list|delete",
		run:     runSnapshot,
	})
	register(&command{
		name:    "fork",
		summary: "start sessions from a snapshot, or from a live session",
		run:     runFork,
	})
	register(&command{
		name:    "restore",
		summary: "roll a live session back to one of its snapshots, in place",
		run:     runRestore,
	})
}

const snapshotHelp = `
snapshot create --session ID [--name NAME] [--retention D]
    takes a snapshot of the session's files: its root changes, /workspace,
    HOME and editable paths. Running processes are not part of it.
snapshot list
    lists the snapshots (all with the operator token; with a session's token,
    that session's).
snapshot delete SNAPSHOT
    deletes a snapshot by id or name.
snapshot warm --size N SNAPSHOT
    keeps N forks of the snapshot started and ready, so that the next forks
    (without --options) are handed out at once; --size 0 removes the pool.
    Operator token only; the pool lives until the snapshot goes.

With --session, the session's token must be in SANDBOXD_SESSION_TOKEN (as
for every method on a session, the operator token alone does not reach
one). Without --session, the operator token is used (--token-file,
SANDBOXD_TOKEN, the local server's token file). Results are JSON on stdout.`

const forkHelp = `
Starts --count sessions (1 to 32) from a snapshot (by id or name), or from a
live session (--session: a snapshot is taken first, named --name). Each fork
has its own id and token; they are printed as JSON, one entry per fork, a
session or that fork's error. Operator token only. --options is a JSON
object of session.create's fields (env, limits, labels, ...) laid over the
snapshot's session options; image and profile are not allowed.`

const restoreHelp = `
Rolls a live session back to a snapshot (by id or name) in place: the same
id and token, exactly the snapshot's files. Its processes start afresh: the
terminal's shell is a new one, background jobs end. With a session's token
(SANDBOXD_SESSION_TOKEN) only a snapshot of that session.`

// snapshotClient dials the server with the session's token (when
// sessionToken is set) or the operator's.
func snapshotClient(ctx context.Context, conn connFlags, sessionToken string) (*client.Client, error) {
	token := sessionToken
	if token == "" {
		var err error
		if token, err = conn.operatorToken(); err != nil {
			return nil, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return client.Dial(dctx, conn.server, token, client.Options{})
}

func printJSON(std stdio, v any) error {
	enc := json.NewEncoder(std.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runSnapshot(ctx context.Context, std stdio, args []string) error {
	if len(args) == 0 {
		return usageErrorf("snapshot: name a subcommand: create, list, delete or warm")
	}
	var conn connFlags
	var sessionID, name string
	var retention time.Duration
	var size int
	fs := newFlagSet("snapshot "+args[0], std, "create|list|delete|warm [flags]", snapshotHelp)
	conn.register(fs)
	sub := args[0]
	if sub == "create" {
		fs.StringVar(&sessionID, "session", "", "the session to snapshot")
		fs.StringVar(&name, "name", "", "a unique name for the snapshot (letters, digits, '_', '.', '-')")
		fs.DurationVar(&retention, "retention", 0, "how long the server keeps it (0: the profile's or the server's default; negative: until deleted)")
	}
	if sub == "warm" {
		fs.IntVar(&size, "size", 1, "how many forks to keep ready (0: none)")
	}
	switch sub {
	case "create", "list":
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
	case "delete", "warm":
		if err := parseArgs(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return usageErrorf("snapshot %s: name one snapshot (its id or name) after the flags", sub)
		}
	case "-h", "--help", "help":
		fs.Usage()
		return flag.ErrHelp
	default:
		return usageErrorf("snapshot: unknown subcommand %q (create, list, delete, warm)", sub)
	}
	if sub == "create" && sessionID == "" {
		return usageErrorf("snapshot create: --session is required")
	}
	token := ""
	if sessionID != "" {
		if token = os.Getenv("SANDBOXD_SESSION_TOKEN"); token == "" {
			return usageErrorf("snapshot %s --session needs the session's token in SANDBOXD_SESSION_TOKEN", sub)
		}
	}
	c, err := snapshotClient(ctx, conn, token)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	switch sub {
	case "create":
		info, err := c.Session(sessionID, token).Snapshot(ctx, client.SnapshotOptions{Name: name, Retention: retention})
		if err != nil {
			return err
		}
		return printJSON(std, info)
	case "list":
		all, err := c.Snapshots(ctx)
		if err != nil {
			return err
		}
		if all == nil {
			all = []wsproto.SnapshotInfo{}
		}
		return printJSON(std, wsproto.SnapshotListResult{Snapshots: all})
	case "warm":
		if err := c.WarmSnapshot(ctx, fs.Arg(0), size); err != nil {
			return err
		}
		return printJSON(std, wsproto.SnapshotWarmParams{Snapshot: fs.Arg(0), Size: size})
	default:
		if err := c.DeleteSnapshot(ctx, fs.Arg(0)); err != nil {
			return err
		}
		return printJSON(std, wsproto.SnapshotDeleteResult{Deleted: true})
	}
}

func runFork(ctx context.Context, std stdio, args []string) error {
	var conn connFlags
	var sessionID, name, options string
	var count int
	var retention time.Duration
	fs := newFlagSet("fork", std, "[--count N] [flags] SNAPSHOT | --session ID [--count N] [flags]", forkHelp)
	conn.register(fs)
	fs.StringVar(&sessionID, "session", "", "fork this live session (a snapshot is taken first)")
	fs.StringVar(&name, "name", "", "with --session: the name of the snapshot taken first")
	fs.DurationVar(&retention, "retention", 0, "with --session: how long the snapshot taken first is kept")
	fs.IntVar(&count, "count", 1, "how many sessions (1 to 32)")
	fs.StringVar(&options, "options", "", `session options over the snapshot's, as JSON ({"env": {"SEED": "1"}})`)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	o := client.ForkOptions{Name: name, Retention: retention, Count: count}
	switch {
	case sessionID != "" && fs.NArg() == 0:
	case sessionID == "" && fs.NArg() == 1:
		o.Snapshot = fs.Arg(0)
	default:
		return usageErrorf("fork: name one snapshot, or a live session with --session")
	}
	if options != "" {
		o.Options = &client.CreateOptions{}
		if err := json.Unmarshal([]byte(options), o.Options); err != nil {
			return usageErrorf("fork: --options: %v", err)
		}
	}
	if sessionID != "" && os.Getenv("SANDBOXD_SESSION_TOKEN") == "" {
		return usageErrorf("fork --session needs the session's token in SANDBOXD_SESSION_TOKEN (and the operator token)")
	}
	c, err := snapshotClient(ctx, conn, "")
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if sessionID != "" {
		o.Session = c.Session(sessionID, os.Getenv("SANDBOXD_SESSION_TOKEN"))
	}

	f, err := c.Fork(ctx, o)
	if err != nil {
		return err
	}
	res := wsproto.ForkResult{SnapshotID: f.SnapshotID, Note: wsproto.SnapshotNote}
	for i, s := range f.Sessions {
		if s == nil {
			e := &wsproto.Error{Code: wsproto.CodeInternal, Message: f.Errors[i].Error()}
			_ = errors.As(f.Errors[i], &e)
			res.Forks = append(res.Forks, wsproto.ForkEntry{Error: e})
			continue
		}
		res.Forks = append(res.Forks, wsproto.ForkEntry{SessionID: s.ID, SessionToken: s.Token})
	}
	return printJSON(std, res)
}

func runRestore(ctx context.Context, std stdio, args []string) error {
	var conn connFlags
	var sessionID string
	fs := newFlagSet("restore", std, "--session ID [flags] SNAPSHOT", restoreHelp)
	conn.register(fs)
	fs.StringVar(&sessionID, "session", "", "the session to roll back")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if sessionID == "" || fs.NArg() != 1 {
		return usageErrorf("restore: --session ID and one snapshot (its id or name)")
	}
	token := os.Getenv("SANDBOXD_SESSION_TOKEN")
	if token == "" {
		return usageErrorf("restore needs the session's token in SANDBOXD_SESSION_TOKEN")
	}
	c, err := snapshotClient(ctx, conn, token)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	r, err := c.Session(sessionID, token).Restore(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	return printJSON(std, r)
}
