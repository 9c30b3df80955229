// Package grep is the grep tool: a regular-expression search of file
// contents in pure Go, compatible with OpenHands' grep tool (pattern, path,
// include; matching files newest first, at most 100, the same texts) with
// optional content and count modes.
//
// How it is fast: a parallel walk (tools/internal/walk) hands files to one
// searcher per worker, which reads them with raw system calls into a reused
// buffer, skips binaries (a NUL in the first 8 KiB), looks for a literal the
// pattern requires (bytes.Index, or an ASCII case-folding search anchored
// on the needle's rarest byte) and runs a lazily built DFA only on the lines
// those hit; patterns without a literal are scanned by the DFA, whose states
// are cached per worker. Only matching files are stat'ed and sorted.
//
// Deliberate differences from OpenHands (whose behaviour depends on which
// backend it finds: ripgrep, grep -R, or Python):
//   - One regex engine, RE2 syntax, everywhere. Lookaround and
//     backreferences are an "Invalid regex pattern" error naming them, not
//     "No files found" (ripgrep) or a silent success (Python).
//   - include "*.{ts,tsx}" works (OpenHands' fnmatch post-filter drops every
//     result); an include with '/' matches the path relative to the search
//     directory. include "*.py" does not reach hidden files (OpenHands' does);
//     one that names them (".env*") does.
//   - .gitignore is honoured on every image, in a git repository or not
//     (nested files, negation, parents up to the repository root,
//     .git/info/exclude); OpenHands only with rg, inside a repository.
//   - truncated is exact: true only when more than the limit matched
//     (OpenHands' rg and grep backends flag exactly 100 as truncated).
//   - Directory symlinks are not followed (grep -R follows them out of the
//     search path); paths are printed as given, not symlink-resolved.
//   - A relative path is taken from the workspace, not the process cwd; path
//     may also be a single file. A bad path error adds why (missing, ...).
//   - Matching is per line; a pattern that needs a newline is an error.
//   - Matching ignores case by default, as OpenHands always does;
//     case_sensitive turns that off.
//   - A search that runs past the timeout (30 s) returns what it found,
//     marked incomplete, instead of an error.
package grep

import (
	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/tools"
)

// Name is the tool name.
const Name = "grep"

// Output modes.
const (
	ModeFiles   = "files"
	ModeContent = "content"
	ModeCount   = "count"
)

// Limits of the optional parameters.
const (
	DefaultLimit = 100
	MaxLimit     = 2000
	// MaxContentBytes bounds the text of content mode (as the terminal
	// bounds its output): 2000 matches with 20 lines of context each would
	// otherwise be tens of megabytes for the model to read.
	MaxContentBytes = 30000
	MaxContext      = 20
)

// Action is the tool's input. Pattern, Path and Include are OpenHands'
// parameters; the others are optional extensions.
type Action struct {
	Pattern       string `json:"pattern" jsonschema:"The regex pattern to search for in file contents (RE2 syntax, e.g. \"log.*Error\", \"function\\s+\\w+\")"`
	Path          string `json:"path,omitempty" jsonschema:"The directory (absolute path) to search in, or a single file. Defaults to the current working directory."`
	Include       string `json:"include,omitempty" jsonschema:"Optional file pattern to filter which files to search (e.g., \"*.js\", \"*.{ts,tsx}\", \"src/**/*.go\")"`
	OutputMode    string `json:"output_mode,omitempty" jsonschema:"\"files\" (default): paths of matching files; \"content\": matching lines as path:line:text; \"count\": number of matching lines per file"`
	Context       int    `json:"context,omitempty" jsonschema:"Lines of context to show before and after each matching line (implies output_mode \"content\")"`
	CaseSensitive bool   `json:"case_sensitive,omitempty" jsonschema:"Match case exactly. Default false: the search ignores case"`
	Limit         int    `json:"limit,omitempty" jsonschema:"Maximum number of results: files, or matching lines in content mode. Default 100"`
}

// FileCount is one line of count-mode output.
type FileCount struct {
	Path  string `json:"path" jsonschema:"absolute path of the file"`
	Count int    `json:"count" jsonschema:"number of matching lines"`
}

// Output is the structured result. Matches, Pattern, SearchPath,
// IncludePattern and Truncated are OpenHands' GrepObservation fields.
type Output struct {
	Matches        []string    `json:"matches" jsonschema:"Paths of the files listed (matching files, newest first)"`
	Pattern        string      `json:"pattern" jsonschema:"The regex pattern that was used"`
	SearchPath     string      `json:"search_path" jsonschema:"The directory (or file) that was searched"`
	IncludePattern string      `json:"include_pattern,omitempty" jsonschema:"The file pattern filter that was used"`
	OutputMode     string      `json:"output_mode" jsonschema:"files, content or count"`
	Count          int         `json:"count" jsonschema:"Number of matching files found, before the limit"`
	Truncated      bool        `json:"truncated" jsonschema:"Whether more results exist than were returned"`
	Incomplete     bool        `json:"incomplete,omitempty" jsonschema:"The search hit its time limit; results are partial"`
	OutputCut      bool        `json:"output_cut,omitempty" jsonschema:"Content mode: the lines were cut at MaxContentBytes of text before the limit was reached"`
	Lines          []Line      `json:"lines,omitempty" jsonschema:"Content mode: matching lines and their context"`
	Counts         []FileCount `json:"counts,omitempty" jsonschema:"Count mode: matching lines per file"`
}

const description = `Fast content search tool.
* Searches file contents using regular expressions
* Supports full regex syntax (eg. "log.*Error", "function\s+\w+", "foo|bar", etc.); the syntax is RE2 (as in Go and ripgrep): lookahead, lookbehind and backreferences are not supported
* Matching ignores case unless case_sensitive is true, and is done one line at a time
* Filter files by pattern with the include parameter (eg. "*.js", "*.{ts,tsx}", "src/**/*.go")
* Returns matching file paths sorted by modification time, newest first.
* Set output_mode to "content" to get the matching lines with their line numbers (add context for lines around them), or "count" for the number of matching lines per file.
* Hidden files and directories, files ignored by .gitignore, and binary files are skipped (an include pattern that names them, like ".env*", searches them).
* Only the first 100 results are returned (see limit). Consider narrowing your search with stricter regex patterns or provide path parameter if you need more results.
* Use this tool when you need to find files containing specific patterns.`

// Definition returns the tool definition; workspace is the directory
// searched by default, which the description tells the model.
func Definition(workspace string) tools.Definition {
	return tools.Definition{
		Name: Name,
		Description: description + "\n\nYour current working directory is: " + workspace +
			"\nWhen searching for content, searches are performed in this directory.",
		InputSchema: tools.SchemaFor[Action](func(s *jsonschema.Schema) {
			s.Properties["output_mode"].Enum = []any{ModeFiles, ModeContent, ModeCount}
			s.Properties["output_mode"].Default = []byte(`"files"`)
			s.Properties["context"].Minimum = ptr(0)
			s.Properties["context"].Maximum = ptr(MaxContext)
			s.Properties["limit"].Minimum = ptr(1)
			s.Properties["limit"].Maximum = ptr(MaxLimit)
			s.Properties["limit"].Default = []byte("100")
			s.Properties["case_sensitive"].Default = []byte("false")
		}),
		OutputSchema: tools.SchemaFor[Output](),
		Annotations: tools.Annotations{
			Title:           Name,
			ReadOnlyHint:    true,
			DestructiveHint: false,
			IdempotentHint:  true,
			OpenWorldHint:   false,
		},
	}
}

func ptr(v float64) *float64 { return &v }
