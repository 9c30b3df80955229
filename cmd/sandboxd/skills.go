package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/server/config"
	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/skills"
)

func init() {
	register(&command{
		name:    "skills",
		summary: "check skill folders (validate) and show what loads from the skill roots (list)",
		run:     runSkills,
	})
}

const validateHelp = `
Checks one skill's folder (it holds a SKILL.md) or a root of skills (every
SKILL.md below it) strictly, and prints every problem as
FILE:LINE: FIELD: MESSAGE; exits 1 if there is any, else prints
"ok: N skills".

Strict is the Agent Skills specification (agentskills.io): name 1-64 of
a-z, 0-9 and single hyphens, equal to the folder's name; description
1-1024 characters; compatibility at most 500; metadata a map of strings;
no other top-level field, except those sandboxd also reads: OpenSage's
should_run_in_sandbox and returns_json, and Claude's
disable-model-invocation. Also checked: the ## Parameters headings and
types, ## Timeout and ## Priority, the entry script, the installers the
text names. A message says what the lenient loader does with the problem
("ignored", "not executable", "read as ...").`

const listHelp = `
Loads the skill roots as the daemon does, leniently: the skills_dirs of
--config, then the --skills-dir roots in the order given, then the built-in
skills; a skill path in an earlier root shadows the same path in a later
one. Prints each skill (path, name, root,
whether it is a tool, its timeout and installer), the warnings of the skills
that loaded, and what was skipped and why.`

const skillsHelp = `usage: sandboxd skills validate PATH
       sandboxd skills list [--config FILE] [--skills-dir DIR]... [--json]

validate:` + validateHelp + `

list:` + listHelp

func runSkills(ctx context.Context, std stdio, args []string) error {
	if len(args) == 0 {
		return usageErrorf("give a subcommand: validate or list")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		say(std.out, "%s\n", strings.TrimSpace(skillsHelp))
		return nil
	case "validate":
		return runSkillsValidate(ctx, std, args[1:])
	case "list":
		return runSkillsList(ctx, std, args[1:])
	default:
		return usageErrorf("unknown subcommand %q: want validate or list", args[0])
	}
}

