package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sys/unix"
)

// pinServer splits the CPUs for one measurement on cfg's servers (-pin):
// the Temporal server's process (cfg.PIDs, or the one listening on its
// address) on one, PostgreSQL's (when it listens here) and the bench's on
// the rest. It returns how to undo it and where each side runs.
func pinServer(cfg Config) (restore func(), where string, err error) {
	split, err := splitCPUs()
	if err != nil {
		return nil, "", err
	}
	temporalPID := cfg.PIDs["temporal"]
	if temporalPID == 0 {
		temporalPID = listenerPID(cfg.TemporalAddress)
	}
	pgPID := 0
	if pc, err := pgconn.ParseConfig(cfg.DatabaseURL); err == nil {
		pgPID = listenerPID(net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
	}
	restore, err = split.pin(temporalPID, pgPID)
	if err != nil {
		return nil, "", err
	}
	return restore, split.describe(), nil
}

// cpuSplit is where -pin puts the processes of a measurement: the Temporal
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
		return s, fmt.Errorf("-pin: read the bench's CPUs: %w", err)
	}
	if s.all.Count() < 2 {
		return s, fmt.Errorf("-pin: needs two CPUs at least, the bench may use %d", s.all.Count())
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

// describe says where each side runs, for the report.
func (s cpuSplit) describe() string {
	return fmt.Sprintf("pinned: Temporal on CPU %s, the rest on CPU %s", cpuList(s.server), cpuList(s.rest))
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
// processes they start later inherit their parent's set. It returns a
// function that gives the bench and PostgreSQL every CPU back (the server,
// started for one measurement, stops).
func (s cpuSplit) pin(temporalPID, pgPID int) (restore func(), err error) {
	if temporalPID == 0 {
		return nil, fmt.Errorf("-pin: the Temporal server's process is unknown (a server on another machine has nothing to pin; -temporal-pid names a local one)")
	}
	if err := setTreeAffinity(temporalPID, &s.server); err != nil {
		return nil, fmt.Errorf("-pin: the Temporal server: %w", err)
	}
	restore = func() {
		_ = setTreeAffinity(os.Getpid(), &s.all)
		if pgPID != 0 {
			_ = setTreeAffinity(pgPID, &s.all)
		}
	}
	if pgPID != 0 {
		if err := setTreeAffinity(pgPID, &s.rest); err != nil {
			restore()
			return nil, fmt.Errorf("-pin: PostgreSQL: %w", err)
		}
	}
	if err := setTreeAffinity(os.Getpid(), &s.rest); err != nil {
		restore()
		return nil, fmt.Errorf("-pin: the bench: %w", err)
	}
	return restore, nil
}

// setTreeAffinity sets the CPUs of every thread of pid and of its
// descendants. A process or thread that ends meanwhile is skipped.
func setTreeAffinity(pid int, set *unix.CPUSet) error {
	children := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(p); err == nil {
			children[st.PPID] = append(children[st.PPID], p)
		}
	}
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[0]
		todo = append(todo[1:], children[p]...)
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", p))
		if err != nil {
			return err
		}
		if p == pid && len(tasks) == 0 {
			return fmt.Errorf("process %d not found", pid)
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(filepath.Base(task))
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("set the CPUs of thread %d of %d: %w", tid, p, err)
			}
		}
	}
	return nil
}
