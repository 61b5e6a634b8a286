package egress

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Kind is a network policy kind (the manifest's network.kind).
type Kind string

// The policy kinds.
const (
	KindNone         Kind = "none"
	KindAllowlist    Kind = "allowlist"
	KindUnrestricted Kind = "unrestricted"
)

// schemes an entry allows.
type schemeSet uint8

const (
	schemeHTTP schemeSet = 1 << iota
	schemeHTTPS
)

// Port values of an Entry besides an explicit port.
const (
	portDefault = 0  // the scheme's default port
	portAny     = -1 // ":*"
)

// Entry is one parsed allowlist entry: `[scheme://]host[:port]` where host
// is a DNS name, `*.` + name (subdomains only, never the apex), an IPv4 or
// IPv6 literal, or a CIDR.
type Entry struct {
	raw      string
	schemes  schemeSet
	name     string // DNS name (the base name for a wildcard)
	wildcard bool
	prefix   netip.Prefix // IP literal (a single-address prefix) or CIDR
	port     int
}

// String returns the entry as written in the manifest.
func (e Entry) String() string { return e.raw }

// namesAddress reports whether the entry is an IP literal or CIDR covering ip.
func (e Entry) namesAddress(ip netip.Addr) bool {
	if !e.prefix.IsValid() {
		return false
	}
	return e.prefix.Contains(ip) || e.prefix.Contains(ip.Unmap())
}

// EntryError is a network.hosts entry that does not parse.
type EntryError struct {
	Index  int    // position in network.hosts; -1 for a lone ParseEntry
	Entry  string // the entry as written
	Reason string
}

func (e *EntryError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("network.hosts[%d] %q: %s", e.Index, e.Entry, e.Reason)
	}
	return fmt.Sprintf("network entry %q: %s", e.Entry, e.Reason)
}

// ParseEntry parses one allowlist entry. Matching is case-insensitive and
// trailing-dot and IDNA normalised; userinfo, paths, queries, fragments,
// schemes other than http and https, a bare "*" and a wildcard over a single
// label ("*.com") are refused.
func ParseEntry(s string) (Entry, error) {
	e, reason := parseEntry(s)
	if reason != "" {
		return Entry{}, &EntryError{Index: -1, Entry: s, Reason: reason}
	}
	return e, nil
}

func parseEntry(s string) (Entry, string) {
	e := Entry{raw: s, schemes: schemeHTTP | schemeHTTPS}
	if s == "" {
		return e, "empty entry"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return e, "contains whitespace or a control character"
		}
	}
	rest := s
	if i := strings.Index(rest, "://"); i >= 0 {
		switch strings.ToLower(rest[:i]) {
		case "http":
			e.schemes = schemeHTTP
		case "https":
			e.schemes = schemeHTTPS
		default:
			return e, fmt.Sprintf("scheme %q is not http or https", rest[:i])
		}
		rest = rest[i+3:]
	}
	if strings.ContainsAny(rest, "@") {
		return e, "userinfo is not allowed"
	}
	if strings.ContainsAny(rest, "?#\\") {
		return e, "an entry is [scheme://]host[:port]: no path, query or fragment"
	}
	hostPart, portPart := rest, ""
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return e, "unterminated IPv6 literal"
		}
		hostPart, portPart = rest[1:end], rest[end+1:]
		if portPart != "" && !strings.HasPrefix(portPart, ":") {
			return e, "unexpected text after the IPv6 literal"
		}
		portPart = strings.TrimPrefix(portPart, ":")
		if portPart == "" && strings.HasSuffix(rest, ":") {
			return e, "empty port"
		}
		return e.finishIP(hostPart, portPart, true)
	}
	// A bare IPv6 address or CIDR (no brackets, so no port).
	if strings.Count(rest, ":") > 1 {
		return e.finishIP(rest, "", true)
	}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		hostPart, portPart = rest[:i], rest[i+1:]
		if portPart == "" {
			return e, "empty port"
		}
	}
	if before, after, ok := strings.Cut(hostPart, "/"); ok {
		if _, isIP := strictIPv4(before); !isIP || after == "" || strings.Trim(after, "0123456789") != "" {
			return e, fmt.Sprintf("an entry is [scheme://]host[:port], with no path (%q); a CIDR is a.b.c.d/n", "/"+after)
		}
		return e.finishIP(hostPart, portPart, false)
	}
	if err := e.setPort(portPart); err != "" {
		return e, err
	}
	if hostPart == "" {
		return e, "empty host"
	}
	if hostPart == "*" || hostPart == "*." {
		return e, "a bare wildcard is not allowed; use network kind \"unrestricted\""
	}
	if strings.HasPrefix(hostPart, "*.") {
		e.wildcard = true
		hostPart = hostPart[2:]
	}
	if strings.Contains(hostPart, "*") {
		return e, "a wildcard is allowed only as the first label (\"*.example.com\")"
	}
	if ip, ok := strictIPv4(hostPart); ok {
		if e.wildcard {
			return e, "a wildcard cannot precede an IP address"
		}
		e.prefix = netip.PrefixFrom(ip, 32)
		return e, ""
	}
	h, err := ParseHost(hostPart)
	if err != nil {
		return e, err.Error()
	}
	if h.IsIP() {
		return e, "IPv4 addresses in entries must be written in dotted decimal (a.b.c.d)"
	}
	if e.wildcard && !strings.Contains(h.Name, ".") {
		return e, "a wildcard over a single label is too broad"
	}
	e.name = h.Name
	return e, ""
}

