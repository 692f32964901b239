package netguard_test

import (
	"net/netip"
	"strings"
	"testing"

	"herald/netguard"
)

// An allow-list entry such as 169.254.0.0/16 silently re-opened the cloud
// metadata address inside it. Metadata addresses now pass only when an entry
// names them exactly.
func TestAllowListNeverCoversMetadataUnlessNamed(t *testing.T) {
	tests := []struct {
		allow string
		addr  string
		ok    bool
	}{
		{"169.254.0.0/16", "169.254.169.254", false},
		{"169.254.0.0/16", "169.254.170.2", false},
		{"169.254.0.0/16", "169.254.170.23", false},
		{"169.254.0.0/16", "169.254.1.1", true},
		{"0.0.0.0/0", "169.254.169.254", false},
		{"169.254.169.0/24", "169.254.169.254", false},
		{"169.254.169.254/32", "169.254.169.254", true},
		{"169.254.169.254", "169.254.169.254", true},
		{"::ffff:169.254.169.254/128", "169.254.169.254", true}, // the same address, mapped
		{"169.254.169.254/32", "::ffff:169.254.169.254", true},
		{"100.64.0.0/10", "100.100.100.200", false},
		{"100.64.0.0/10", "100.100.100.201", true},
		{"fc00::/7", "fd00:ec2::254", false},
		{"fd00:ec2::/32", "fd00:ec2::23", false},
		{"fc00::/7", "fd00:ec2::1", true},
		{"fd00:ec2::254/128", "fd00:ec2::254", true},
		{"2002::/16", "2002:a9fe:a9fe::", false}, // 6to4 form of 169.254.169.254
		{"::/0", "::a9fe:a9fe", false},           // IPv4-compatible form
		{"168.63.129.0/24", "168.63.129.16", false},
	}
	for _, tt := range tests {
		t.Run(tt.allow+" "+tt.addr, func(t *testing.T) {
			err := netguard.New(mustAllow(t, tt.allow)).Check(netip.MustParseAddr(tt.addr))
			if (err == nil) != tt.ok {
				t.Fatalf("Check(%s) with allow-list %q = %v, want allowed=%v", tt.addr, tt.allow, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "cloud metadata") {
				t.Errorf("Check(%s) = %v, want the reason to say cloud metadata", tt.addr, err)
			}
		})
	}
	// Without an allow-list Azure's public host endpoint is refused too.
	if err := netguard.New(nil).Check(netip.MustParseAddr("168.63.129.16")); err == nil {
		t.Error("168.63.129.16 allowed without an allow-list")
	}
}
