package fileeditor

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/tools"
)

// Name is the tool's name, as in OpenHands.
const Name = "file_editor"

// Commands, in the order the schema lists them.
var commands = []string{"view", "create", "str_replace", "insert", "undo_edit"}

// Action is the tool's input. Field names and meanings follow OpenHands'
// FileEditorAction so agents prompted for it work unchanged.
type Action struct {
	Command    string  `json:"command" jsonschema:"The commands to run. Allowed options are: view, create, str_replace, insert, undo_edit."`
	Path       string  `json:"path" jsonschema:"Absolute path to file or directory, e.g. /workspace/file.py or /workspace."`
	FileText   *string `json:"file_text,omitempty" jsonschema:"Required parameter of create command, with the content of the file to be created."`
	OldStr     *string `json:"old_str,omitempty" jsonschema:"Required parameter of str_replace command containing the string in path to replace. It must match exactly one place in the file, whitespace and indentation included."`
	NewStr     *string `json:"new_str,omitempty" jsonschema:"Optional parameter of str_replace command containing the new string (if not given or empty, old_str is deleted). Required parameter of insert command containing the string to insert."`
	InsertLine *int    `json:"insert_line,omitempty" jsonschema:"Required parameter of insert command. The new_str will be inserted AFTER the line insert_line of path (0 inserts at the top of the file)."`
	ViewRange  []int   `json:"view_range,omitempty" jsonschema:"Optional parameter of view command when path points to a file. If none is given, the full file is shown. If provided, the file will be shown in the indicated line number range, e.g. [11, 12] will show lines 11 and 12. Indexing at 1 to start. Setting [start_line, -1] shows all lines from start_line to the end of the file."`
}

// Output is the structured result of a call (Observation.Structured). The
// contents are included only while both fit in MaxStructuredContent bytes;
// Change describes an edit in any case.
type Output struct {
	Command    string  `json:"command" jsonschema:"The command that was run."`
	Path       string  `json:"path" jsonschema:"The path the command was run on (cleaned)."`
	PrevExist  bool    `json:"prev_exist" jsonschema:"Whether the file existed before the command (false after create)."`
	Kind       string  `json:"kind,omitempty" jsonschema:"What path is: file, directory or image."`
	OldContent *string `json:"old_content,omitempty" jsonschema:"The text of the file before an edit, if small enough."`
	NewContent *string `json:"new_content,omitempty" jsonschema:"The text of the file after an edit, if small enough."`
	Omitted    bool    `json:"content_omitted,omitempty" jsonschema:"True when old_content and new_content were left out because of their size."`
	Change     *Change `json:"change,omitempty" jsonschema:"The lines an edit replaced."`
	NumLines   int     `json:"num_lines,omitempty" jsonschema:"Number of lines in the file after the command."`
	Encoding   string  `json:"encoding,omitempty" jsonschema:"Detected text encoding of the file."`
	LineEnding string  `json:"line_ending,omitempty" jsonschema:"Dominant line ending of the file: LF or CRLF."`
	Truncated  bool    `json:"truncated,omitempty" jsonschema:"True when the text shown was cut to fit the output limit."`
}

// Change says where an edit happened: at line Line, text spanning Removed
// lines (old_str; 0 for insert) was replaced by text spanning Added lines.
type Change struct {
	Line    int `json:"line" jsonschema:"First line of the edit (1-based)."`
	Removed int `json:"removed" jsonschema:"Lines spanned by the replaced text (0 for insert and create)."`
	Added   int `json:"added" jsonschema:"Lines spanned by the new text."`
}

// MaxStructuredContent bounds old_content and new_content in Output.
const MaxStructuredContent = 64 << 10

