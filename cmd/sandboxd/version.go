package main

import (
	"context"
	"runtime"
	"runtime/debug"
	"strings"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print the version: the commit it was built from, and the Go toolchain (also --version)",
		run:     runVersion,
	})
}

const versionHelp = `
Prints what this binary was built from: the module version, the git commit
and its time (with "modified" when the tree had uncommitted changes), the Go
toolchain and the platform. The same binary runs inside every sandbox as the
agent, so this is the agent's version too.`

func runVersion(_ context.Context, std stdio, args []string) error {
	fs := newFlagSet("version", std, "", versionHelp)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	say(std.out, "%s\n", versionLine())
	return nil
}

// commit is the git commit the binary was built from, set by `make build`
// (-ldflags -X main.commit=...) for builds without Go's VCS stamping
// (-buildvcs=false, a tree copied without .git).
var commit string

// versionLine describes the build from the Go build information: e.g.
// "sandboxd (devel) commit 8e03187a1b2c 2026-11-25T21:00:00Z modified, go1.26.8 linux/amd64".
func versionLine() string {
	parts := []string{"sandboxd"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		if v == "" {
			v = "(devel)"
		}
		parts = append(parts, v)
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if rev := settings["vcs.revision"]; rev != "" {
			parts = append(parts, "commit "+rev[:min(12, len(rev))])
			if t := settings["vcs.time"]; t != "" {
				parts = append(parts, t)
			}
			if settings["vcs.modified"] == "true" {
				parts = append(parts, "modified")
			}
		} else if commit != "" {
			parts = append(parts, "commit "+commit)
		} else {
			parts = append(parts, "commit unknown")
		}
	}
	return strings.Join(parts, " ") + ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
