package netguard_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"herald/netguard"
)

func mustAllow(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	allow, err := netguard.ParseAllowList(s)
	if err != nil {
		t.Fatalf("ParseAllowList(%q): %v", s, err)
	}
	return allow
}

func TestCheckBlockedRanges(t *testing.T) {
	tests := []struct {
		addr   string
		reason string // substring of ForbiddenError.Reason
	}{
		// IPv4 ranges, at their edges where it matters.
		{"0.0.0.0", "unspecified"},
		{"0.255.255.255", "unspecified"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"10.0.0.5", "private network"},
		{"10.255.255.255", "private network"},
		{"172.16.0.1", "private network"},
		{"172.31.255.255", "private network"},
		{"192.168.1.1", "private network"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.0.1", "link-local"},
		{"169.254.255.255", "link-local"},
		{"100.64.0.1", "CGNAT"},
		{"100.100.100.200", "cloud metadata"}, // Alibaba Cloud, inside CGNAT
		{"100.127.255.255", "CGNAT"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"192.0.0.1", "IETF protocol assignments"},
		{"192.0.0.192", "IETF protocol assignments"}, // Oracle Cloud metadata
		{"192.0.2.1", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"192.88.99.1", "6to4 relay anycast"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.254", "reserved"},
		{"255.255.255.255", "broadcast"},

		// IPv4-mapped IPv6, in dotted and hex spellings.
		{"::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1: loopback"},
		{"::ffff:7f00:1", "IPv4-mapped form of 127.0.0.1: loopback"},
		{"0:0:0:0:0:ffff:7f00:0001", "loopback"},
		{"::FFFF:A9FE:A9FE", "IPv4-mapped form of 169.254.169.254: cloud metadata"},
		{"::ffff:10.0.0.1", "private network"},
		{"::ffff:0.0.0.0", "unspecified"},
		{"::ffff:100.64.0.1", "CGNAT"},

		// IPv4-compatible IPv6.
		{"::127.0.0.1", "IPv4-compatible form of 127.0.0.1: loopback"},
		{"::7f00:1", "IPv4-compatible form of 127.0.0.1: loopback"},
		{"::a9fe:a9fe", "IPv4-compatible form of 169.254.169.254: cloud metadata"},
		{"::10.1.2.3", "private network"},
		{"::0.0.0.2", "unspecified"},

		// NAT64, well-known and local-use prefixes.
		{"64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254: cloud metadata"},
		{"64:ff9b::127.0.0.1", "NAT64 form of 127.0.0.1: loopback"},
		{"64:ff9b::10.0.0.1", "private network"},
		{"64:ff9b::c0a8:101", "private network"},
		{"64:ff9b:1::a9fe:a9fe", "local-use NAT64 form of 169.254.169.254: cloud metadata"},
		{"64:ff9b:1:a9fe:a9:fe00::", "local-use NAT64 with an unrecognised address layout"},

		// 6to4 embeds the IPv4 address in bits 16-48.
		{"2002:a9fe:a9fe::", "6to4 form of 169.254.169.254: cloud metadata"},
		{"2002:7f00:1::1", "6to4 form of 127.0.0.1: loopback"},
		{"2002:a00:1:1::1", "6to4 form of 10.0.0.1: private network"},
		{"2002:c0a8:101::", "private network"},

		// IPv6 ranges.
		{"::", "unspecified"},
		{"0:0:0:0:0:0:0:0", "unspecified"},
		{"::1", "loopback"},
		{"0:0:0:0:0:0:0:1", "loopback"},
		{"0000:0000:0000:0000:0000:0000:0000:0001", "loopback"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"febf:ffff::1", "link-local"},
		{"fc00::1", "unique local"},
		{"fd12:3456:789a::1", "unique local"},
		{"fd00:ec2::254", "cloud metadata"}, // AWS IMDS over IPv6, inside unique local
		{"fd00:ec2::1", "unique local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"2001:2::1", "benchmarking"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"},
		{"2001:10::1", "IETF protocol assignments"},
		{"100::1", "discard-only"},
		{"::ffff:0:7f00:1", "reserved"}, // IPv4-translated (SIIT)
		{"5f00::1", "reserved"},
		{"4000::1", "reserved"},
	}
	g := netguard.New(nil)
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			addr := netip.MustParseAddr(tt.addr)
			err := g.Check(addr)
			var fe *netguard.ForbiddenError
			if !errors.As(err, &fe) {
				t.Fatalf("Check(%s) = %v, want *ForbiddenError", tt.addr, err)
			}
			if fe.Addr != addr {
				t.Errorf("ForbiddenError.Addr = %s, want %s", fe.Addr, addr)
			}
			if !strings.Contains(fe.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to contain %q", fe.Reason, tt.reason)
			}
		})
	}
}

