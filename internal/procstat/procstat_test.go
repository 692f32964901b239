package procstat

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    Times
		wantErr bool
	}{
		{
			name: "plain",
			text: "42 (postgres) S 7 42 42 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 1 0 100 1000 10",
			want: Times{PPID: 7, Self: 2, Children: 0.5},
		},
		{
			name: "command with spaces and parentheses",
			text: "9 (a (b) c) R 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 100 1000 10",
			want: Times{PPID: 1, Self: 0.03, Children: 0.07},
		},
		{name: "short", text: "9 (x) R 1 2 3", wantErr: true},
		{name: "no name", text: "9 x R 1", wantErr: true},
		{name: "not a number", text: "9 (x) R 1 9 9 0 -1 0 0 0 0 0 u 2 3 4 20", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
	// This process is alive and has used some CPU.
	if s, err := TreeCPU(os.Getpid()); err != nil || s < 0 {
		t.Errorf("TreeCPU(self) = %v, %v", s, err)
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
		got, err := ParseVmHWM(tt.status)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseVmHWM(%q) = %d, %v; want %d (error %v)", tt.status, got, err, tt.want, tt.wantErr)
		}
	}
	if rss, err := PeakRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Errorf("PeakRSS(self) = %d, %v", rss, err)
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
	if pid := ListenerPID("example.com:80"); pid != 0 {
		t.Errorf("a remote host resolved to local process %d", pid)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if pid := ListenerPID(ln.Addr().String()); pid != os.Getpid() {
		t.Errorf("ListenerPID of this test's own listener = %d, want %d", pid, os.Getpid())
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
		st, err := Read(busy.Process.Pid)
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
	apart, err := TreeCPU(os.Getpid(), busy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if whole-apart < spent*0.75 {
		t.Errorf("with the child %.2f s, without %.2f s: the child's %.2f s not told apart", whole, apart, spent)
	}
}

func TestParseMachine(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    Machine
		wantErr bool
	}{
		{
			name: "ten fields",
			text: "cpu  100 20 30 400 50 6 4 10 0 0\ncpu0 50 10 15 200 25 3 2 5 0 0\n",
			want: Machine{Busy: 1.6, Idle: 4.5, Steal: 0.1},
		},
		{name: "a CPU's line first", text: "cpu0 1 2 3 4 5 6 7 8 9 10\n", wantErr: true},
		{name: "short", text: "cpu 1 2 3\n", wantErr: true},
		{name: "not a number", text: "cpu 1 2 x 4 5 6 7 8 9 10\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMachine(tt.text)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			const eps = 1e-9
			if d := got.Sub(tt.want); d.Busy > eps || d.Busy < -eps || d.Idle > eps || d.Idle < -eps || d.Steal > eps || d.Steal < -eps {
				t.Errorf("ParseMachine = %+v, want %+v", got, tt.want)
			}
		})
	}
	if share, ok := (Machine{Busy: 3, Idle: 1}).IdleShare(); share != 0.25 || !ok {
		t.Errorf("IdleShare of 3 s busy and 1 s idle = %v, %v; want 0.25, true", share, ok)
	}
	if sum := (Machine{Busy: 1, Idle: 2, Steal: 3}).Add(Machine{Busy: 4, Idle: 5, Steal: 6}); sum != (Machine{Busy: 5, Idle: 7, Steal: 9}) {
		t.Errorf("Add = %+v, want {5 7 9}", sum)
	}
	if share, ok := (Machine{}).IdleShare(); share != 0 || ok {
		t.Errorf("IdleShare of no time = %v, %v; want 0, false", share, ok)
	}
	// This machine's own reading: time passes, and goes somewhere.
	before, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	after, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d.Busy+d.Idle+d.Steal <= 0 {
		t.Errorf("50 ms of this machine: %+v", d)
	}
}
