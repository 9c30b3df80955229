package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dclient "github.com/docker/docker/client"
)

// Readings of the host's /proc and the engine's cgroups (cgroup v1 with the
// cgroupfs driver, as on this machine, or cgroup v2), for the scale
// suites' CPU and memory figures. Each returns an error where the host
// lays them out otherwise, and the suites say "n/a".

// clockTick is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux the engine runs on.
const clockTick = 100

// procCPU is the CPU time (user+system) the process has used.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statCPU(b)
}

// statCPU reads utime+stime from the text of /proc/PID/stat.
func statCPU(b []byte) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start past its last closing parenthesis; utime and
	// stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command name", len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/PID/stat: utime %q stime %q", f[11], f[12])
	}
	return time.Duration(u+s) * time.Second / clockTick, nil
}

// procStatusKB is a "kB" line of /proc/PID/status, e.g. VmRSS.
func procStatusKB(pid int, key string) (int64, error) {
	return fileKB(fmt.Sprintf("/proc/%d/status", pid), key)
}

// fileKB reads "Key:   123 kB" from a /proc file (status, meminfo).
func fileKB(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	kb, err := readKB(f, key)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return kb, nil
}

// readKB finds the line "key: N kB" and returns N.
func readKB(r io.Reader, key string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s", key)
}

// openFDs counts the entries of /proc/PID/fd.
func openFDs(pid int) (int, error) {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es), err
}

// pidsByComm lists the processes whose /proc/PID/comm starts with prefix.
func pidsByComm(prefix string) []int {
	es, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), prefix) {
			out = append(out, pid)
		}
	}
	return out
}

// commCPU sums the CPU time of the processes named by prefix (the
// engine's dockerd, containerd, the shims); processes that end between
// two readings take their time with them, so the shims' figure is a floor.
func commCPU(prefix string) time.Duration {
	var d time.Duration
	for _, pid := range pidsByComm(prefix) {
		if c, err := procCPU(pid); err == nil {
			d += c
		}
	}
	return d
}

// cgroupFile finds a container's file in a cgroup controller: v1 cgroupfs
// (/sys/fs/cgroup/CTRL/docker/ID), v1 systemd (.../system.slice/docker-ID.scope)
// or v2 (/sys/fs/cgroup/system.slice/docker-ID.scope, /sys/fs/cgroup/docker/ID).
func cgroupFile(ctrl, id, v1name, v2name string) (string, error) {
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", ctrl, "docker", id, v1name),
		filepath.Join("/sys/fs/cgroup", ctrl, "system.slice", "docker-"+id+".scope", v1name),
		filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+id+".scope", v2name),
		filepath.Join("/sys/fs/cgroup/docker", id, v2name),
	} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cgroup %s of container %.12s", ctrl, id)
}

// containerCPU is the CPU time a container's cgroup has used.
func containerCPU(id string) (time.Duration, error) {
	p, err := cgroupFile("cpuacct", id, "cpuacct.usage", "cpu.stat")
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	if strings.HasSuffix(p, "cpu.stat") { // v2: usage_usec N
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond, err
			}
		}
		return 0, fmt.Errorf("%s: no usage_usec", p)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns), err
}

// containerRSSKB sums VmRSS over the processes of a container's cgroup,
// read from the host's /proc: the agent, its shell, the tools' children.
// It returns the sum, the agent's own (the container's first process) and
// how many processes there were.
func containerRSSKB(ctx context.Context, cli *dclient.Client, id string) (total, agent int64, procs int, err error) {
	p, err := cgroupFile("memory", id, "cgroup.procs", "cgroup.procs")
	if err != nil {
		return 0, 0, 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, 0, err
	}
	ins, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		kb, err := procStatusKB(pid, "VmRSS")
		if err != nil {
			continue // ended meanwhile, or a kernel thread
		}
		total += kb
		procs++
		if ins.State != nil && pid == ins.State.Pid {
			agent = kb
		}
	}
	return total, agent, procs, nil
}

// runContainers lists the IDs of the running containers labelled key=value.
func runContainers(ctx context.Context, cli *dclient.Client, key, value string) ([]string, error) {
	cs, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", key+"="+value))})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids, nil
}

// cpuSnapshot is the CPU used so far by every party of a call: this
// process (the daemon in-process, with the clients), the engine (dockerd,
// containerd, the shims) and the run's containers.
type cpuSnapshot struct {
	self, dockerd, containerd, shims, containers time.Duration
}

func takeCPU(ids []string) cpuSnapshot {
	s := cpuSnapshot{dockerd: commCPU("dockerd"), containerd: commCPU("containerd"), shims: commCPU("containerd-shim")}
	s.containerd -= s.shims // "containerd" is a prefix of the shims' name
	s.self, _ = procCPU(os.Getpid())
	for _, id := range ids {
		if c, err := containerCPU(id); err == nil {
			s.containers += c
		}
	}
	return s
}

func (s cpuSnapshot) sub(o cpuSnapshot) cpuSnapshot {
	return cpuSnapshot{s.self - o.self, s.dockerd - o.dockerd, s.containerd - o.containerd, s.shims - o.shims, s.containers - o.containers}
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