func (e Entry) finishIP(hostPart, portPart string, v6 bool) (Entry, string) {
	if err := e.setPort(portPart); err != "" {
		return e, err
	}
	if strings.Contains(hostPart, "/") {
		p, err := netip.ParsePrefix(hostPart)
		if err != nil || (v6 && !p.Addr().Is6()) || (!v6 && !p.Addr().Is4()) {
			return e, "invalid CIDR"
		}
		if p.Addr().Zone() != "" {
			return e, "IPv6 zones are not allowed"
		}
		e.prefix = unmapPrefix(p.Masked())
		return e, ""
	}
	ip, err := netip.ParseAddr(hostPart)
	if err != nil || !ip.Is6() {
		return e, "invalid IPv6 address"
	}
	if ip.Zone() != "" {
		return e, "IPv6 zones are not allowed"
	}
	e.prefix = unmapPrefix(netip.PrefixFrom(ip, 128))
	return e, ""
}

// unmapPrefix writes an IPv4-mapped prefix (::ffff:a.b.c.d/N, N >= 96) as
// the IPv4 prefix it covers, so both spellings name the same addresses.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

func (e *Entry) setPort(p string) string {
	switch {
	case p == "":
		e.port = portDefault
	case p == "*":
		e.port = portAny
	default:
		if !allDigits(p) || len(p) > 5 {
			return fmt.Sprintf("invalid port %q", p)
		}
		n, _ := strconv.Atoi(p)
		if n < 1 || n > 65535 {
			return fmt.Sprintf("port %d out of range", n)
		}
		e.port = n
	}
	return ""
}

// strictIPv4 parses a canonical dotted-decimal IPv4 address.
func strictIPv4(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, false
	}
	return ip, true
}

// Policy is a parsed network policy. It is immutable and safe for
// concurrent use.
type Policy struct {
	kind    Kind
	entries []Entry
}

// Kind returns the policy kind.
func (p *Policy) Kind() Kind { return p.kind }

// Entries returns the allowlist entries (a copy).
func (p *Policy) Entries() []Entry { return append([]Entry(nil), p.entries...) }

// ParsePolicy parses a manifest network policy. kind "" means "none" (the
// default when the manifest has no network). Any invalid entry is an
// *EntryError naming it.
func ParsePolicy(kind string, hosts []string) (*Policy, error) {
	p := &Policy{kind: Kind(kind)}
	switch p.kind {
	case "":
		p.kind = KindNone
	case KindNone, KindUnrestricted:
	case KindAllowlist:
		for i, h := range hosts {
			e, reason := parseEntry(h)
			if reason != "" {
				return nil, &EntryError{Index: i, Entry: h, Reason: reason}
			}
			p.entries = append(p.entries, e)
		}
	default:
		return nil, fmt.Errorf("unknown network kind %q", kind)
	}
	return p, nil
}

// Origin is the policy-relevant part of a destination URL.
type Origin struct {
	Scheme string // "http" or "https"
	Host   Host
	Port   int // explicit or the scheme's default
	// portGiven records whether the URL spelled the port.
	portGiven bool
}

