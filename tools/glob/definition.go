// Package glob is the glob tool: find files by name pattern ("**/*.go",
// "src/**/*.{ts,tsx}"), newest first, at most 100, compatible with
// OpenHands' glob tool (parameters, texts) and independent of the process's
// working directory.
//
// Deliberate differences from OpenHands (ripgrep --files -g, or Python's
// glob module where rg is missing, as in its agent-server image):
//   - Patterns with '/' ("src/*.ts", "src/**/*.py") are relative to the
//     search directory and work whatever the process cwd (with rg they find
//     nothing unless cwd is the search directory); no chdir, so calls can run
//     in parallel.
//   - An absolute pattern sets the search directory as in OpenHands, but its
//     rest is anchored there ("/repo/*.py" is the .py files of /repo, not of
//     every directory below), and it wins over the path parameter.
//   - Braces work on every image (Python's glob has none).
//   - Hidden entries and .gitignored paths are skipped unless the pattern
//     names them (rg's "*" lists .git/*; Python's glob ignores .gitignore).
//   - truncated is exact (rg's backend flags exactly 100 files as truncated).
//   - Directory symlinks are not followed, so loops end (Python's glob
//     follows them to the path length limit); paths are not symlink-resolved.
//   - A search past the timeout (30 s) returns what it found, marked
//     incomplete.
package glob

import (
	"github.com/sandboxd/sandboxd/tools"
)

// Name is the tool name.
const Name = "glob"

// Limit is how many files a call returns at most (OpenHands' 100).
const Limit = 100

// Action is the tool's input (OpenHands' GlobAction).
type Action struct {
	Pattern string `json:"pattern" jsonschema:"The glob pattern to match files (e.g., \"**/*.js\", \"src/**/*.ts\")"`
	Path    string `json:"path,omitempty" jsonschema:"The directory (absolute path) to search in. Defaults to the current working directory."`
}

// Output is the structured result; Files, Pattern, SearchPath and Truncated
// are OpenHands' GlobObservation fields.
type Output struct {
	Files      []string `json:"files" jsonschema:"Matching file paths (absolute) sorted by modification time, newest first"`
	Pattern    string   `json:"pattern" jsonschema:"The glob pattern that was used"`
	SearchPath string   `json:"search_path" jsonschema:"The directory that was searched"`
	Count      int      `json:"count" jsonschema:"Number of matching files, before the limit of 100"`
	Truncated  bool     `json:"truncated" jsonschema:"Whether more than 100 files matched"`
	Incomplete bool     `json:"incomplete,omitempty" jsonschema:"The search hit its time limit; results are partial"`
}

const description = `Fast file pattern matching tool.
* Supports glob patterns like "**/*.js" or "src/**/*.ts", with braces ("*.{ts,tsx}") and character classes ("file[0-9].txt")
* A pattern without "/" matches file names at any depth ("*.py" finds every .py file); a pattern with "/" is relative to the search directory; an absolute pattern ("/repo/src/**/*.go") sets the directory itself
* Use this tool when you need to find files by name patterns
* Returns matching file paths sorted by modification time, newest first
* Hidden files and directories and files ignored by .gitignore are skipped unless the pattern names them (".github/**", "**/.env")
* Only the first 100 results are returned. Consider narrowing your search with stricter glob patterns or provide path parameter if you need more results.

Examples:
- Find all JavaScript files: "**/*.js"
- Find TypeScript files in src: "src/**/*.ts"
- Find Python test files: "**/test_*.py"
- Find configuration files: "**/*.{json,yaml,yml,toml}"`

// Definition returns the tool definition; workspace is the default search
// directory, which the description tells the model.
func Definition(workspace string) tools.Definition {
	return tools.Definition{
		Name: Name,
		Description: description + "\n\nYour current working directory is: " + workspace +
			"\nWhen searching for files, patterns are relative to this directory.",
		InputSchema:  tools.SchemaFor[Action](),
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
