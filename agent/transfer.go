package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// Upload: fs/upload/begin {path} -> {transfer}; fs/upload/chunk {transfer,
// seq, data} -> {} (seq from 1, in order); fs/upload/end {transfer} ->
// UploadResult once the agent has extracted everything. The tar stream is
// extracted as it arrives, by the agent, under the destination directory.
type upload struct {
	id   string
	dest string // for messages
	pw   *io.PipeWriter
	idle *time.Timer

	mu   sync.Mutex // one chunk at a time, in order
	next uint64

	done chan struct{} // extraction ended
	res  proto.UploadResult
	err  error
}

func (u *upload) abort(err error) {
	u.idle.Stop()
	u.pw.CloseWithError(err)
}

// wait returns the extraction's outcome once it has ended.
func (u *upload) wait(ctx context.Context) (proto.UploadResult, error) {
	select {
	case <-u.done:
		return u.res, u.err
	case <-ctx.Done():
		u.abort(ctx.Err())
		<-u.done
		return u.res, ctx.Err()
	}
}

func handleUploadBegin(_ context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.PathParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	root, rel, abs, err := c.s.transferPath(p.Path)
	if err != nil {
		return nil, err
	}
	ws, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("upload: opening %s: %w", root, err)
	}
	defer func() { _ = ws.Close() }() // a directory handle: nothing to flush
	if err := ws.MkdirAll(rel, 0o755); err != nil {
		return nil, fmt.Errorf("upload: creating the destination %s: %w", abs, rootErr(err))
	}
	dst, err := ws.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("upload: opening the destination %s: %w", abs, rootErr(err))
	}
	pr, pw := io.Pipe()
	u := &upload{id: c.s.newTransferID("up"), dest: abs, pw: pw, next: 1, done: make(chan struct{})}
	u.idle = time.AfterFunc(c.s.opts.TransferIdleTimeout, func() {
		if c.takeTransfer(u.id) != nil {
			c.log.Warn("aborting an idle upload", "transfer", u.id, "dest", abs)
			u.abort(fmt.Errorf("upload %s: no chunk for %v", u.id, c.s.opts.TransferIdleTimeout))
		}
	})
	go func() {
		defer close(u.done)
		defer func() { _ = dst.Close() }() // a directory handle: nothing to flush
		u.res, u.err = extractTar(dst, pr, extractLimits{workspace: root, destRel: rel})
		if u.err != nil {
			u.err = fmt.Errorf("upload to %s: %w", abs, u.err)
		}
		pr.CloseWithError(u.err) // a nil error: later writes get io.ErrClosedPipe
	}()
	c.addTransfer(u.id, u)
	c.log.Info("upload started", "transfer", u.id, "dest", abs)
	return proto.TransferParams{Transfer: u.id}, nil
}

func (c *conn) upload(id string) (*upload, error) {
	t, err := c.lookupTransfer(id)
	if err != nil {
		return nil, err
	}
	u, ok := t.(*upload)
	if !ok {
		return nil, fmt.Errorf("%w %q: it is a download, not an upload", proto.ErrUnknownTransfer, id)
	}
	return u, nil
}

func handleUploadChunk(ctx context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.ChunkParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	u, err := c.upload(p.Transfer)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if p.Seq != u.next {
		c.takeTransfer(u.id)
		err := fmt.Errorf("%w: upload %s got chunk %d, expected %d; chunks must be sent in order, one at a time", proto.ErrInvalidParams, u.id, p.Seq, u.next)
		u.abort(err)
		return nil, err
	}
	u.next++
	u.idle.Reset(c.s.opts.TransferIdleTimeout)
	// Write blocks until the extractor has consumed the data; a cancelled
	// request aborts the whole upload (the archive would be incomplete).
	stop := context.AfterFunc(ctx, func() { u.abort(ctx.Err()) })
	data := f.Data
	if data == nil {
		data = p.Data // sent inline as base64 by a JSON-only peer
	}
	_, werr := u.pw.Write(data)
	stop()
	if werr != nil {
		c.takeTransfer(u.id)
		if _, err := u.wait(context.Background()); err != nil {
			return nil, err
		}
		if errors.Is(werr, io.ErrClosedPipe) {
			return nil, fmt.Errorf("%w: upload %s: data after the end of the archive", proto.ErrBadArchive, u.id)
		}
		return nil, werr
	}
	return struct{}{}, nil
}

func handleUploadEnd(ctx context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.TransferParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	u, err := c.upload(p.Transfer)
	if err != nil {
		return nil, err
	}
	c.takeTransfer(u.id)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.idle.Stop()
	_ = u.pw.Close() // an io.PipeWriter's Close never fails
	res, err := u.wait(ctx)
	if err != nil {
		return nil, err
	}
	c.log.Info("upload done", "transfer", u.id, "dest", u.dest, "files", res.Files, "dirs", res.Dirs, "bytes", res.Bytes)
	return res, nil
}