func (o Origin) String() string {
	return o.Scheme + "://" + o.Host.String() + ":" + strconv.Itoa(o.Port)
}

// Same reports whether two origins are the same (scheme, host, port).
func (o Origin) Same(p Origin) bool {
	return o.Scheme == p.Scheme && o.Host == p.Host && o.Port == p.Port
}

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

// MaxURLLen caps the length of a request URL.
const MaxURLLen = 8 << 10

// ParseURL parses and normalises an absolute http or https URL for egress:
// the host is normalised as ParseHost does and written back into the URL,
// userinfo ("http://allowed@evil") is refused, the fragment is dropped.
func ParseURL(raw string) (*url.URL, Origin, error) {
	if len(raw) > MaxURLLen {
		return nil, Origin{}, fmt.Errorf("URL longer than %d bytes", MaxURLLen)
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c == 0x7f {
			return nil, Origin{}, fmt.Errorf("URL contains whitespace or a control character")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, Origin{}, fmt.Errorf("invalid URL: %v", stripURLFromErr(err))
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return nil, Origin{}, fmt.Errorf("URL scheme %q is not http or https", u.Scheme)
	}
	if u.User != nil || strings.Contains(u.Host, "@") {
		return nil, Origin{}, fmt.Errorf("URLs with userinfo are refused")
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, Origin{}, fmt.Errorf("URL has no host")
	}
	hostPart, portPart := u.Host, ""
	if i := strings.LastIndexByte(u.Host, ':'); i >= 0 && !strings.HasSuffix(u.Host, "]") {
		hostPart, portPart = u.Host[:i], u.Host[i+1:]
	}
	h, err := ParseHost(hostPart)
	if err != nil {
		return nil, Origin{}, err
	}
	o := Origin{Scheme: scheme, Host: h, Port: defaultPort(scheme)}
	if portPart != "" {
		if !allDigits(portPart) || len(portPart) > 5 {
			return nil, Origin{}, fmt.Errorf("invalid port %q", portPart)
		}
		n, _ := strconv.Atoi(portPart)
		if n < 1 || n > 65535 {
			return nil, Origin{}, fmt.Errorf("port %d out of range", n)
		}
		o.Port, o.portGiven = n, true
	} else if strings.HasSuffix(u.Host, ":") {
		return nil, Origin{}, fmt.Errorf("empty port")
	}
	u.Scheme = scheme
	u.Host = h.String()
	if o.portGiven {
		u.Host += ":" + strconv.Itoa(o.Port)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, o, nil
}

func stripURLFromErr(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// Match returns the allowlist entry that admits o. For "unrestricted" it
// returns the zero Entry and true; for "none" false.
func (p *Policy) Match(o Origin) (Entry, bool) {
	switch p.kind {
	case KindUnrestricted:
		return Entry{raw: "unrestricted"}, true
	case KindAllowlist:
		for _, e := range p.entries {
			if e.matches(o) {
				return e, true
			}
		}
	}
	return Entry{}, false
}

// Matches reports whether the entry admits origin o (scheme, host and port).
func (e Entry) Matches(o Origin) bool { return e.matches(o) }

func (e Entry) matches(o Origin) bool {
	switch o.Scheme {
	case "http":
		if e.schemes&schemeHTTP == 0 {
			return false
		}
	case "https":
		if e.schemes&schemeHTTPS == 0 {
			return false
		}
	default:
		return false
	}
	switch e.port {
	case portAny:
	case portDefault:
		if o.Port != defaultPort(o.Scheme) {
			return false
		}
	default:
		if o.Port != e.port {
			return false
		}
	}
	if o.Host.IsIP() {
		return e.namesAddress(o.Host.IP)
	}
	if e.name == "" {
		return false
	}
	if e.wildcard {
		return strings.HasSuffix(o.Host.Name, "."+e.name)
	}
	return o.Host.Name == e.name
}

// namesAddress reports whether any IP or CIDR entry of the policy names ip.
// It is not a permission: a denied-class address is admitted only by the
// entry that matched the destination (Session.AddressAllowed).
func (p *Policy) namesAddress(ip netip.Addr) bool {
	for _, e := range p.entries {
		if e.namesAddress(ip) {
			return true
		}
	}
	return false
}
