package main

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    procTimes
		wantErr bool
	}{
		{
			name: "plain",
			text: "42 (postgres) S 7 42 42 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 1 0 100 1000 10",
			want: procTimes{PPID: 7, Self: 2, Children: 0.5},
		},
		{
			name: "command with spaces and parentheses",
			text: "9 (a (b) c) R 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 100 1000 10",
			want: procTimes{PPID: 1, Self: 0.03, Children: 0.07},
		},
		{name: "short", text: "9 (x) R 1 2 3", wantErr: true},
		{name: "no name", text: "9 x R 1", wantErr: true},
		{name: "not a number", text: "9 (x) R 1 9 9 0 -1 0 0 0 0 0 u 2 3 4 20", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
	// This process is alive and has used some CPU.
	if s, err := treeCPU(os.Getpid()); err != nil || s < 0 {
		t.Errorf("treeCPU(self) = %v, %v", s, err)
	}
}

func TestParseVmHWM(t *testing.T) {
	tests := []struct {
		status  string
		want    int64
		wantErr bool
	}{
		{"Name:\tx\nVmPeak:\t  9 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1 kB\n", 2048 * 1024, false},
		{"Name:\tx\n", 0, true},
		{"VmHWM:\t12 MB\n", 0, true},
		{"VmHWM:\tlots kB\n", 0, true},
	}
	for _, tt := range tests {
		got, err := parseVmHWM(tt.status)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseVmHWM(%q) = %d, %v; want %d (error %v)", tt.status, got, err, tt.want, tt.wantErr)
		}
	}
	if rss, err := peakRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Errorf("peakRSS(self) = %d, %v", rss, err)
	}
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0 20 4 30 10 -1
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1 0 100 0 0 10 0
`
	tests := []struct {
		port uint16
		want []string
	}{
		{8080, []string{"1111"}}, // the established connection on 8080 is not a listener
		{80, []string{"3333"}},
		{5432, nil},
	}
	for _, tt := range tests {
		got := listeningInodes(table, tt.port)
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("port %d: %v, want %v", tt.port, got, tt.want)
		}
	}
	if pid := listenerPID("example.com:80"); pid != 0 {
		t.Errorf("a remote host resolved to local process %d", pid)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if pid := listenerPID(ln.Addr().String()); pid != os.Getpid() {
		t.Errorf("listenerPID of this test's own listener = %d, want %d", pid, os.Getpid())
	}
}

// The bench's own CPU leaves out the worker it started: the worker is its
// child, and counted on its own.
func TestTreeCPUApart(t *testing.T) {
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	const spent = 0.2
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := readStat(busy.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.Self >= spent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the busy child used %.2f s of CPU in 30 s", st.Self)
		}
		time.Sleep(20 * time.Millisecond)
	}
	apart, err := treeCPU(os.Getpid(), busy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if whole-apart < spent*0.75 {
		t.Errorf("with the child %.2f s, without %.2f s: the child's %.2f s not told apart", whole, apart, spent)
	}
}

// TestTemporalDBCPU checks that -temporal-db-pid puts the process it names
// in the CPU accounting as Temporal's database (the PostgreSQL of
// scripts/temporal-pg.sh), and that without it there is no such figure.
func TestTemporalDBCPU(t *testing.T) {
	self := os.Getpid() // a process that exists, standing in for the postmaster
	o, err := parseFlags([]string{"-temporal-db-pid", strconv.Itoa(self)})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: Config{PIDs: o.givenPIDs()}}
	b.pids = b.serverPIDs()
	if b.pids[temporalDB] != self {
		t.Fatalf("pids %v: want %s = %d", b.pids, temporalDB, self)
	}
	if _, ok := b.cpu(0)[temporalDB]; !ok {
		t.Errorf("no %s CPU figure with -temporal-db-pid", temporalDB)
	}
	o, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	b = &bench{cfg: Config{PIDs: o.givenPIDs()}}
	b.pids = b.serverPIDs()
	if _, ok := b.cpu(0)[temporalDB]; ok {
		t.Errorf("a %s CPU figure without -temporal-db-pid", temporalDB)
	}

	// Herald's PostgreSQL and Temporal's one cluster: counted once, as
	// Herald's, and said so.
	var progress strings.Builder
	pids := map[string]int{temporalDB: self, "postgres": self}
	b = &bench{cfg: Config{PIDs: pids, Progress: &progress}}
	b.pids = b.serverPIDs()
	if _, ok := b.pids[temporalDB]; ok || b.pids["postgres"] != self {
		t.Errorf("one cluster for both: pids %v, want postgres alone", b.pids)
	}
	if !strings.Contains(progress.String(), "Herald's PostgreSQL too") {
		t.Errorf("one cluster for both went unsaid: %q", progress.String())
	}
}