// Download: fs/download/begin {path} -> {transfer}; fs/download/read
// {transfer} -> {data, eof} until eof. The agent writes a tar of the path
// (a file, or a directory and everything under it) as the host reads it.
type download struct {
	id   string
	pr   *io.PipeReader
	idle *time.Timer
	mu   sync.Mutex
}

func (d *download) abort(err error) {
	d.idle.Stop()
	d.pr.CloseWithError(err)
}

func handleDownloadBegin(_ context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.PathParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	root, rel, abs, err := c.s.transferPath(p.Path)
	if err != nil {
		return nil, err
	}
	ws, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("download: opening %s: %w", root, err)
	}
	if _, err := ws.Lstat(rel); err != nil {
		_ = ws.Close() // a directory handle: nothing to flush
		return nil, fmt.Errorf("download %s: %w", abs, rootErr(err))
	}
	pr, pw := io.Pipe()
	d := &download{id: c.s.newTransferID("down"), pr: pr}
	d.idle = time.AfterFunc(c.s.opts.TransferIdleTimeout, func() {
		if c.takeTransfer(d.id) != nil {
			c.log.Warn("aborting an idle download", "transfer", d.id, "path", abs)
			d.abort(fmt.Errorf("download %s: no read for %v", d.id, c.s.opts.TransferIdleTimeout))
		}
	})
	top := filepath.Base(abs)
	go func() {
		defer func() { _ = ws.Close() }() // a directory handle: nothing to flush
		err := writeTar(pw, ws, rel, top)
		if err != nil {
			err = fmt.Errorf("download %s: %w", abs, err)
		}
		pw.CloseWithError(err)
	}()
	c.addTransfer(d.id, d)
	c.log.Info("download started", "transfer", d.id, "path", abs)
	return proto.TransferParams{Transfer: d.id}, nil
}

func handleDownloadRead(ctx context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.TransferParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	t, err := c.lookupTransfer(p.Transfer)
	if err != nil {
		return nil, err
	}
	d, ok := t.(*download)
	if !ok {
		return nil, fmt.Errorf("%w %q: it is an upload, not a download", proto.ErrUnknownTransfer, p.Transfer)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idle.Reset(c.s.opts.TransferIdleTimeout)
	buf := make([]byte, proto.ChunkSize)
	stop := context.AfterFunc(ctx, func() { d.abort(ctx.Err()) })
	n, err := io.ReadFull(d.pr, buf)
	stop()
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		c.takeTransfer(d.id)
		d.idle.Stop()
		return withData{proto.ChunkResult{EOF: true}, buf[:n]}, nil
	case err != nil:
		c.takeTransfer(d.id)
		d.abort(err)
		return nil, err
	}
	return withData{proto.ChunkResult{}, buf[:n]}, nil
}

func (s *Server) newTransferID(kind string) string {
	return fmt.Sprintf("%s-%d", kind, s.transfers.Add(1))
}

// transferPath resolves a transfer path (absolute, or relative to the
// workspace) to the root it is confined to (the workspace, or the transfer
// root it lies in; the innermost if they nest) and its path relative to
// that root. A path under none of them is ErrOutsideWorkspace.
func (s *Server) transferPath(p string) (root, rel, abs string, err error) {
	if strings.TrimSpace(p) == "" {
		return "", "", "", fmt.Errorf("%w: path is empty; give a directory under %s", proto.ErrInvalidParams, s.roots())
	}
	abs = p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(s.opts.Workspace, abs)
	}
	abs = filepath.Clean(abs)
	for _, r := range append([]string{s.opts.Workspace}, s.opts.TransferRoots...) {
		rr, err := filepath.Rel(r, abs)
		if err != nil || rr == ".." || strings.HasPrefix(rr, "../") {
			continue
		}
		if root == "" || len(r) > len(root) {
			root, rel = r, rr
		}
	}
	if root == "" {
		return "", "", "", fmt.Errorf("%w: %s is not under %s", proto.ErrOutsideWorkspace, p, s.roots())
	}
	return root, rel, abs, nil
}

// roots names the directories transfers may touch, for messages.
func (s *Server) roots() string {
	if len(s.opts.TransferRoots) == 0 {
		return "the workspace " + s.opts.Workspace
	}
	return "the workspace " + s.opts.Workspace + " or " + strings.Join(s.opts.TransferRoots, ", ")
}

// rootErr marks os.Root's refusal to leave its directory (its error is not
// exported) as ErrOutsideWorkspace, so the host gets the right code.
func rootErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%w (through a symlink or ..): %v", proto.ErrOutsideWorkspace, err)
	}
	return err
}