const descriptionText = `Custom editing tool for viewing, creating and editing files in plain-text format
* State is persistent across command calls and discussions with the user
* If ` + "`path`" + ` is a text file, ` + "`view`" + ` displays the result of applying ` + "`cat -n`" + `. If ` + "`path`" + ` is a directory, ` + "`view`" + ` lists non-hidden files and directories up to 2 levels deep
* If ` + "`path`" + ` is an image file (.png, .jpg, .jpeg, .gif, .webp), ` + "`view`" + ` displays the image content
* The ` + "`create`" + ` command cannot be used if the specified ` + "`path`" + ` already exists as a file, and it does not create missing parent directories
* If a ` + "`command`" + ` generates a long output, it will be truncated and marked with ` + "`<response clipped>`" + `; the line numbers shown are always the real ones
* The ` + "`undo_edit`" + ` command will revert the last edit made to the file at ` + "`path`" + ` (up to 10 edits per file); undoing a ` + "`create`" + ` removes the file
* Files keep their encoding (UTF-8, UTF-16, Latin-1/Windows-1252, Windows-1251), line endings (LF or CRLF) and permissions; write ` + "`old_str`" + ` and ` + "`new_str`" + ` with plain \n line endings
* Binary files and files larger than %s cannot be viewed or edited
* This tool can be used for creating and editing files in plain-text format.


Before using this tool:
1. Use the view tool to understand the file's contents and context
2. Verify the directory path is correct (only applicable when creating new files):
   - Use the view tool to verify the parent directory exists and is the correct location

When making edits:
   - Ensure the edit results in idiomatic, correct code
   - Do not leave the code in a broken state
   - Always use absolute file paths (starting with /)

CRITICAL REQUIREMENTS FOR USING THIS TOOL:

1. EXACT MATCHING: The ` + "`old_str`" + ` parameter must match EXACTLY one or more consecutive lines from the file, including all whitespace and indentation. The tool will fail if ` + "`old_str`" + ` matches multiple locations or doesn't match exactly with the file content. Do not include the line numbers that ` + "`view`" + ` prints.

2. UNIQUENESS: The ` + "`old_str`" + ` must uniquely identify a single instance in the file:
   - Include sufficient context before and after the change point (3-5 lines recommended)
   - If not unique, the replacement will not be performed

3. REPLACEMENT: The ` + "`new_str`" + ` parameter should contain the edited lines that replace the ` + "`old_str`" + `. Both strings must be different.

Remember: when making multiple file edits in a row to the same file, you should prefer to send all edits in a single message with multiple calls to this tool, rather than multiple messages with a single call each.`

// Definition is the tool as a model sees it. workspace (may be empty) is
// named in the description as the place to start exploring; maxFileBytes
// (0 = DefaultMaxFileBytes) is the size limit it states.
func Definition(workspace string, maxFileBytes int64) tools.Definition {
	if maxFileBytes <= 0 {
		maxFileBytes = DefaultMaxFileBytes
	}
	desc := fmt.Sprintf(descriptionText, formatMB(maxFileBytes))
	if workspace != "" {
		desc += "\n\nYour current working directory is: " + workspace +
			"\nWhen exploring project structure, start with this directory instead of the root filesystem."
	}
	return tools.Definition{
		Name:        Name,
		Description: desc,
		InputSchema: tools.SchemaFor[Action](func(s *jsonschema.Schema) {
			enum := make([]any, len(commands))
			for i, c := range commands {
				enum[i] = c
			}
			s.Properties["command"].Enum = enum
			// No "minimum" on insert_line: the executor's range error, which
			// names the valid range, is more useful than the validator's.
		}),
		OutputSchema: tools.SchemaFor[Output](),
		Annotations: tools.Annotations{
			Title:           Name,
			ReadOnlyHint:    false,
			DestructiveHint: true,
			IdempotentHint:  false,
			OpenWorldHint:   false,
		},
	}
}

// Params are the optional factory parameters (the Spec's params).
type Params struct {
	// Root, if set, confines the editor to paths under this directory.
	Root string `json:"root,omitempty"`
	// MaxFileBytes overrides DefaultMaxFileBytes.
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
}

// Factory makes the file_editor tool for a session. params may be empty or
// a Params object; unknown fields are an error.
func Factory(env tools.Env, params json.RawMessage) ([]*tools.Tool, error) {
	var p Params
	if err := tools.DecodeParams(params, &p); err != nil {
		return nil, fmt.Errorf("fileeditor: params: %w", err)
	}
	exec, err := NewExecutor(Options{Workspace: env.Workspace, Root: p.Root, MaxFileBytes: p.MaxFileBytes})
	if err != nil {
		return nil, err
	}
	t, err := tools.New(Definition(env.Workspace, exec.opts.MaxFileBytes), tools.Executor[Action](exec))
	if err != nil {
		_ = exec.Close()
		return nil, err
	}
	return []*tools.Tool{t}, nil
}

// formatMB renders a byte size the way the messages state limits: "10MB".
func formatMB(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%dMB", n>>20)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<20)), ".0") + "MB"
}
