// Package skills loads skills: folders with a SKILL.md (YAML front matter and
// a Markdown body) and, optionally, scripts, references, assets and
// dependency installers. Two formats are read: the open Agent Skills format
// (agentskills.io: name, description, license, compatibility, metadata,
// allowed-tools) and OpenSage's executable skills (should_run_in_sandbox,
// returns_json, and the sections ## Parameters, ## Timeout, ## Priority,
// with installers deps/<kind>/install.sh or deps/install.sh).
//
// The loader is lenient (a skill that cannot be used is skipped with its
// reason, never a crash); the validator is strict (every problem is
// reported). This file is the model the loader fills and the executor
// (tools/skill, in the sandbox) and the daemon read.
package skills

import "time"

// RootBuiltin is Skill.Root for the skills shipped inside the binary.
const RootBuiltin = "builtin"

// DefaultTimeout bounds one call of an executable skill whose SKILL.md names
// no ## Timeout.
const DefaultTimeout = 60 * time.Second

// DefaultInstallTimeout bounds one run of a skill's dependency installer.
const DefaultInstallTimeout = 30 * time.Minute

// Bounds of the loader: a skill root is operator input, but a SKILL.md may
// come from anywhere (a cloned repository), so nothing about it is allowed
// to grow without limit.
const (
	// MaxResources bounds Skill.Resources; a folder with more files lists
	// the first MaxResources (sorted) and says so in a warning.
	MaxResources = 200
	// MaxSkillFile bounds the size of a SKILL.md; a larger one is skipped.
	MaxSkillFile = 256 << 10
	// MaxDepth bounds how deep under a root a SKILL.md is looked for.
	MaxDepth = 6
	// MaxDirs bounds the directories one scan of a root reads; the scan
	// stops there and says so in a Skipped entry.
	MaxDirs = 2000
	// MaxTimeout bounds ## Timeout and the installer's timeout.
	MaxTimeout = 24 * time.Hour
	// MaxParams bounds the parameters of one executable skill.
	MaxParams = 64
)

// Skill is one loaded SKILL.md folder.
type Skill struct {
	// Path is the folder's slash-separated path relative to its root, e.g.
	// "fuzz/run-fuzzing-campaign". Selection prefixes match it, and the
	// sandbox sees the folder at /skills/<Path>.
	Path string `json:"path"`
	// Root is where the skill was loaded from: RootBuiltin, or the absolute
	// path of an operator root on the host.
	Root string `json:"root"`
	// Dir is the folder it was read from on the filesystem (host side), or
	// its path in the sandbox when loaded there.
	Dir string `json:"dir,omitempty"`

	// Agent Skills fields.
	Name          string            `json:"name"`
	Description   string            `json:"description"`
	License       string            `json:"license,omitempty"`
	Compatibility string            `json:"compatibility,omitempty"`
	AllowedTools  string            `json:"allowed_tools,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// Hidden: implicit invocation is off (Claude's
	// disable-model-invocation: true). The skill stays out of the catalog in
	// load_skill's description but can still be loaded by name.
	Hidden bool `json:"hidden,omitempty"`

	// Body is the Markdown after the front matter: what load_skill returns.
	Body string `json:"body"`
	// Resources are the folder's files other than SKILL.md (scripts/,
	// references/, assets/, deps/ ...), slash paths relative to the folder,
	// sorted, at most MaxResources of them.
	Resources []string `json:"resources,omitempty"`

	// OpenSage fields, read at the top level of the front matter or under
	// metadata (as "should_run_in_sandbox" or "sandboxd.<key>").
	RunIn       string `json:"run_in,omitempty"` // should_run_in_sandbox
	ReturnsJSON bool   `json:"returns_json,omitempty"`
	// Timeout of one call (## Timeout); 0 means DefaultTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// InstallTimeout of the installer; 0 means DefaultInstallTimeout.
	InstallTimeout time.Duration `json:"install_timeout,omitempty"`
	// Priority orders the installers (## Priority), lower first; ties by Path.
	Priority int `json:"priority,omitempty"`
	// Installer is the dependency installer, a slash path relative to the
	// folder: deps/<RunIn>/install.sh when present, else deps/install.sh;
	// empty when there is none.
	Installer string `json:"installer,omitempty"`

	// Exec is set for an executable skill (a script plus ## Parameters):
	// it is then a tool of its own.
	Exec *Exec `json:"exec,omitempty"`

	// Warnings are what the lenient loader forgave (a name that differs
	// from the folder, an unknown field, ...).
	Warnings []string `json:"warnings,omitempty"`
}

// Exec describes how an executable skill runs.
type Exec struct {
	// Entry is the script, a slash path relative to the skill's folder
	// (e.g. "scripts/run.sh"). It runs by its extension: .sh with bash,
	// .py with python3, anything else directly.
	Entry string `json:"entry"`
	// Params are the script's parameters in the order of ## Parameters.
	Params []Param `json:"params,omitempty"`
}

// ParamKind says how a parameter is passed on the command line.
type ParamKind string

// Parameter kinds of ## Parameters headings.
const (
	// Positional: "positional position N" (or "N+" for the rest).
	Positional ParamKind = "positional"
	// Named: "named parameter": --name VALUE.
	Named ParamKind = "named"
	// Flag: "flag": --name when true, nothing when false.
	Flag ParamKind = "flag"
)

// Param is one parameter of an executable skill.
type Param struct {
	// Name as the tool's argument name (no leading dashes).
	Name string `json:"name"`
	// Option is the command-line spelling for Named and Flag ("--name").
	Option   string    `json:"option,omitempty"`
	Kind     ParamKind `json:"kind"`
	Position int       `json:"position,omitempty"`
	// Variadic: a positional "N+" or a list type; the value is an array and
	// each element becomes one argument.
	Variadic bool `json:"variadic,omitempty"`
	Required bool `json:"required,omitempty"`
	// Type is the JSON Schema type: string, integer, number, boolean or
	// array (of strings).
	Type        string `json:"type"`
	Description string `json:"description,omitempty"`
}

// Skipped is a SKILL.md the lenient loader could not use, and why.
type Skipped struct {
	Path   string `json:"path"`
	Root   string `json:"root"`
	Reason string `json:"reason"`
}
