package egress

import "net/netip"

// Class names an address range that egress denies by default.
type Class string

// The denied address classes. Public addresses have the class "".
const (
	ClassPublic      Class = ""
	ClassUnspecified Class = "unspecified"     // 0.0.0.0/8, ::
	ClassLoopback    Class = "loopback"        // 127.0.0.0/8, ::1
	ClassPrivate     Class = "private"         // RFC 1918, ULA fc00::/7
	ClassLinkLocal   Class = "link-local"      // 169.254.0.0/16, fe80::/10
	ClassMetadata    Class = "cloud-metadata"  // 169.254.169.254, fd00:ec2::254, 100.100.100.200
	ClassCGNAT       Class = "cgnat"           // 100.64.0.0/10
	ClassMulticast   Class = "multicast"       // 224.0.0.0/4, ff00::/8
	ClassBroadcast   Class = "broadcast"       // 255.255.255.255
	ClassReserved    Class = "reserved"        // 240.0.0.0/4, benchmarking, documentation, IETF, site-local, discard
	ClassTranslated  Class = "translated-form" // an IPv6 form hiding an address that cannot be checked (Teredo, local-use NAT64)
)

type rangeClass struct {
	p netip.Prefix
	c Class
}

// Order matters: the first match wins, so specific ranges come first.
var deniedRanges = func() []rangeClass {
	def := []struct {
		cidr string
		c    Class
	}{
		{"169.254.169.254/32", ClassMetadata},
		{"100.100.100.200/32", ClassMetadata}, // Alibaba Cloud metadata (inside CGNAT)
		{"fd00:ec2::254/128", ClassMetadata},  // AWS IMDS over IPv6 (inside ULA)
		{"0.0.0.0/8", ClassUnspecified},
		{"10.0.0.0/8", ClassPrivate},
		{"100.64.0.0/10", ClassCGNAT},
		{"127.0.0.0/8", ClassLoopback},
		{"169.254.0.0/16", ClassLinkLocal},
		{"172.16.0.0/12", ClassPrivate},
		{"192.0.0.0/24", ClassReserved},
		{"192.0.2.0/24", ClassReserved},
		{"192.88.99.0/24", ClassReserved},
		{"192.168.0.0/16", ClassPrivate},
		{"198.18.0.0/15", ClassReserved},
		{"198.51.100.0/24", ClassReserved},
		{"203.0.113.0/24", ClassReserved},
		{"224.0.0.0/4", ClassMulticast},
		{"255.255.255.255/32", ClassBroadcast},
		{"240.0.0.0/4", ClassReserved},
		{"::/128", ClassUnspecified},
		{"::1/128", ClassLoopback},
		{"64:ff9b:1::/48", ClassTranslated},
		{"100::/64", ClassReserved},
		{"2001::/32", ClassTranslated},
		{"2001:db8::/32", ClassReserved},
		{"fc00::/7", ClassPrivate},
		{"fe80::/10", ClassLinkLocal},
		{"fec0::/10", ClassReserved},
		{"ff00::/8", ClassMulticast},
	}
	out := make([]rangeClass, len(def))
	for i, d := range def {
		out[i] = rangeClass{netip.MustParsePrefix(d.cidr), d.c}
	}
	return out
}()

var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	v4Compatible = netip.MustParsePrefix("::/96")
)

// Classify returns the class of ip, ClassPublic for an address egress may
// reach by default. IPv6 forms that embed an IPv4 address — IPv4-mapped
// (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and
// 6to4 (2002::/16) — are classified by the embedded address; Teredo and
// local-use NAT64, whose embedded address is obfuscated or site-specific,
// are denied outright.
func Classify(ip netip.Addr) Class {
	ip = ip.WithZone("")
	if v4, ok := embeddedV4(ip); ok {
		if c := Classify(v4); c != ClassPublic {
			return c
		}
		if ip.Is4In6() {
			return ClassPublic
		}
	}
	for _, r := range deniedRanges {
		if r.p.Contains(ip) {
			return r.c
		}
	}
	if !ip.IsValid() || !ip.IsGlobalUnicast() && !ip.Is4() {
		return ClassReserved
	}
	return ClassPublic
}

// embeddedV4 returns the IPv4 address inside an IPv6 translation form.
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	if ip.Is4In6() {
		return ip.Unmap(), true
	}
	b := ip.As16()
	switch {
	case nat64Prefix.Contains(ip):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case v4Compatible.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	}
	return netip.Addr{}, false
}
