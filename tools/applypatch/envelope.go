package applypatch

import (
	"fmt"
	"strings"
)

// Operation types of the hosted apply_patch tool.
const (
	OpCreate = "create_file"
	OpUpdate = "update_file"
	OpDelete = "delete_file"
)

// Operation is one file operation of the hosted apply_patch tool
// (apply_patch_call.operation in the Responses API): create_file's Diff
// holds only "+" lines, update_file's the V4A hunks without the envelope,
// delete_file none; MoveTo renames the file after an update.
type Operation struct {
	Type   string  `json:"type" jsonschema:"create_file, update_file or delete_file."`
	Path   string  `json:"path" jsonschema:"The file, relative to the working directory."`
	Diff   *string `json:"diff,omitempty" jsonschema:"create_file: the new file's lines, each starting with +. update_file: V4A hunks (@@ [anchor], then lines starting with space, - or +), without the *** Begin Patch envelope. Not used by delete_file."`
	MoveTo *string `json:"move_to,omitempty" jsonschema:"update_file only: the new path of the file after the update (relative)."`
}

// Check reports what is wrong with an operation's fields, before any file
// is looked at.
func (op Operation) Check() error {
	switch op.Type {
	case OpCreate, OpUpdate:
		if op.Diff == nil {
			return fmt.Errorf("apply_patch operation %s on %q is missing its diff", op.Type, op.Path)
		}
	case OpDelete:
		if op.Diff != nil && *op.Diff != "" {
			return fmt.Errorf("apply_patch operation delete_file on %q takes no diff", op.Path)
		}
	default:
		return fmt.Errorf("invalid apply_patch operation type %q: use create_file, update_file or delete_file", op.Type)
	}
	if strings.TrimSpace(op.Path) == "" {
		return fmt.Errorf("apply_patch operation %s is missing a path", op.Type)
	}
	if op.MoveTo != nil && op.Type != OpUpdate {
		return fmt.Errorf("apply_patch operation %s on %q cannot take move_to (only update_file can)", op.Type, op.Path)
	}
	if op.MoveTo != nil && strings.TrimSpace(*op.MoveTo) == "" {
		return fmt.Errorf("apply_patch operation update_file on %q has an empty move_to", op.Path)
	}
	return nil
}

// ParsePatch reads the freeform envelope: "*** Begin Patch", then file
// sections ("*** Add File: P" and its "+" lines, "*** Delete File: P",
// "*** Update File: P" with an optional "*** Move to: Q" and its hunks),
// then "*** End Patch". Blank lines around the envelope are ignored.
func ParsePatch(patch string) ([]Operation, error) {
	lines := diffLines(strings.TrimSpace(patch))
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != markBegin {
		return nil, fmt.Errorf("the patch must start with the line %q", markBegin)
	}
	if len(lines) < 2 || strings.TrimSpace(lines[len(lines)-1]) != markEnd {
		return nil, fmt.Errorf("the patch must end with the line %q", markEnd)
	}
	body := lines[1 : len(lines)-1]
	var ops []Operation
	for i := 0; i < len(body); {
		l := body[i]
		var op Operation
		var err error
		switch {
		case strings.HasPrefix(l, markAdd):
			op.Type = OpCreate
		case strings.HasPrefix(l, markDelete):
			op.Type = OpDelete
		case strings.HasPrefix(l, markUpdate):
			op.Type = OpUpdate
		default:
			return nil, fmt.Errorf("line %d of the patch: %q is not a file header (*** Add File:, *** Delete File: or *** Update File:)", i+2, l)
		}
		if op.Path, err = headerPath(l); err != nil {
			return nil, fmt.Errorf("line %d of the patch: %w", i+2, err)
		}
		i++
		if op.Type == OpUpdate && i < len(body) && strings.HasPrefix(body[i], markMove) {
			to, err := headerPath(body[i])
			if err != nil {
				return nil, fmt.Errorf("line %d of the patch: %w", i+2, err)
			}
			op.MoveTo = &to
			i++
		}
		start := i
		for i < len(body) && !isFileHeader(body[i]) {
			i++
		}
		section := body[start:i]
		switch op.Type {
		case OpDelete:
			if len(section) > 0 {
				return nil, fmt.Errorf("line %d of the patch: *** Delete File: %s takes no lines after it", start+2, op.Path)
			}
		case OpCreate:
			if len(section) == 0 {
				return nil, fmt.Errorf("*** Add File: %s has no lines: write the file's lines, each starting with +", op.Path)
			}
		case OpUpdate:
			if len(section) == 0 && op.MoveTo == nil {
				return nil, fmt.Errorf("*** Update File: %s has no hunks", op.Path)
			}
		}
		if op.Type != OpDelete {
			d := strings.Join(section, "\n")
			if len(section) > 0 {
				d += "\n"
			}
			op.Diff = &d
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("the patch has no file sections between %q and %q", markBegin, markEnd)
	}
	return ops, nil
}

func isFileHeader(l string) bool {
	return strings.HasPrefix(l, markAdd) || strings.HasPrefix(l, markDelete) || strings.HasPrefix(l, markUpdate)
}

func headerPath(l string) (string, error) {
	i := strings.Index(l, ": ")
	p := strings.TrimSpace(l[i+2:])
	if p == "" {
		return "", fmt.Errorf("%q names no file", l)
	}
	return p, nil
}
