package netguard

import (
	"fmt"
	"net/netip"
)

// rule names one range of addresses that is refused unless allow-listed.
type rule struct {
	prefix netip.Prefix
	reason string
}

func mustRules(pairs ...string) []rule {
	rules := make([]rule, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		rules = append(rules, rule{prefix: netip.MustParsePrefix(pairs[i]), reason: pairs[i+1]})
	}
	return rules
}

// Reasons shared by several ranges.
const (
	reasonUnspecified   = "unspecified"
	reasonLoopback      = "loopback"
	reasonPrivate       = "private network"
	reasonLinkLocal     = "link-local"
	reasonMetadata      = "cloud metadata"
	reasonBenchmarking  = "benchmarking"
	reasonDocumentation = "documentation"
	reasonMulticast     = "multicast"
	reasonReserved      = "reserved"
)

// v4Rules are checked in order, so a narrower range with a more telling
// reason comes before the range that contains it.
var v4Rules = mustRules(
	"0.0.0.0/8", reasonUnspecified,
	"127.0.0.0/8", reasonLoopback,
	"10.0.0.0/8", reasonPrivate,
	"172.16.0.0/12", reasonPrivate,
	"192.168.0.0/16", reasonPrivate,
	"169.254.169.254/32", reasonMetadata,
	"169.254.170.2/32", reasonMetadata,
	"169.254.170.23/32", reasonMetadata,
	"169.254.0.0/16", reasonLinkLocal,
	"100.100.100.200/32", reasonMetadata,
	"100.64.0.0/10", "shared address space (CGNAT)",
	"168.63.129.16/32", reasonMetadata,
	"198.18.0.0/15", reasonBenchmarking,
	"192.0.0.0/24", "IETF protocol assignments",
	"192.0.2.0/24", reasonDocumentation,
	"198.51.100.0/24", reasonDocumentation,
	"203.0.113.0/24", reasonDocumentation,
	"192.88.99.0/24", "6to4 relay anycast",
	"224.0.0.0/4", reasonMulticast,
	"255.255.255.255/32", "broadcast",
	"240.0.0.0/4", reasonReserved,
)

// v6Rules are the IPv6 ranges refused outright, whatever they might embed.
// Ranges that embed an IPv4 address (IPv4-compatible, NAT64, 6to4) are
// handled by embeddedV4; IPv4-mapped addresses never get here because Check
// unmaps them first.
var v6Rules = mustRules(
	"::/128", reasonUnspecified,
	"::1/128", reasonLoopback,
	"100::/64", "discard-only",
	"2001::/32", "Teredo",
	"2001:2::/48", reasonBenchmarking,
	"2001:db8::/32", reasonDocumentation,
	"2001::/23", "IETF protocol assignments",
	"3fff::/20", reasonDocumentation,
	"fd00:ec2::254/128", reasonMetadata,
	"fd00:ec2::23/128", reasonMetadata,
	"fc00::/7", "unique local",
	"fe80::/10", reasonLinkLocal,
	"fec0::/10", "site-local",
	"ff00::/8", reasonMulticast,
)

var (
	v4Compatible = netip.MustParsePrefix("::/96")
	nat64        = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	// globalUnicast is the only IPv6 space handed out for public use; what
	// lies outside it and is not an embedding form above is reserved.
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// blockedReason returns why addr is refused, or "" when it is a public
// address. addr must be valid, without zone, and unmapped.
func blockedReason(addr netip.Addr) string {
	if addr.Is4() {
		return v4Reason(addr)
	}
	for _, r := range v6Rules {
		if r.prefix.Contains(addr) {
			return r.reason
		}
	}
	if v4, form, ok := embeddedV4(addr); ok {
		if reason := v4Reason(v4); reason != "" {
			return fmt.Sprintf("%s form of %s: %s", form, v4, reason)
		}
		return ""
	}
	if nat64Local.Contains(addr) {
		return "local-use NAT64 with an unrecognised address layout"
	}
	if !globalUnicast.Contains(addr) {
		return reasonReserved
	}
	return ""
}

func v4Reason(addr netip.Addr) string {
	for _, r := range v4Rules {
		if r.prefix.Contains(addr) {
			return r.reason
		}
	}
	return ""
}

// embeddedV4 extracts the IPv4 address that an IPv6 transition form carries,
// with the form's name.
//
// For the local-use NAT64 prefix 64:ff9b:1::/48 the position of the IPv4
// address depends on the prefix length the operator chose (RFC 6052 §2.2).
// Only the /96 layout (bits 48–95 zero, address in the last 32 bits) is
// recognised; any other address in that prefix is refused by blockedReason.
func embeddedV4(addr netip.Addr) (netip.Addr, string, bool) {
	b := addr.As16()
	last32 := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case v4Compatible.Contains(addr):
		return last32, "IPv4-compatible", true
	case nat64.Contains(addr):
		return last32, "NAT64", true
	case nat64Local.Contains(addr) && allZero(b[6:12]):
		return last32, "local-use NAT64", true
	case sixToFour.Contains(addr):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// metadataAddrs are the cloud instance metadata and credential endpoints:
// AWS (IMDS over IPv4 and IPv6, ECS task credentials, EKS pod identity),
// GCP, Azure and Oracle (169.254.169.254), Azure's host endpoint
// (168.63.129.16, a public address) and Alibaba Cloud. An allow-list entry
// lets one of them through only when it names that address exactly.
var metadataAddrs = func() map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, r := range append(append([]rule(nil), v4Rules...), v6Rules...) {
		if r.reason == reasonMetadata {
			m[r.prefix.Addr()] = true
		}
	}
	return m
}()

// metadataTarget returns the metadata address addr reaches, itself or
// embedded in an IPv6 form, and whether there is one. addr must be valid,
// without zone, and unmapped.
func metadataTarget(addr netip.Addr) (netip.Addr, bool) {
	if metadataAddrs[addr] {
		return addr, true
	}
	if v4, _, ok := embeddedV4(addr); ok && metadataAddrs[v4] {
		return v4, true
	}
	return netip.Addr{}, false
}
