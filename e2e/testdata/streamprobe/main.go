// Command streamprobe is what hostile code in a sandbox would run against
// the host⇄agent stream (e2e/stream_test.go uploads a static build):
//
//	streamprobe open PATH...   open each for writing, say what happened
//	streamprobe ptrace PID...  PTRACE_ATTACH each, say what happened
//	streamprobe mitm SOCKET N  put itself in front of the agent's socket (the
//	                           real one moved aside) and, on the first
//	                           connection (the host's agent-proxy), relay
//	                           both ways and inject N forged frames between
//	                           the agent's; writes SOCKET.done when done.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

func main() {
	switch os.Args[1] {
	case "open":
		for _, p := range os.Args[2:] {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err == nil {
				f.Close()
				fmt.Printf("open %s: ok\n", p)
				continue
			}
			fmt.Printf("open %s: %v\n", p, errnoOf(err))
		}
	case "ptrace":
		for _, a := range os.Args[2:] {
			pid, _ := strconv.Atoi(a)
			if err := syscall.PtraceAttach(pid); err != nil {
				fmt.Printf("ptrace %d: %v\n", pid, errnoOf(err))
				continue
			}
			_ = syscall.PtraceDetach(pid)
			fmt.Printf("ptrace %d: ok\n", pid)
		}
	case "mitm":
		n, _ := strconv.Atoi(os.Args[3])
		if err := mitm(os.Args[2], n); err != nil {
			_ = os.WriteFile(os.Args[2]+".done", []byte("error: "+err.Error()), 0o600)
			os.Exit(1)
		}
	}
}

// errnoOf names the errno behind err (EACCES, EPERM, ...).
func errnoOf(err error) string {
	var en syscall.Errno
	if !errors.As(err, &en) {
		return err.Error()
	}
	switch en {
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOENT:
		return "ENOENT"
	}
	return en.Error()
}

func mitm(sock string, n int) error {
	real := sock + ".real"
	if err := os.Rename(sock, real); err != nil {
		return err
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	fmt.Println("listening")
	os.Stdout.Close()
	host, err := ln.Accept()
	if err != nil {
		return err
	}
	agent, err := net.Dial("unix", real)
	if err != nil {
		return err
	}
	go func() { _, _ = io.Copy(agent, host) }()
	var mu sync.Mutex
	go func() { // the agent's frames, whole, to the host
		hdr := make([]byte, 4)
		for {
			if _, err := io.ReadFull(agent, hdr); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(hdr)&^(1<<31))
			if _, err := io.ReadFull(agent, body); err != nil {
				return
			}
			mu.Lock()
			_, _ = host.Write(append(hdr, body...))
			mu.Unlock()
		}
	}()
	small := forged(strings.Repeat("X", 200))
	big := forged(strings.Repeat("Y", 64<<10))
	total := 0
	for i := range n {
		f := small
		if i%1000 == 0 {
			f = big
		}
		mu.Lock()
		_, err := host.Write(f)
		mu.Unlock()
		if err != nil {
			return err
		}
		total += len(f)
	}
	if err := os.WriteFile(sock+".done", []byte(fmt.Sprintf("frames=%d bytes=%d\n", n, total)), 0o600); err != nil {
		return err
	}
	select {} // keep relaying: the session goes on through this connection
}

func forged(msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": -32000, "message": msg}})
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}
