package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"herald/internal/procstat"
	"herald/internal/testkit"
)

func TestCPUListNamesTheSetsCPUs(t *testing.T) {
	var server, rest unix.CPUSet
	server.Set(0)
	rest.Set(2)
	rest.Set(3)
	s := cpuSplit{server: server, rest: rest}
	if got, want := s.describe(true), "Temporal on CPU 0; PostgreSQL, the workers and the bench on CPU 2,3"; got != want {
		t.Errorf("describe(true) = %q, want %q", got, want)
	}
	if got := s.describe(false); !strings.Contains(got, "PostgreSQL not found here: not pinned") {
		t.Errorf("describe(false) = %q, does not say PostgreSQL stayed where it was", got)
	}
}

func TestSplitGivesTheServerOneCPUAndTheRestTheOthers(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	s, err := splitCPUs()
	if all.Count() < 2 {
		if err == nil || !strings.Contains(err.Error(), "two CPUs") {
			t.Fatalf("on %d CPU: err = %v, want one asking for two CPUs", all.Count(), err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if s.server.Count() != 1 || s.rest.Count() != all.Count()-1 || s.all != all {
		t.Fatalf("split of %d CPUs: server %d, rest %d", all.Count(), s.server.Count(), s.rest.Count())
	}
	for cpu := 0; cpu < 1024; cpu++ {
		if s.server.IsSet(cpu) && s.rest.IsSet(cpu) {
			t.Errorf("CPU %d is on both sides", cpu)
		}
	}
}

func TestPinNeedsTheServersProcess(t *testing.T) {
	var one unix.CPUSet
	one.Set(0)
	_, err := cpuSplit{server: one, rest: one, all: one}.pin(0, 0)
	if err == nil || !strings.Contains(err.Error(), "Temporal server's process is unknown") {
		t.Fatalf("pin without the server's process: err = %v", err)
	}
}

// setTreeAffinity reaches a process's children, started before it, and
// every thread.
func TestSetTreeAffinityReachesChildren(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		t.Skipf("needs two CPUs to tell a narrowed set from all of them; the test may use %d", all.Count())
	}
	s, err := splitCPUs()
	if err != nil {
		t.Fatal(err)
	}
	// A shell whose child sleeps: both must end up on the server's CPU.
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	child := testkit.EventuallyValue(t, 10*time.Second, "the shell's child", func() (int, bool) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if st, err := procstat.Read(pid); err == nil && st.PPID == cmd.Process.Pid {
				return pid, true
			}
		}
		return 0, false
	})
	defer func() { _ = unix.Kill(child, unix.SIGKILL) }()
	if err := setTreeAffinity(cmd.Process.Pid, &s.server); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{cmd.Process.Pid, child} {
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &got); err != nil {
			t.Fatal(err)
		}
		if got != s.server {
			t.Errorf("process %d runs on CPUs %s, want %s", pid, cpuList(got), cpuList(s.server))
		}
	}
	// The bench itself was left alone.
	var self unix.CPUSet
	if err := unix.SchedGetaffinity(0, &self); err != nil {
		t.Fatal(err)
	}
	if self != all {
		t.Errorf("the test's own CPUs changed to %s", cpuList(self))
	}
}
