package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Host is a normalised destination host: either a DNS name (lower-case ASCII,
// IDNA A-labels, no trailing dot) or an IP address (IPv4-mapped IPv6 kept as
// written, so that classification sees it).
type Host struct {
	Name string     // set for a DNS name
	IP   netip.Addr // set for an IP literal
}

// IsIP reports whether h is an IP literal.
func (h Host) IsIP() bool { return h.IP.IsValid() }

// String returns the host as it goes in a URL authority (IPv6 bracketed).
func (h Host) String() string {
	if h.IP.IsValid() {
		if h.IP.Is6() {
			return "[" + h.IP.String() + "]"
		}
		return h.IP.String()
	}
	return h.Name
}

// Limits of DNS names (RFC 1035).
const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// ParseHost normalises a URL host (without port): an IPv6 literal in
// brackets, an IPv4 literal in any spelling a resolver would accept
// (decimal, octal, hex, fewer than four parts — WHATWG URL host parsing),
// or a DNS name, which UTS #46 ToASCII maps to lower-case A-labels
// (hostProfile) and which is stripped of one trailing dot. It refuses empty names, zones, and characters
// outside letters, digits, '-' and '_'.
func ParseHost(s string) (Host, error) {
	if s == "" {
		return Host{}, errors.New("empty host")
	}
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return Host{}, errors.New("unterminated IPv6 literal")
		}
		ip, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !ip.Is6() {
			return Host{}, fmt.Errorf("invalid IPv6 literal %q", s)
		}
		if ip.Zone() != "" {
			return Host{}, errors.New("IPv6 zones are not allowed")
		}
		return Host{IP: ip}, nil
	}
	if strings.ContainsRune(s, ':') {
		return Host{}, fmt.Errorf("invalid host %q (IPv6 literals go in brackets)", s)
	}
	name, err := normalizeName(s)
	if err != nil {
		return Host{}, err
	}
	if endsInNumber(name) {
		ip, ok := parseIPv4Loose(name)
		if !ok {
			return Host{}, fmt.Errorf("invalid IPv4 literal %q", s)
		}
		return Host{IP: ip}, nil
	}
	return Host{Name: name}, nil
}

// hostProfile is UTS #46 ToASCII (golang.org/x/net/idna) with the lookup
// profile's processing: nontransitional (ß, ς, ZWJ and ZWNJ kept, as in
// IDNA2008), the UTS #46 mapping (case folding, compatibility forms, the
// ideographic and full-width dots as label separators, default ignorables
// such as U+00AD and U+200B removed), disallowed code points refused,
// CheckBidi, CheckJoiners, and xn-- labels decoded and checked to be what
// the mapping would produce. Two ASCII rules of idna.Lookup are off, as
// WHATWG URL host parsing has them: UseSTD3ASCIIRules (normalizeName checks
// the ASCII itself and keeps '_', as in "_dmarc.example.com") and
// CheckHyphens ("r3---sn-abc.googlevideo.com" is a real host name).
var hostProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
)

// normalizeName applies UTS #46 ToASCII (hostProfile), strips one trailing
// dot (a mapped one too: "example.com\u3002") and checks what remains:
// labels non-empty, of letters, digits, '-' and '_', at most 63 bytes, the
// name at most 253.
func normalizeName(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("host is not valid UTF-8")
	}
	if s == "" || s == "." {
		return "", errors.New("empty host")
	}
	out, err := hostProfile.ToASCII(s)
	if err != nil {
		return "", fmt.Errorf("host %q is not a valid internationalised domain name (UTS #46): %s", s, strings.TrimPrefix(err.Error(), "idna: "))
	}
	out = strings.TrimSuffix(out, ".")
	if out == "" {
		return "", errors.New("empty host")
	}
	for l := range strings.SplitSeq(out, ".") {
		if l == "" {
			return "", fmt.Errorf("empty label in host %q", s)
		}
		for j := 0; j < len(l); j++ {
			if !isLDH(l[j]) {
				return "", fmt.Errorf("invalid character %q in host", l[j])
			}
		}
		if len(l) > maxLabelLen {
			return "", fmt.Errorf("host label longer than %d bytes", maxLabelLen)
		}
	}
	if len(out) > maxNameLen {
		return "", fmt.Errorf("host longer than %d bytes", maxNameLen)
	}
	return out, nil
}

func isLDH(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// endsInNumber reports whether the last label is numeric (decimal digits
// or 0x-hex): WHATWG's test for "this host must be an IPv4 address".
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if allDigits(last) {
		return true
	}
	if strings.HasPrefix(last, "0x") {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// parseIPv4Loose parses an IPv4 address as inet_aton and WHATWG do: one to
// four parts, each decimal, octal (leading 0) or hex (0x); the last part
// fills the remaining bytes.
func parseIPv4Loose(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x"):
			base, p = 16, p[2:]
			if p == "" {
				p = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		if p == "" || len(p) > 32 {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, base, 64)
		if err != nil {
			return netip.Addr{}, false
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false
	}
	v := last
	for i, n := range nums[:len(nums)-1] {
		v |= n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}