func TestCheckPublicAllowed(t *testing.T) {
	// Literal checks only: nothing here is ever dialled.
	for _, s := range []string{
		"8.8.8.8",
		"1.1.1.1",
		"172.32.0.1",  // just past 172.16.0.0/12
		"100.128.0.1", // just past CGNAT
		"198.20.0.1",  // just past benchmarking
		"192.0.1.1",
		"223.255.255.255",
		"::ffff:8.8.8.8",
		"::8.8.8.8", // IPv4-compatible form of a public address
		"64:ff9b::808:808",
		"64:ff9b:1::808:808",
		"2002:808:808::1",
		"2606:4700:4700::1111",
		"2001:4860:4860::8888",
		"2001:200::1", // first address past 2001::/23
	} {
		if err := netguard.New(nil).Check(netip.MustParseAddr(s)); err != nil {
			t.Errorf("Check(%s) = %v, want nil", s, err)
		}
	}
}

func TestCheckAllowList(t *testing.T) {
	tests := []struct {
		allow string
		addr  string
		ok    bool
	}{
		{"127.0.0.0/8", "127.0.0.1", true},
		{"127.0.0.0/8", "127.9.9.9", true},
		{"127.0.0.0/8", "::ffff:127.0.0.1", true}, // mapped: same destination
		{"127.0.0.0/8", "::ffff:7f00:1", true},
		{"127.0.0.0/8", "::1", false},
		{"127.0.0.0/8", "::7f00:1", false},        // compatible: a different destination
		{"127.0.0.0/8", "64:ff9b::7f00:1", false}, // NAT64: a different destination
		{"127.0.0.0/8", "2002:7f00:1::", false},   // 6to4: a different destination
		{"127.0.0.0/8", "10.0.0.1", false},
		{"127.0.0.0/8", "169.254.169.254", false},
		{"::1/128", "::1", true},
		{"::1/128", "127.0.0.1", false},
		{"127.0.0.0/8, ::1/128", "::1", true},
		{"127.0.0.0/8, ::1/128", "127.0.0.1", true},
		{"10.1.0.0/16", "10.1.2.3", true},
		{"10.1.0.0/16", "10.2.0.1", false},
		{"10.1.2.3", "10.1.2.3", true}, // bare IP: /32
		{"10.1.2.3", "10.1.2.4", false},
		{"fe80::/10", "fe80::1%eth0", true}, // zone ignored
		{"fd00:ec2::254", "fd00:ec2::254", true},
		{"fd00:ec2::254", "fd00:ec2::253", false},
		{"::ffff:10.0.0.0/104", "10.9.9.9", true},     // mapped prefix normalised
		{"64:ff9b::/96", "64:ff9b::a9fe:a9fe", false}, // embeds a metadata address
		{"64:ff9b::/96", "64:ff9b::a9fe:a8fe", true},
		{"64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe", true},
		{"0.0.0.0/0", "::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.allow+" "+tt.addr, func(t *testing.T) {
			err := netguard.New(mustAllow(t, tt.allow)).Check(netip.MustParseAddr(tt.addr))
			if (err == nil) != tt.ok {
				t.Fatalf("Check(%s) with allow-list %q = %v, want allowed=%v", tt.addr, tt.allow, err, tt.ok)
			}
		})
	}
}

func TestCheckInvalidAndNil(t *testing.T) {
	var fe *netguard.ForbiddenError
	if err := netguard.New(mustAllow(t, "0.0.0.0/0")).Check(netip.Addr{}); !errors.As(err, &fe) || fe.Reason != "invalid address" {
		t.Errorf("Check(zero Addr) = %v, want invalid address", err)
	}
	var nilGuard *netguard.Guard
	if err := nilGuard.Check(netip.MustParseAddr("127.0.0.1")); !errors.As(err, &fe) {
		t.Errorf("nil Guard Check(127.0.0.1) = %v, want ForbiddenError", err)
	}
	if err := nilGuard.Check(netip.MustParseAddr("8.8.8.8")); err != nil {
		t.Errorf("nil Guard Check(8.8.8.8) = %v, want nil", err)
	}
}

func TestForbiddenErrorText(t *testing.T) {
	err := netguard.New(nil).Check(netip.MustParseAddr("10.0.0.5"))
	if got, want := err.Error(), "address 10.0.0.5 is not allowed (private network)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestNonCanonicalSpellingsRejectedAtParse(t *testing.T) {
	// Decimal, octal, hex and shortened IPv4 forms that inet_aton would
	// accept are not addresses to netip; Control refuses them outright.
	g := netguard.New(mustAllow(t, "0.0.0.0/0, ::/0"))
	for _, s := range []string{
		"2130706433",
		"0177.0.0.1",
		"0x7f.0.0.1",
		"0x7f000001",
		"017700000001",
		"127.1",
		"127.0.1",
		"127.000.000.001",
		"::ffff:0177.0.0.1",
	} {
		if addr, err := netip.ParseAddr(s); err == nil {
			t.Errorf("netip.ParseAddr(%q) = %s, want an error", s, addr)
		}
		if err := g.Control("tcp", s+":80", nil); err == nil {
			t.Errorf("Control(%q) = nil, want an error", s+":80")
		}
	}
}

