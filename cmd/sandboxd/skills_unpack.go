package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/sandbox/kubernetes/skilltar"
)

func init() {
	register(&command{
		name:    "skills-unpack",
		summary: "unpack a session's skills into a folder (the init container of a Kubernetes Pod)",
		run:     runSkillsUnpack,
	})
}

const skillsUnpackHelp = `
Unpacks ARCHIVE, the gzip-compressed tar of a session's skill folders that
the Kubernetes runtime put into the session's ConfigMap, into DEST: folders
and regular files only, read-only once written, at most 10,000 entries and
64 MiB (decision 0048). The sandbox's container mounts DEST read-only at
/skills.`

func runSkillsUnpack(_ context.Context, std stdio, args []string) error {
	fs := newFlagSet("skills-unpack", std, "ARCHIVE DEST", skillsUnpackHelp)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 || !filepath.IsAbs(fs.Arg(0)) || !filepath.IsAbs(fs.Arg(1)) {
		return usageErrorf("want two absolute paths: ARCHIVE DEST")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := skilltar.Unpack(f, fs.Arg(1)); err != nil {
		return fmt.Errorf("unpacking %s into %s: %w", fs.Arg(0), fs.Arg(1), err)
	}
	return nil
}
