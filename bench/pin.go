package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"herald/internal/procstat"
)

// pinServer splits the CPUs for one measurement on cfg's servers (as
// localServers finds them): the Temporal server's process on one,
// PostgreSQL's (when found here) and the bench's on the rest. It returns
// how to undo it and where each side runs.
func pinServer(cfg Config) (restore func(), where string, err error) {
	split, err := splitCPUs()
	if err != nil {
		return nil, "", err
	}
	temporalPID, pgPID := localServers(cfg)
	restore, err = split.pin(temporalPID, pgPID)
	if err != nil {
		return nil, "", err
	}
	return restore, split.describe(pgPID != 0), nil
}

// cpuSplit is where the pinned server configuration (-servers pinned) puts
// the processes of a measurement: the Temporal
// server on the first CPU the bench may use, everything else (PostgreSQL,
// Herald's worker, the floors' and ceilings' workers, the publisher and the
// sink in the bench itself) on the rest, as when Temporal runs on machines
// of its own. On a machine of two CPUs, without it, a reference that does
// little besides Temporal's work (the floor) leaves the server more CPU
// than Herald, whose worker and PostgreSQL take their share beside it.
type cpuSplit struct {
	server, rest unix.CPUSet
	// all is the bench's own set before the split, restored afterwards.
	all unix.CPUSet
}

// splitCPUs divides the CPUs the bench may run on: the first for the
// server, the others for the rest. It needs two at least.
func splitCPUs() (cpuSplit, error) {
	var s cpuSplit
	if err := unix.SchedGetaffinity(0, &s.all); err != nil {
		return s, fmt.Errorf("pinned: read the bench's CPUs: %w", err)
	}
	if s.all.Count() < 2 {
		return s, fmt.Errorf("pinned: needs two CPUs at least, the bench may use %d", s.all.Count())
	}
	first := true
	for cpu := 0; cpu < 1024; cpu++ {
		if !s.all.IsSet(cpu) {
			continue
		}
		if first {
			s.server.Set(cpu)
			first = false
		} else {
			s.rest.Set(cpu)
		}
	}
	return s, nil
}

// describe says where each side runs, for the report; pgPinned whether
// PostgreSQL was found here and moved.
func (s cpuSplit) describe(pgPinned bool) string {
	if pgPinned {
		return fmt.Sprintf("Temporal on CPU %s; PostgreSQL, the workers and the bench on CPU %s", cpuList(s.server), cpuList(s.rest))
	}
	return fmt.Sprintf("Temporal on CPU %s; the workers and the bench on CPU %s (PostgreSQL not found here: not pinned)",
		cpuList(s.server), cpuList(s.rest))
}

// cpuList writes a CPU set as its CPUs' numbers ("1,2,3").
func cpuList(set unix.CPUSet) string {
	out := ""
	for cpu := 0; cpu < 1024; cpu++ {
		if set.IsSet(cpu) {
			if out != "" {
				out += ","
			}
			out += strconv.Itoa(cpu)
		}
	}
	return out
}

// pin puts the Temporal server's process tree on the server's CPU and
// PostgreSQL's (when local: pgPID not 0) and the bench's own on the rest;
// processes and threads they start later inherit their creator's set. It
// returns a function that gives each its set from before back: the bench
// and the server (kept running with -keep) all of the bench's CPUs,
// PostgreSQL the set its postmaster had.
func (s cpuSplit) pin(temporalPID, pgPID int) (restore func(), err error) {
	if temporalPID == 0 {
		return nil, fmt.Errorf("pinned: the Temporal server's process is unknown")
	}
	var pgWas unix.CPUSet
	if pgPID != 0 {
		if err := unix.SchedGetaffinity(pgPID, &pgWas); err != nil {
			return nil, fmt.Errorf("pinned: read PostgreSQL's CPUs: %w", err)
		}
	}
	restore = func() {
		for _, r := range []struct {
			what string
			pid  int
			set  *unix.CPUSet
		}{{"the bench", os.Getpid(), &s.all}, {"the Temporal server", temporalPID, &s.all}, {"PostgreSQL", pgPID, &pgWas}} {
			if r.pid == 0 {
				continue
			}
			if err := setTreeAffinity(r.pid, r.set); err != nil && r.pid != temporalPID {
				fmt.Fprintf(os.Stderr, "bench: pinned: give %s its CPUs back: %v\n", r.what, err)
			}
		}
	}
	if err := setTreeAffinity(temporalPID, &s.server); err != nil {
		return nil, fmt.Errorf("pinned: the Temporal server: %w", err)
	}
	if pgPID != 0 {
		if err := setTreeAffinity(pgPID, &s.rest); err != nil {
			restore()
			return nil, fmt.Errorf("pinned: PostgreSQL: %w", err)
		}
	}
	if err := setTreeAffinity(os.Getpid(), &s.rest); err != nil {
		restore()
		return nil, fmt.Errorf("pinned: the bench: %w", err)
	}
	return restore, nil
}

// setTreeAffinity sets the CPUs of every thread of pid and of its
// descendants. A process or thread that ends meanwhile is skipped. A thread
// or process started during a pass by one not yet moved would keep the old
// set, so the passes go on until one finds nothing new (at most five).
func setTreeAffinity(pid int, set *unix.CPUSet) error {
	done := map[int]bool{}
	for range 5 {
		moved, err := setTreeAffinityOnce(pid, set, done)
		if err != nil || moved == 0 {
			return err
		}
	}
	return nil
}

// setTreeAffinityOnce is one pass of setTreeAffinity over the threads not
// in done, which it adds them to; it returns how many it moved.
func setTreeAffinityOnce(pid int, set *unix.CPUSet, done map[int]bool) (moved int, err error) {
	procs, err := procstat.All()
	if err != nil {
		return 0, err
	}
	children := map[int][]int{}
	for p, st := range procs {
		children[st.PPID] = append(children[st.PPID], p)
	}
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[0]
		todo = append(todo[1:], children[p]...)
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", p))
		if err != nil {
			return moved, err
		}
		if p == pid && len(tasks) == 0 {
			return moved, fmt.Errorf("process %d not found", pid)
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(filepath.Base(task))
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return moved, fmt.Errorf("set the CPUs of thread %d of %d: %w", tid, p, err)
			}
			done[tid] = true
			moved++
		}
	}
	return moved, nil
}
