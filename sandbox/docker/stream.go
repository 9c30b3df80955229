package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/pkg/stdcopy"
)

// maxStderrLine bounds one logged line of the agent's stderr.
const maxStderrLine = 4096

// stream is the agent's stdio over a hijacked attach or exec connection:
// writes go to the process's stdin; reads get its stdout, demultiplexed
// from the engine's framing (no TTY) by stdcopy. Its stderr becomes log
// lines, through log: the session's truncated and rate-limited logger
// (Runtime.agentLog), since code in the sandbox can write there too.
type stream struct {
	hj   types.HijackedResponse
	pr   *io.PipeReader
	done chan struct{} // the demux goroutine has ended

	once sync.Once
}

func newStream(hj types.HijackedResponse, log *slog.Logger) *stream {
	pr, pw := io.Pipe()
	s := &stream{hj: hj, pr: pr, done: make(chan struct{})}
	errLog := &lineLogger{log: log}
	go func() {
		defer close(s.done)
		_, err := stdcopy.StdCopy(pw, errLog, hj.Reader)
		errLog.flush()
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	return s
}

func (s *stream) Read(p []byte) (int, error)  { return s.pr.Read(p) }
func (s *stream) Write(p []byte) (int, error) { return s.hj.Conn.Write(p) }

// Close drops the connection; the process keeps running (its stdin stays
// open in the engine since StdinOnce is false; an exec'd proxy sees EOF).
// It waits for the demux goroutine so nothing outlives the stream.
func (s *stream) Close() error {
	s.once.Do(func() {
		s.hj.Close()
		s.pr.CloseWithError(net.ErrClosed)
	})
	<-s.done
	return nil
}

// lineLogger turns a byte stream into log lines.
type lineLogger struct {
	log   *slog.Logger
	buf   []byte
	debug bool // a sidecar's stderr: every line at debug level
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > maxStderrLine {
		l.emit(l.buf)
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func (l *lineLogger) flush() {
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
}

// emit logs one line of the agent's stderr. The agent logs JSON lines
// (slog); their level and message are kept, the rest travels as the raw
// line. Anything else (a panic trace, a shell error) is logged as a warning.
func (l *lineLogger) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) == 0 {
		return
	}
	if l.debug {
		l.log.Debug("sidecar stderr", "line", string(line[:min(len(line), maxStderrLine)]))
		return
	}
	var rec struct {
		Level string `json:"level"`
		Msg   string `json:"msg"`
	}
	if len(line) <= maxStderrLine && json.Unmarshal(line, &rec) == nil && rec.Msg != "" {
		var level slog.Level
		if level.UnmarshalText([]byte(rec.Level)) != nil {
			level = slog.LevelInfo
		}
		l.log.Log(context.Background(), level, "agent: "+rec.Msg, "record", json.RawMessage(line))
		return
	}
	if len(line) > maxStderrLine {
		line = line[:maxStderrLine]
	}
	l.log.Warn("agent stderr", "line", string(line))
}
