package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// Upload sends a tar stream to the agent, which extracts it under destDir
// (absolute, or relative to the workspace; created if missing; it must be
// inside the workspace). The stream is sent in ChunkSize chunks, so any
// size works. Entries that are absolute, climb out with "..", are device
// files, or are symlinks pointing outside the workspace fail the upload
// with ErrBadArchive or ErrOutsideWorkspace; entries extracted before the
// failing one stay.
func (c *Client) Upload(ctx context.Context, destDir string, tarStream io.Reader) error {
	_, err := c.UploadResult(ctx, destDir, tarStream)
	return err
}

// UploadResult is Upload that also reports what was extracted.
func (c *Client) UploadResult(ctx context.Context, destDir string, tarStream io.Reader) (proto.UploadResult, error) {
	var res proto.UploadResult
	raw, err := c.roundTrip(ctx, proto.MethodUploadBegin, proto.PathParams{Path: destDir}, nil)
	if err != nil {
		return res, err
	}
	var tp proto.TransferParams
	if err := json.Unmarshal(raw, &tp); err != nil {
		return res, &MethodError{Method: proto.MethodUploadBegin, Err: fmt.Errorf("decoding the result: %w", err)}
	}
	buf := make([]byte, proto.ChunkSize)
	for seq := uint64(1); ; seq++ {
		n, rerr := io.ReadFull(tarStream, buf)
		if n > 0 {
			if _, err := c.exchange(ctx, proto.MethodUploadChunk, proto.ChunkParams{Transfer: tp.Transfer, Seq: seq}, buf[:n], nil); err != nil {
				c.abort(tp.Transfer)
				return res, err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			c.abort(tp.Transfer)
			return res, fmt.Errorf("upload to %s: reading the tar stream: %w", destDir, rerr)
		}
	}
	raw, err = c.roundTrip(ctx, proto.MethodUploadEnd, proto.TransferParams{Transfer: tp.Transfer}, nil)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return res, &MethodError{Method: proto.MethodUploadEnd, Err: fmt.Errorf("decoding the result: %w", err)}
	}
	return res, nil
}

// Download writes a tar of path (a file, or a directory and all under it;
// absolute or relative to the workspace, inside it) to w. The top entry is
// the base name of path, as with `docker cp`; symlinks are kept as links.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) error {
	raw, err := c.roundTrip(ctx, proto.MethodDownload, proto.PathParams{Path: path}, nil)
	if err != nil {
		return err
	}
	var tp proto.TransferParams
	if err := json.Unmarshal(raw, &tp); err != nil {
		return &MethodError{Method: proto.MethodDownload, Err: fmt.Errorf("decoding the result: %w", err)}
	}
	for {
		f, err := c.exchange(ctx, proto.MethodDownloadRd, proto.TransferParams{Transfer: tp.Transfer}, nil, nil)
		if err != nil {
			if !errors.Is(err, proto.ErrDisconnected) {
				c.abort(tp.Transfer)
			}
			return err
		}
		var ch proto.ChunkResult
		if err := json.Unmarshal(f.Result, &ch); err != nil {
			c.abort(tp.Transfer)
			return &MethodError{Method: proto.MethodDownloadRd, Err: fmt.Errorf("decoding the result: %w", err)}
		}
		if f.Data != nil {
			ch.Data = f.Data
		}
		if _, err := w.Write(ch.Data); err != nil {
			c.abort(tp.Transfer)
			return fmt.Errorf("download %s: writing the tar: %w", path, err)
		}
		if ch.EOF {
			return nil
		}
	}
}

// abort tells the agent to drop a transfer (best effort: the agent also
// drops it when the connection ends or it stays idle).
func (c *Client) abort(transfer string) {
	raw, _ := json.Marshal(proto.TransferParams{Transfer: transfer})
	c.notifyAsync(&proto.Frame{Method: proto.MethodAbort, Params: raw})
}
