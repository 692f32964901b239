// Package netguard refuses outbound connections to addresses a webhook must
// never reach (SSRF protection): loopback, private and link-local networks,
// cloud metadata, CGNAT, multicast, reserved and documentation ranges, and
// the IPv6 forms that embed any of these IPv4 addresses.
//
// The check runs in the dialer's Control hook, on the literal IP address
// about to be connected after DNS resolution, so a host name that resolves
// (or re-resolves) to a forbidden address cannot get through. Addresses in
// the operator's allow-list (HERALD_ALLOW_NETWORKS) are let through.
//
// IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are the same destination as
// their IPv4 address, so they are unmapped first and both the allow-list and
// the rules see the IPv4 address: an allow-listed 127.0.0.0/8 permits
// ::ffff:127.0.0.1 too. Other forms that embed an IPv4 address
// (IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4
// 2002::/16) are distinct IPv6 destinations: they are refused when the
// embedded IPv4 address would be, and only an allow-list entry covering the
// IPv6 address itself lets them through.
//
// Textual forms that are not canonical IP addresses, such as 2130706433,
// 0177.0.0.1, 0x7f.1 or 127.1, are not addresses to this package: netip
// rejects them, so ParseAllowList and Control refuse them. When such a string
// reaches a dialer as a host name, Go's own resolver fails on it (it refuses
// all-numeric names and finds no record for the rest); a resolver built on
// inet_aton may turn it into 127.0.0.1, and that address is then refused at
// dial time like any other.
package netguard

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ForbiddenError reports an address the guard refuses to connect to.
type ForbiddenError struct {
	// Addr is the address as it was dialled.
	Addr netip.Addr
	// Reason names the range the address falls in, e.g. "private network".
	Reason string
}

// Error implements error.
func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("address %s is not allowed (%s)", e.Addr, e.Reason)
}

// Guard decides which addresses outbound connections may reach. A nil
// *Guard behaves as New(nil): every rule applies and nothing is allow-listed.
// A Guard must not be modified once in use.
type Guard struct {
	allow []netip.Prefix

	// Resolver resolves host names for DialContext, CheckHost and the clients
	// built by NewHTTPClient; nil means net.DefaultResolver.
	Resolver *net.Resolver
}

// New returns a Guard that lets through the addresses covered by allow, in
// addition to every public address. Prefixes are normalised: host bits are
// cleared and an IPv4-mapped prefix of at least 96 bits becomes the IPv4
// prefix it maps (::ffff:127.0.0.0/104 is 127.0.0.0/8). Invalid prefixes
// are ignored.
func New(allow []netip.Prefix) *Guard {
	g := &Guard{}
	for _, p := range allow {
		if p.IsValid() {
			g.allow = append(g.allow, normalizePrefix(p))
		}
	}
	return g
}

// AllowList returns a copy of the guard's normalised allow-list.
func (g *Guard) AllowList() []netip.Prefix {
	if g == nil {
		return nil
	}
	return append([]netip.Prefix(nil), g.allow...)
}

// Check returns nil when addr may be connected to, and a *ForbiddenError
// saying why not otherwise. An invalid (zero) addr is refused.
func (g *Guard) Check(addr netip.Addr) error {
	if !addr.IsValid() {
		return &ForbiddenError{Addr: addr, Reason: "invalid address"}
	}
	// A zone only selects the interface; Prefix.Contains is false for any
	// zoned address, so drop it before matching.
	a := addr.WithZone("").Unmap()
	if g.allowed(a) {
		return nil
	}
	reason := blockedReason(a)
	if reason == "" {
		return nil
	}
	if addr.Is4In6() {
		reason = fmt.Sprintf("IPv4-mapped form of %s: %s", a, reason)
	}
	return &ForbiddenError{Addr: addr, Reason: reason}
}

// allowed reports whether the allow-list lets addr through. A cloud
// metadata address (or an IPv6 form embedding one) is let through only by an
// entry naming exactly that address, such as 169.254.169.254/32: a range such
// as 169.254.0.0/16, allowed for link-local services, must not silently hand
// out the instance's credentials.
func (g *Guard) allowed(addr netip.Addr) bool {
	if g == nil {
		return false
	}
	if _, meta := metadataTarget(addr); meta {
		for _, p := range g.allow {
			if p.IsSingleIP() && p.Addr() == addr {
				return true
			}
		}
		return false
	}
	for _, p := range g.allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ParseAllowList parses a comma-separated list of CIDR prefixes, the format
// of HERALD_ALLOW_NETWORKS. Spaces around entries and empty entries are
// ignored; a bare IP address stands for itself alone (/32 or /128). Host
// bits are cleared, and IPv4-mapped prefixes become IPv4 prefixes as in New.
// An empty string gives an empty list.
func ParseAllowList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		p, err := parseEntry(entry)
		if err != nil {
			return nil, fmt.Errorf("allow-list entry %q: %w", entry, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseEntry(entry string) (netip.Prefix, error) {
	if !strings.Contains(entry, "/") {
		addr, err := netip.ParseAddr(entry)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an IP address or CIDR prefix: %w", err)
		}
		if addr.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("zoned address not allowed")
		}
		return normalizePrefix(netip.PrefixFrom(addr, addr.BitLen())), nil
	}
	p, err := netip.ParsePrefix(entry)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not a CIDR prefix: %w", err)
	}
	return normalizePrefix(p), nil
}

func normalizePrefix(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}
