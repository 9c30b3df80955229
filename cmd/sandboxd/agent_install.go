package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func init() {
	register(&command{
		name:    "agent-install",
		summary: "copy this binary to a path (the init container of a Kubernetes Pod)",
		run:     runAgentInstall,
	})
}

const agentInstallHelp = `
Copies this binary to DEST (mode 0555, through a temporary file in DEST's
folder and a rename), so that an init container of the agent image, which
holds nothing but the binary, puts the agent into a Pod's shared volume
(sandboxd serve --backend kubernetes --kube-agent-volume init).`

func runAgentInstall(_ context.Context, std stdio, args []string) error {
	fs := newFlagSet("agent-install", std, "DEST", agentInstallHelp)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || !filepath.IsAbs(fs.Arg(0)) {
		return usageErrorf("want one absolute DEST path")
	}
	dest := fs.Arg(0)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locating this binary: %w", err)
	}
	src, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".agent-install-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after the rename: nothing left to remove
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copying %s: %w", exe, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