func runSkillsValidate(_ context.Context, std stdio, args []string) error {
	fs := newFlagSet("skills validate", std, "PATH", validateHelp)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("give one PATH: a skill's folder or a root of skills")
	}
	n, problems := skills.ValidateCount(fs.Arg(0))
	if len(problems) == 0 {
		say(std.out, "ok: %d %s\n", n, plural(n, "skill", "skills"))
		return nil
	}
	var b strings.Builder
	for _, p := range problems {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d %s in %d %s\n", len(problems), plural(len(problems), "problem", "problems"), n, plural(n, "skill", "skills"))
	say(std.out, "%s", b.String())
	return exitCodeError(exitError)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// skillLibrary loads the operator roots dirs (a configuration file's roots
// are more of them, after the flags') and the built-in skills, or returns
// ctx's error once SIGINT or SIGTERM cancels it (see loadLibrary).
func skillLibrary(ctx context.Context, dirs []string) (*skills.Library, error) {
	return daemon.LoadLibrary(ctx, skills.OperatorRoots(dirs...)...)
}

// skillListing is one skill as `skills list --json` prints it.
type skillListing struct {
	Path           string         `json:"path"`
	Name           string         `json:"name"`
	Description    string         `json:"description"`
	Root           string         `json:"root"`
	Dir            string         `json:"dir,omitempty"`
	Hidden         bool           `json:"hidden,omitempty"`
	Executable     bool           `json:"executable"`
	Entry          string         `json:"entry,omitempty"`
	Params         []skills.Param `json:"params,omitempty"`
	ReturnsJSON    bool           `json:"returns_json,omitempty"`
	TimeoutSeconds float64        `json:"timeout_seconds,omitempty"`
	Installer      string         `json:"installer,omitempty"`
	InstallTimeout float64        `json:"install_timeout_seconds,omitempty"`
	Priority       int            `json:"priority,omitempty"`
	RunIn          string         `json:"run_in,omitempty"`
	Resources      int            `json:"resources"`
	Warnings       []string       `json:"warnings,omitempty"`
}

func listing(s *skills.Skill) skillListing {
	l := skillListing{
		Path: s.Path, Name: s.Name, Description: s.Description, Root: s.Root, Dir: s.Dir, Hidden: s.Hidden,
		ReturnsJSON: s.ReturnsJSON, Installer: s.Installer, Priority: s.Priority, RunIn: s.RunIn,
		Resources: len(s.Resources), Warnings: s.Warnings,
	}
	if s.Exec != nil {
		l.Executable, l.Entry, l.Params = true, s.Exec.Entry, s.Exec.Params
		l.TimeoutSeconds = orDefault(s.Timeout, skills.DefaultTimeout).Seconds()
	}
	if s.Installer != "" {
		l.InstallTimeout = orDefault(s.InstallTimeout, skills.DefaultInstallTimeout).Seconds()
	}
	return l
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func runSkillsList(ctx context.Context, std stdio, args []string) error {
	fs := newFlagSet("skills list", std, "[--config FILE] [--skills-dir DIR]... [--json]", listHelp)
	var dirs daemon.Paths
	fs.Var(&dirs, "skills-dir", "a root of skills, repeatable; earlier roots shadow later ones, all shadow the built-in skills")
	configPath := fs.String("config", "", "serve's config file: its skills_dirs come first, as serve --config takes them")
	asJSON := fs.Bool("json", false, "print JSON: {skills: [...], skipped: [...]}")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var fromConfig []string
	if *configPath != "" {
		file, err := config.Load(*configPath)
		if err != nil {
			return err
		}
		fromConfig = file.SkillsDirs
	}
	for i, d := range dirs { // a relative root is the user's own, here
		if abs, err := filepath.Abs(d); err == nil {
			dirs[i] = abs
		}
	}
	roots, err := daemon.SkillRoots(fromConfig, dirs)
	if err != nil {
		return fromDaemon(err)
	}
	lib, err := skillLibrary(ctx, roots)
	if err != nil {
		return err
	}
	all, skipped := lib.Skills(), lib.Skipped()
	if *asJSON {
		out := struct {
			Skills  []skillListing   `json:"skills"`
			Skipped []skills.Skipped `json:"skipped"`
		}{Skills: []skillListing{}, Skipped: skipped}
		for _, s := range all {
			out.Skills = append(out.Skills, listing(s))
		}
		if out.Skipped == nil {
			out.Skipped = []skills.Skipped{}
		}
		enc := json.NewEncoder(std.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("writing the list: %w", err)
		}
		return nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tNAME\tROOT\tTOOL\tTIMEOUT\tINSTALLER")
	for _, s := range all {
		name := s.Name
		if s.Hidden {
			name += " (hidden)"
		}
		tool, timeout, installer := "no", "-", "-"
		if s.Exec != nil {
			tool, timeout = "yes", orDefault(s.Timeout, skills.DefaultTimeout).String()
		}
		if s.Installer != "" {
			installer = s.Installer
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Path, name, s.Root, tool, timeout, installer)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "%d %s loaded", len(all), plural(len(all), "skill", "skills"))
	if len(skipped) > 0 {
		fmt.Fprintf(&b, ", %d skipped", len(skipped))
	}
	b.WriteString("\n")
	var warned []*skills.Skill
	for _, s := range all {
		if len(s.Warnings) > 0 {
			warned = append(warned, s)
		}
	}
	if len(warned) > 0 {
		b.WriteString("\nwarnings:\n")
		for _, s := range warned {
			for _, w := range s.Warnings {
				fmt.Fprintf(&b, "  %s (%s): %s\n", s.Path, s.Root, w)
			}
		}
	}
	if len(skipped) > 0 {
		b.WriteString("\nskipped:\n")
		for _, s := range skipped {
			p := s.Path
			if p == "" {
				p = "(root)"
			}
			fmt.Fprintf(&b, "  %s (%s): %s\n", p, s.Root, s.Reason)
		}
	}
	say(std.out, "%s", b.String())
	return nil
}
