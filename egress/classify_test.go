package egress

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		ip   string
		want Class
	}{
		{"8.8.8.8", ClassPublic},
		{"1.1.1.1", ClassPublic},
		{"2606:4700:4700::1111", ClassPublic},
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassUnspecified},
		{"::", ClassUnspecified},
		{"127.0.0.1", ClassLoopback},
		{"127.255.255.254", ClassLoopback},
		{"::1", ClassLoopback},
		{"10.0.0.1", ClassPrivate},
		{"172.16.0.1", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"172.32.0.1", ClassPublic},
		{"192.168.1.1", ClassPrivate},
		{"fc00::1", ClassPrivate},
		{"fd12:3456::1", ClassPrivate},
		{"169.254.0.1", ClassLinkLocal},
		{"fe80::1", ClassLinkLocal},
		{"169.254.169.254", ClassMetadata},
		{"100.100.100.200", ClassMetadata},
		{"fd00:ec2::254", ClassMetadata},
		{"100.64.0.1", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"100.128.0.1", ClassPublic},
		{"224.0.0.1", ClassMulticast},
		{"239.255.255.250", ClassMulticast},
		{"ff02::1", ClassMulticast},
		{"255.255.255.255", ClassBroadcast},
		{"240.0.0.1", ClassReserved},
		{"198.18.0.1", ClassReserved},
		{"192.0.2.1", ClassReserved},
		{"2001:db8::1", ClassReserved},
		{"fec0::1", ClassReserved},
		// IPv4-mapped forms classify as the embedded address.
		{"::ffff:127.0.0.1", ClassLoopback},
		{"::ffff:169.254.169.254", ClassMetadata},
		{"::ffff:10.0.0.1", ClassPrivate},
		{"::ffff:0.0.0.0", ClassUnspecified},
		{"::ffff:8.8.8.8", ClassPublic},
		// NAT64 (64:ff9b::/96) embeds the IPv4 in the last 32 bits.
		{"64:ff9b::a00:1", ClassPrivate},
		{"64:ff9b::7f00:1", ClassLoopback},
		{"64:ff9b::a9fe:a9fe", ClassMetadata},
		{"64:ff9b::808:808", ClassPublic},
		{"64:ff9b:1::1", ClassTranslated},
		// 6to4 and IPv4-compatible forms.
		{"2002:7f00:1::1", ClassLoopback},
		{"2002:a9fe:a9fe::", ClassMetadata},
		{"::127.0.0.1", ClassLoopback},
		{"::10.0.0.1", ClassPrivate},
		// Teredo hides its address: denied outright.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", ClassTranslated},
	}
	for _, c := range cases {
		if got := Classify(netip.MustParseAddr(c.ip)); got != c.want {
			t.Errorf("Classify(%s) = %q, want %q", c.ip, got, c.want)
		}
	}
}

func TestAddressAllowedExemptions(t *testing.T) {
	pol, _ := ParsePolicy("allowlist", []string{"api.example.com", "10.1.0.0/16", "[fd00::5]"})
	s := NewSession(pol, Options{AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	defer s.Close()
	cases := []struct {
		ip   string
		want bool
	}{
		{"93.184.216.34", true},
		{"10.1.2.3", true},  // named by a CIDR entry
		{"10.2.0.1", false}, // private, not named
		{"::ffff:10.1.2.3", true},
		{"fd00::5", true},
		{"fd00::6", false},
		{"127.0.0.1", true}, // operator allow-range
		{"::ffff:127.0.0.1", true},
		{"64:ff9b::7f00:1", false}, // NAT64 form is not inside 127.0.0.0/8
		{"169.254.169.254", false},
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"224.0.0.1", false},
	}
	for _, c := range cases {
		ip := netip.MustParseAddr(c.ip)
		// The entry that matched the destination: for an IP literal the IP
		// or CIDR entry naming it; for a name, the name entry (which never
		// exempts an address).
		entry, _ := pol.Match(Origin{Scheme: "https", Host: Host{IP: ip}, Port: 443})
		if _, got := s.AddressAllowed(entry, ip); got != c.want {
			t.Errorf("AddressAllowed(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
}
