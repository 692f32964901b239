// Package procstat reads what Linux's /proc says about processes and the
// machine: a process's CPU time and its children's, its peak memory, the
// process listening on a local port, and the machine's busy and idle time.
// The benchmarks use it to account the CPU of the servers they measure
// against.
package procstat

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat and
// /proc/stat. It is 100 on every Linux architecture Go supports.
const clockTicks = 100

// Times is a process's CPU use read from /proc/<pid>/stat.
type Times struct {
	PPID int
	// Self is user+system time of the process, in seconds.
	Self float64
	// Children is user+system time of its reaped children, in seconds.
	Children float64
}

// ParseStat reads the fields the benchmarks need from the text of
// /proc/<pid>/stat. The command name is in parentheses and may hold spaces,
// so fields are counted from the last ')'.
func ParseStat(text string) (Times, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return Times{}, fmt.Errorf("parse stat: no command name")
	}
	f := strings.Fields(text[i+1:])
	// f[0] is field 3 (state); ppid is field 4, utime..cstime are 14..17.
	if len(f) < 15 {
		return Times{}, fmt.Errorf("parse stat: %d fields", len(f)+2)
	}
	nums := make([]int64, 5)
	for j, idx := range []int{1, 11, 12, 13, 14} {
		n, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return Times{}, fmt.Errorf("parse stat field %d: %w", idx+3, err)
		}
		nums[j] = n
	}
	return Times{
		PPID:     int(nums[0]),
		Self:     float64(nums[1]+nums[2]) / clockTicks,
		Children: float64(nums[3]+nums[4]) / clockTicks,
	}, nil
}

// Read is ParseStat of /proc/<pid>/stat.
func Read(pid int) (Times, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Times{}, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	return ParseStat(string(b))
}

// All reads the stat of every process on the machine, by PID. A
// process that ends meanwhile is left out.
func All() (map[int]Times, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make(map[int]Times, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := Read(pid); err == nil {
			out[pid] = st
		}
	}
	return out, nil
}

// TreeCPU is the CPU seconds used so far by a process, its reaped children
// and its living children except those in apart (counted on their own): a
// PostgreSQL postmaster and its backends, or the bench without the worker
// process it started.
func TreeCPU(pid int, apart ...int) (float64, error) {
	root, err := Read(pid)
	if err != nil {
		return 0, err
	}
	total := root.Self + root.Children
	procs, err := All()
	if err != nil {
		return total, nil
	}
	for child, t := range procs {
		if t.PPID == pid && child != pid && !slices.Contains(apart, child) {
			total += t.Self
		}
	}
	return total, nil
}

// PeakRSS is the peak resident set size (VmHWM) of a process, in bytes.
func PeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of %d: %w", pid, err)
	}
	return ParseVmHWM(string(b))
}

// ParseVmHWM finds the VmHWM line of /proc/<pid>/status ("VmHWM:  1234 kB").
func ParseVmHWM(status string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse VmHWM %q", rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmHWM: %w", err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no VmHWM line")
}

// Machine is the CPU time of the whole machine so far, in seconds summed
// over its CPUs, from the first line of /proc/stat: Busy is user, nice,
// system, irq and softirq time (guests' time is within user and nice), Idle
// is idle and iowait time, and Steal is what the hypervisor gave to other
// machines.
type Machine struct {
	Busy, Idle, Steal float64
}

// Sub is the time spent between an earlier reading and m.
func (m Machine) Sub(earlier Machine) Machine {
	return Machine{Busy: m.Busy - earlier.Busy, Idle: m.Idle - earlier.Idle, Steal: m.Steal - earlier.Steal}
}

// Add is the sum of two spans of time, m and other.
func (m Machine) Add(other Machine) Machine {
	return Machine{Busy: m.Busy + other.Busy, Idle: m.Idle + other.Idle, Steal: m.Steal + other.Steal}
}

// IdleShare is the share of m's time the CPUs were idle; ok is false when
// m holds no time (a window too short for a clock tick), which has no share.
func (m Machine) IdleShare() (share float64, ok bool) {
	total := m.Busy + m.Idle + m.Steal
	if total <= 0 {
		return 0, false
	}
	return m.Idle / total, true
}

// ParseMachine reads the machine's CPU time from the text of /proc/stat.
func ParseMachine(text string) (Machine, error) {
	line, _, _ := strings.Cut(text, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return Machine{}, fmt.Errorf("parse /proc/stat: first line %q", line)
	}
	var n [8]float64 // user nice system idle iowait irq softirq steal
	for i := range n {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return Machine{}, fmt.Errorf("parse /proc/stat field %d: %w", i+1, err)
		}
		n[i] = float64(v) / clockTicks
	}
	return Machine{Busy: n[0] + n[1] + n[2] + n[5] + n[6], Idle: n[3] + n[4], Steal: n[7]}, nil
}

// ReadMachine is ParseMachine of /proc/stat.
func ReadMachine() (Machine, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, err
	}
	return ParseMachine(string(b))
}

// LoadAverage is the 1-minute load average of the machine, or -1.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// ListenerPID finds the local process listening on the TCP port of
// hostport, so the benchmark can account the CPU of a PostgreSQL or Temporal
// server it did not start itself. It returns 0 when the host is not local or
// no listener is found (another user's process, a remote cluster).
func ListenerPID(hostport string) int {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, inode := range listeningInodes(string(b), uint16(port)) {
			inodes[inode] = true
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range dirs {
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
				return pid
			}
		}
	}
	return 0
}

// listeningInodes returns the socket inodes of the listening sockets on port
// in the text of /proc/net/tcp or /proc/net/tcp6.
func listeningInodes(table string, port uint16) []string {
	var out []string
	lines := strings.Split(table, "\n")
	for _, line := range lines[min(1, len(lines)):] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err == nil && uint16(p) == port {
			out = append(out, f[9])
		}
	}
	return out
}