func TestControl(t *testing.T) {
	tests := []struct {
		address   string
		forbidden bool
	}{
		{"127.0.0.1:80", true},
		{"[::1]:443", true},
		{"[::ffff:127.0.0.1]:80", true},
		{"[::ffff:7f00:1]:80", true},
		{"[64:ff9b::a9fe:a9fe]:80", true},
		{"[2002:a9fe:a9fe::]:80", true},
		{"[fe80::1%lo]:80", true},
		{"169.254.169.254:80", true},
		{"8.8.8.8:53", false},
		{"[2606:4700:4700::1111]:443", false},
	}
	g := netguard.New(nil)
	for _, tt := range tests {
		err := g.Control("tcp", tt.address, nil)
		var fe *netguard.ForbiddenError
		if got := errors.As(err, &fe); got != tt.forbidden {
			t.Errorf("Control(%q) = %v, want forbidden=%v", tt.address, err, tt.forbidden)
		}
	}
	for _, address := range []string{"localhost:80", "127.0.0.1", "/run/x.sock", ""} {
		if err := g.Control("tcp", address, nil); err == nil {
			t.Errorf("Control(%q) = nil, want an error", address)
		}
	}
}

func TestParseAllowList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  string // substring of the error; "" means success
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "127.0.0.0/8,::1/128", want: []string{"127.0.0.0/8", "::1/128"}},
		{in: " 127.0.0.0/8 , ::1/128 ", want: []string{"127.0.0.0/8", "::1/128"}},
		{in: "10.0.0.0/8,,", want: []string{"10.0.0.0/8"}},
		{in: "10.1.2.3", want: []string{"10.1.2.3/32"}},
		{in: "fd00::1", want: []string{"fd00::1/128"}},
		{in: "10.1.2.3/8", want: []string{"10.0.0.0/8"}},
		{in: "::ffff:127.0.0.0/104", want: []string{"127.0.0.0/8"}},
		{in: "::ffff:10.1.2.3", want: []string{"10.1.2.3/32"}},
		{in: "10.0.0.0/33", err: `"10.0.0.0/33"`},
		{in: "127.0.0.0/8, bogus", err: `allow-list entry "bogus"`},
		{in: "0177.0.0.1", err: `"0177.0.0.1"`},
		{in: "fe80::1%eth0", err: `"fe80::1%eth0"`},
		{in: "fe80::%eth0/64", err: `"fe80::%eth0/64"`},
		{in: "10.0.0.0/8;192.168.0.0/16", err: `"10.0.0.0/8;192.168.0.0/16"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := netguard.ParseAllowList(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseAllowList(%q) error = %v, want one containing %s", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAllowList(%q): %v", tt.in, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ParseAllowList(%q) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i].String() != tt.want[i] {
					t.Errorf("entry %d = %s, want %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestNewNormalisesAndCopies(t *testing.T) {
	in := []netip.Prefix{
		netip.MustParsePrefix("::ffff:192.168.0.0/112"),
		netip.MustParsePrefix("10.1.2.3/8"),
		{}, // invalid: ignored
	}
	g := netguard.New(in)
	in[1] = netip.MustParsePrefix("0.0.0.0/0")
	got := g.AllowList()
	want := []string{"192.168.0.0/16", "10.0.0.0/8"}
	if len(got) != len(want) {
		t.Fatalf("AllowList() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("AllowList()[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	if err := g.Check(netip.MustParseAddr("8.8.8.8")); err != nil {
		t.Errorf("Check(8.8.8.8) = %v", err)
	}
	if err := g.Check(netip.MustParseAddr("172.16.0.1")); err == nil {
		t.Error("caller's later change to its slice widened the allow-list")
	}
}

func FuzzParseAllowList(f *testing.F) {
	for _, s := range []string{"", "127.0.0.0/8, ::1/128", "10.1.2.3", "::ffff:1.2.3.4/120", "x,,/", "fe80::%a/64"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		allow, err := netguard.ParseAllowList(s)
		if err != nil {
			return
		}
		parts := make([]string, len(allow))
		for i, p := range allow {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("ParseAllowList(%q) returned non-canonical prefix %v", s, p)
			}
			parts[i] = p.String()
		}
		again, err := netguard.ParseAllowList(strings.Join(parts, ","))
		if err != nil || len(again) != len(allow) {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
		for i := range again {
			if again[i] != allow[i] {
				t.Fatalf("round trip of %q changed %v to %v", s, allow[i], again[i])
			}
		}
	})
}

func FuzzCheck(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1})
	f.Add([]byte{0x20, 0x02, 169, 254, 169, 254, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0x64, 0xff, 0x9b, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != 16 {
			return
		}
		g := netguard.New(nil)
		addr := netip.AddrFrom16([16]byte(b))
		err := g.Check(addr)
		var fe *netguard.ForbiddenError
		if err != nil && (!errors.As(err, &fe) || fe.Reason == "") {
			t.Fatalf("Check(%s) = %v, want nil or a ForbiddenError with a reason", addr, err)
		}
		if addr.Is4In6() {
			// A mapped address and its IPv4 address are one destination.
			if v4err := g.Check(addr.Unmap()); (v4err == nil) != (err == nil) {
				t.Fatalf("Check(%s) = %v but Check(%s) = %v", addr, err, addr.Unmap(), v4err)
			}
		}
	})
}
