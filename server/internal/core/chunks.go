package core

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/sandboxd/sandboxd/server/internal/apierr"
)

// UploadRequest is one message of a chunked upload.
type UploadRequest struct {
	// Dir is where a new upload unpacks (with UploadID empty).
	Dir string
	// UploadID continues an upload; empty starts one.
	UploadID string
	// Offset is where Data starts in the tar stream: the bytes the upload
	// has so far.
	Offset int64
	Data   []byte
	// Final ends the upload and waits for the sandbox to unpack it.
	Final bool
}

// UploadResult is where an upload stands after a message.
type UploadResult struct {
	UploadID string
	Bytes    int64 // received so far
}

// DownloadRequest asks for the next chunk of a download.
type DownloadRequest struct {
	// Path is what a new download sends (with DownloadID empty).
	Path string
	// DownloadID continues a download; empty starts one.
	DownloadID string
	// Offset is where the chunk starts: the previous chunk's offset (a
	// retry) or its end (the next chunk).
	Offset int64
	// Size bounds the chunk: 0 is DefaultDownloadChunk, at most
	// Options.MaxDownloadChunk.
	Size int
}

// DownloadResult is one chunk of a download.
type DownloadResult struct {
	DownloadID string
	Offset     int64 // where Data starts
	Data       []byte
	EOF        bool // Data ends the tar stream
}

// UploadChunk moves one message of an upload.
func (s *Session) UploadChunk(wait context.Context, r UploadRequest) (UploadResult, error) {
	var t *transfer
	var err error
	if r.UploadID == "" {
		if err := s.c.beginCall(); err != nil {
			return UploadResult{}, err
		}
		t, err = s.xfers.start(s.c.base, transferSpec{upload: true, idle: s.c.opts.TransferIdle, max: s.c.opts.MaxTransfers, run: func(ctx context.Context, t *transfer) error {
			defer s.c.endCall()
			err := s.sb.Upload(ctx, r.Dir, t.pr)
			if err != nil {
				t.pr.CloseWithError(err) // the client's next write fails with it
				return err
			}
			// The sandbox may stop at the tar end marker, before the
			// record padding some tar writers add: swallow the rest.
			_, _ = io.Copy(io.Discard, t.pr)
			return nil
		}})
		if err != nil {
			s.c.endCall()
			return UploadResult{}, err
		}
	} else if t, err = s.xfers.get(r.UploadID); err != nil {
		return UploadResult{}, err
	} else if !t.upload {
		return UploadResult{}, apierr.New(apierr.InvalidParams, "%q is a download, not an upload", r.UploadID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touch()
	if r.Offset != t.offset {
		return UploadResult{t.id, t.offset}, apierr.New(apierr.Conflict, "upload %s has %d bytes, this chunk starts at %d; resend from %d", t.id, t.offset, r.Offset, t.offset)
	}
	if len(r.Data) > 0 {
		if _, err := t.pw.Write(r.Data); err != nil {
			s.xfers.remove(t)
			t.abort(err)
			return UploadResult{t.id, t.offset}, errOr(t.finish(wait), err)
		}
		t.offset += int64(len(r.Data))
	}
	if !r.Final {
		return UploadResult{t.id, t.offset}, nil
	}
	t.pw.Close()
	s.xfers.remove(t)
	return UploadResult{t.id, t.offset}, t.finish(wait)
}

func errOr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// DownloadChunk returns the next chunk of a download. A request at the
// offset of the previous chunk gets that chunk again (a retry); at its end,
// the next one.
func (s *Session) DownloadChunk(wait context.Context, r DownloadRequest) (DownloadResult, error) {
	size := r.Size
	if size <= 0 {
		size = DefaultDownloadChunk
	}
	size = min(size, s.c.opts.MaxDownloadChunk)
	var t *transfer
	var err error
	if r.DownloadID == "" {
		if err := s.c.beginCall(); err != nil {
			return DownloadResult{}, err
		}
		t, err = s.xfers.start(s.c.base, transferSpec{upload: false, idle: s.c.opts.TransferIdle, max: s.c.opts.MaxTransfers, run: func(ctx context.Context, t *transfer) error {
			defer s.c.endCall()
			err := s.sb.Download(ctx, r.Path, t.pw)
			t.pw.CloseWithError(err) // nil: the reader sees EOF
			return err
		}})
		if err != nil {
			s.c.endCall()
			return DownloadResult{}, err
		}
	} else if t, err = s.xfers.get(r.DownloadID); err != nil {
		return DownloadResult{}, err
	} else if t.upload {
		return DownloadResult{}, apierr.New(apierr.InvalidParams, "%q is an upload, not a download", r.DownloadID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touch()
	switch {
	case r.DownloadID != "" && r.Offset == t.lastOffset:
		return DownloadResult{t.id, t.lastOffset, t.last, t.eof}, nil
	case r.Offset != t.offset:
		return DownloadResult{DownloadID: t.id, Offset: t.offset}, apierr.New(apierr.Conflict, "download %s is at offset %d, asked for %d", t.id, t.offset, r.Offset)
	case t.eof:
		return DownloadResult{DownloadID: t.id, Offset: t.offset, EOF: true}, nil
	}
	// Grown as data comes, not allocated at size: most downloads are small.
	var b bytes.Buffer
	n, rerr := io.CopyN(&b, t.pr, int64(size))
	buf := b.Bytes()
	if rerr != nil && !errors.Is(rerr, io.EOF) {
		s.xfers.remove(t)
		t.abort(rerr)
		return DownloadResult{DownloadID: t.id, Offset: t.offset}, errOr(t.finish(wait), rerr)
	}
	t.lastOffset, t.last = t.offset, buf
	t.offset += n
	if rerr != nil { // EOF: the tar stream is complete
		t.eof = true
		if err := t.finish(wait); err != nil {
			s.xfers.remove(t)
			return DownloadResult{DownloadID: t.id, Offset: t.lastOffset}, err
		}
		// Kept until idle so a retry of this last chunk still finds it,
		// or until a new transfer needs its place.
		t.kept.Store(true)
	}
	return DownloadResult{t.id, t.lastOffset, buf, t.eof}, nil
}
