// Package applypatch is OpenAI's apply_patch tool contract as a sandbox
// tool: the V4A diff format (ApplyDiff, CreateText), the freeform
// "*** Begin Patch" envelope (ParsePatch), and the tool, which applies a
// patch of one or several files whole or not at all through the file
// editor's batch (tools/fileeditor), sharing its encodings, line endings,
// modes, atomic writes and undo history. Decision 0046.
package applypatch
