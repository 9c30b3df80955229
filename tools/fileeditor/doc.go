// Package fileeditor is the file_editor tool: view, create, str_replace,
// insert and undo_edit on files in the sandbox, with OpenHands' parameter
// names and message texts (see the tool contract in README.md, "Tools", and
// the OpenHands file_editor) and without its known bugs.
//
// Files (one job each): fileeditor.go (schema, definition, factory),
// executor.go (options, dispatch, path checks, reading), view.go, edit.go
// (create, str_replace, insert, undo_edit), text.go (lines, CRLF, cat -n
// output and clipping), encoding.go, write.go (atomic writes), history.go
// (undo), locks.go (per-file serialisation).
//
// # How files are read and written
//
// A file is read whole (at most MaxFileBytes, 10 MiB by default) after an
// O_NONBLOCK open checked to be a regular file, so a FIFO or device cannot
// hang a call. PNG, JPEG, GIF and WebP content (recognised by magic bytes)
// is an image: view returns it as image content, edits are refused. Other
// content goes through detectEncoding: a BOM (UTF-8, UTF-16LE/BE); NUL bytes
// or mostly control characters mean binary (refused); valid UTF-8; else
// Windows-1251 or Windows-1252 (Latin-1) by a word-shape heuristic. Every
// supported encoding round-trips byte-for-byte, so an edit changes only the
// bytes of the edited region. An edit whose new text cannot be represented
// in the file's encoding is refused (upstream silently rewrote the whole
// file as UTF-8).
//
// Line endings: matching and line numbers see every CRLF as one "\n", so
// old_str copied from view (no "\r") matches a CRLF file and never splits a
// CRLF; new text gets the file's dominant ending. Untouched lines keep
// whatever ending they had, mixed files included.
//
// Writes go to a temporary file in the same directory that gets the old
// file's mode and (where permitted) owner, is fsynced and renamed over the
// target, so readers see the old or the new bytes and a failure leaves the
// old ones. Symlinks are resolved first: the link's target is rewritten, the
// link stays. create links the temporary file into place, which fails if
// anything appeared at the path meanwhile. When the directory cannot take a
// temporary file but the file is writable (a read-only directory; a file
// bind-mounted into a container, where rename gives EBUSY), the file is
// rewritten in place and its old bytes are put back if that fails.
//
// Undo keeps the exact bytes before each of the last 10 edits per file (and
// at most 64 MiB in all) in memory; undoing a create removes the file.
//
// # Deliberate differences from OpenHands
//
//   - view numbers lines first and clips whole lines from the middle, so the
//     numbers after "<response clipped>" are the real ones; the notice names
//     the hidden range. A file ending in "\n" has no extra empty last line
//     (an empty file shows line 1 empty, as upstream).
//   - A CRLF file stays CRLF (upstream rewrote every edited file as LF), and
//     old_str written with "\n" or "\r\n" matches it.
//   - Inserting after the last line of a file without a final newline adds
//     the line break instead of joining two lines; new_str ending in "\n"
//     adds no extra blank line.
//   - undo_edit right after create removes the file (upstream rewrote it).
//   - Missing new_str in str_replace deletes old_str, as the schema says
//     (upstream demanded it). Overlapping occurrences count as several.
//     Empty old_str is refused, except to fill an empty file. There is no
//     whitespace-stripping second try; instead the error says where a
//     whitespace- or indentation-insensitive match is, or that old_str
//     carries view's line numbers.
//   - Encodings are detected by rule, not by statistics (upstream guessed a
//     Latin-1 file as Central European); stray invalid bytes in a text file
//     no longer make it "binary"; text the encoding cannot hold is refused
//     instead of converting the file to UTF-8.
//   - Images are recognised by content (PNG, JPEG, GIF, WebP; BMP is not
//     offered since model APIs refuse it) and count toward the size limit.
//   - FIFOs, sockets and devices are refused instead of hanging a read.
//   - A relative path is always answered with its absolute form under the
//     workspace (upstream only when that existed); ~ expands to $HOME.
//
// Concurrency: calls on one file (symlinks resolved) are serialised by a
// per-path lock that a waiting call leaves when its context ends; calls on
// different files run in parallel.
package fileeditor
