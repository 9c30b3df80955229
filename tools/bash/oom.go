package bash

import (
	"os"
	"strconv"
)

// oomScoreAdj is the shell's oom_score_adj, inherited by every command it
// runs: the highest there is, so that when the sandbox runs out of memory
// the kernel's OOM killer picks the terminal's processes first, not the
// agent that serves every tool (in a sandbox it is the main process: its
// death ends the session). Without it a command made of many processes,
// each smaller than the agent (parallel compilers, test workers), gets the
// agent killed, the largest process of equal score. Any process may raise
// a score; lowering one below what it started with needs CAP_SYS_RESOURCE,
// so commands cannot make themselves safer than the agent by accident.
const oomScoreAdj = "1000"

// preferForOOM sets the oom_score_adj of a process this one started (same
// user; before it starts children of its own).
func preferForOOM(pid int) error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(oomScoreAdj)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
