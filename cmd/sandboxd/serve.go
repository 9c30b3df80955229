package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strings"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/daemon"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "run the API server: sessions over WebSocket (/v1/ws) and MCP (/mcp), on Docker",
		run:     runServe,
	})
}

const serveHelp = `
Serves sandboxd's APIs on one address: the WebSocket JSON-RPC API at /v1/ws,
MCP (streamable HTTP) at /mcp, /metrics (Prometheus) and /healthz. Every
request but /healthz needs "Authorization: Bearer <token>" with the operator
token: SANDBOXD_TOKEN, or else the token in <state-dir>/token, generated on
first start (0600). Sessions run in Docker containers; the agent inside them
is this binary (it must be static: build with CGO_ENABLED=0).

The server binds loopback by default and refuses a non-loopback address
without TLS (--tls-cert/--tls-key) or --insecure-allow-remote.

SIGTERM or SIGINT shuts down gracefully: no new work, calls in flight get
--drain-timeout to finish, WebSockets close with 1001, then sessions are
removed (or kept running with --keep-sessions, for the next start to adopt).

--config FILE names a YAML file of session profiles (named kinds of
session: image, env, cwd, limits, network, idle timeout, warm pool, skills),
skill roots and the engine networks sessions may join (allow_networks); session.create takes "profile", /mcp/NAME serves profile
NAME, and a profile named "default" is what a create without profile and
/mcp get. A bad file refuses to start, naming file:line and the option.
Without it, every session takes the flags' defaults.

Every flag can also be set in the environment: SANDBOXD_<FLAG> with dashes
as underscores (SANDBOXD_LISTEN, SANDBOXD_MCP_IMAGE, ...); flags win.`

func runServe(ctx context.Context, std stdio, args []string) error {
	cfg := daemon.Defaults()
	fs := newFlagSet("serve", std, "[flags]", serveHelp)
	cfg.RegisterFlags(fs)
	if err := envDefaults(fs, "SANDBOXD_"); err != nil {
		return err
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg.LogOutput, cfg.Version = std.err, version()
	d, err := daemon.New(ctx, cfg)
	if err != nil {
		return fromDaemon(err)
	}
	return d.Run(ctx, func(addr net.Addr) { banner(std, cfg, d, addr) })
}

// fromDaemon is err with the daemon's usage errors as this command's
// (exit code 2).
func fromDaemon(err error) error {
	var ue *daemon.UsageError
	if errors.As(err, &ue) {
		return &usageError{err: ue.Err}
	}
	return err
}

// banner says where the server listens, where its token is, and what to
// try next.
func banner(std stdio, cfg daemon.Config, d *daemon.Daemon, addr net.Addr) {
	{
		base := baseURL(cfg, addr)
		where := "from SANDBOXD_TOKEN"
		if d.TokenPath != "" {
			where = "in " + d.TokenPath
			if d.TokenCreated {
				where = "generated, in " + d.TokenPath
			}
		}
		d.Log.Info("sandboxd serving", "addr", addr.String(), "websocket", wsURL(base), "mcp", base+"/mcp", "token", where)
		if len(d.Profiles) > 0 {
			d.Log.Info("session profiles", "config", cfg.ConfigPath, "profiles", strings.Join(d.Profiles, ", "), "mcp", base+"/mcp/NAME")
		}
		// The client commands need the flags that differ from their defaults.
		var flags string
		if u := wsURL(base); u != "ws://"+server.DefaultListen+"/v1/ws" {
			flags += " --server " + shellQuote(u)
		}
		if def, _ := auth.DefaultStateDir(); d.TokenPath != "" && d.StateDir != def {
			flags += " --state-dir " + shellQuote(d.StateDir)
		}
		who := "same user"
		if d.TokenPath == "" {
			who = "with the same SANDBOXD_TOKEN: no token file is written"
		}
		fmt.Fprintf(std.err, "sandboxd %s serving on %s\n  WebSocket: %s\n  MCP:       %s/mcp\n  token:     %s\n"+
			"try, in another terminal (%s):\n  sandboxd run%s -- 'uname -a; id'   # a command in a fresh sandbox\n  sandboxd shell%s                    # an interactive terminal\n"+
			"  MCP clients: %s/mcp with the header \"Authorization: Bearer <token>\"\n",
			version(), addr, wsURL(base), base, where, who, flags, flags, base)
	}
}

func baseURL(cfg daemon.Config, addr net.Addr) string {
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	if addr.Network() == "unix" {
		return "unix:" + addr.String()
	}
	return scheme + "://" + addr.String()
}

func wsURL(base string) string {
	if strings.HasPrefix(base, "unix:") {
		return base + " (path /v1/ws)"
	}
	return "ws" + strings.TrimPrefix(base, "http") + "/v1/ws"
}

// envDefaults sets every flag from prefix+NAME (upper case, dashes as
// underscores) before the command line is parsed, so flags win.
func envDefaults(fs *flag.FlagSet, prefix string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = usageErrorf("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

// version is the module version of the binary, "dev" when built from a
// work tree.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/:._-+=@%,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
