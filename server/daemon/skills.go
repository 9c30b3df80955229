package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/config"
	"github.com/sandboxd/sandboxd/skills"
)

// LoadLibrary loads the roots (skills.NewLibrary) unless ctx ends first: a
// root on a stuck file system (a hung NFS mount, a file that blocks on
// open) must not make serve or skills list ignore SIGTERM. The load then
// goes on in the background until its read returns; the command exits.
func LoadLibrary(ctx context.Context, roots ...skills.Root) (*skills.Library, error) {
	done := make(chan *skills.Library, 1)
	go func() { done <- skills.NewLibrary(roots...) }()
	select {
	case lib := <-done:
		return lib, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("loading the skill roots: %w", context.Cause(ctx))
	}
}

// loadSkills loads the skills sessions can select: the operator's roots,
// then the built-in skills, written (content-addressed, read-only) under
// the state directory so that sandboxes can mount them. What a root holds
// that cannot be used is logged with the reason; it never stops the server.
// SIGINT and SIGTERM (ctx) end a load that is stuck.
func loadSkills(ctx context.Context, stateDir string, operatorRoots []string, log *slog.Logger) (Skills, error) {
	builtinDir, err := skills.ExtractBuiltin(filepath.Join(stateDir, "skills"))
	if err != nil {
		return Skills{}, fmt.Errorf("writing the built-in skills under %s: %w", stateDir, err)
	}
	roots := make([]skills.Root, 0, len(operatorRoots)+1)
	for _, d := range operatorRoots {
		roots = append(roots, skills.Root{Dir: d})
	}
	lib, err := LoadLibrary(ctx, append(roots, skills.BuiltinRoot(builtinDir))...)
	if err != nil {
		return Skills{}, err
	}
	for _, sk := range lib.Skipped() {
		log.Warn("skill not loaded", "path", sk.Path, "root", sk.Root, "reason", sk.Reason)
	}
	for _, sk := range lib.Skills() {
		for _, w := range sk.Warnings {
			log.Debug("skill loaded with a warning", "path", sk.Path, "root", sk.Root, "warning", w)
		}
	}
	log.Info("skills", "loaded", len(lib.Skills()), "skipped", len(lib.Skipped()), "roots", strings.Join(append(slices.Clone(operatorRoots), "built-in"), ", "))
	return Skills{Lib: lib, Log: log}, nil
}

// checkProfileSkills refuses a profile whose skills select nothing loaded,
// at the line of its skills option.
func checkProfileSkills(file *config.File, src Skills) error {
	var errs []error
	for _, name := range file.Names() {
		if sel := file.Profiles[name].Options.Skills; len(sel) > 0 {
			if _, err := src.Mounts(sel); err != nil {
				errs = append(errs, file.Errorf(name, "skills", "%v", err))
			}
		}
	}
	return errors.Join(errs...)
}

// SkillRoots are the operator's skill roots: the config's skills_dirs,
// then --skills-dir, each an absolute path of a directory, once.
func SkillRoots(fromConfig, fromFlags []string) ([]string, error) {
	roots := slices.Clone(fromConfig)
	for _, d := range fromFlags {
		if err := config.CheckSkillsDir(d); err != nil {
			return nil, usageErrorf("--skills-dir %v", err)
		}
		if !slices.Contains(roots, d) {
			roots = append(roots, d)
		}
	}
	return roots, nil
}

// allowNetworks are the networks sessions may join: the config's
// allow_networks, then --allow-network's.
func allowNetworks(fromConfig, fromFlags []string) ([]string, error) {
	nets := slices.Clone(fromConfig)
	for _, n := range fromFlags {
		if err := sandbox.CheckNetworkName(n); err != nil {
			return nil, usageErrorf("--allow-network %v", err)
		}
		if !slices.Contains(nets, n) {
			nets = append(nets, n)
		}
	}
	return nets, nil
}
