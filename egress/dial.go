package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// dial resolves the host once, classifies every address, and connects only
// to an address that passed.
func (s *Session) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ref, _ := ctx.Value(attemptKey{}).(attemptRef)
	setReason := func(r string) {
		if ref.s != nil {
			ref.s.update(ref.idx, func(a *Attempt) { a.Allowed, a.Reason = false, r })
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, newErr(ReasonInternal, "dial address %q: %v", addr, err)
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = s.opts.Resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			setReason("DNS lookup failed")
			return nil, &Error{Reason: ReasonUnavailable, Msg: fmt.Sprintf("cannot resolve %s", host), Err: err}
		}
		if len(addrs) > 16 {
			addrs = addrs[:16]
		}
	}
	var passed []netip.Addr
	var denied []string
	for _, ip := range addrs {
		if c, ok := s.AddressAllowed(ref.entry, ip); ok {
			passed = append(passed, ip)
		} else {
			denied = append(denied, ip.String()+" ("+string(c)+")")
		}
	}
	if len(passed) == 0 {
		r := fmt.Sprintf("%s resolves only to denied addresses: %s", host, strings.Join(denied, ", "))
		if len(addrs) == 0 {
			r = fmt.Sprintf("%s has no addresses", host)
		}
		setReason(r)
		return nil, newErr(ReasonDenied, "%s", r)
	}
	var lastErr error
	for _, ip := range passed {
		target := net.JoinHostPort(ip.Unmap().WithZone("").String(), port)
		conn, err := s.opts.Dial(ctx, network, target)
		if err == nil {
			if ref.s != nil {
				ref.s.update(ref.idx, func(a *Attempt) { a.Allowed, a.Address = true, target })
			}
			return conn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	setReason("connect failed")
	return nil, lastErr
}

// AddressAllowed reports whether the session may connect to ip for a
// destination that entry admitted (Policy.Match): a public address, or one
// that entry itself names (an IP or CIDR entry, so only for that entry's
// scheme and port, never for a name another entry admits), or one inside an
// operator allow-range. It returns the address class either way.
func (s *Session) AddressAllowed(entry Entry, ip netip.Addr) (Class, bool) {
	c := Classify(ip)
	if c == ClassPublic {
		return c, true
	}
	if entry.namesAddress(ip) {
		return c, true
	}
	for _, p := range s.opts.AllowRanges {
		if p.Contains(ip) || p.Contains(ip.Unmap()) {
			return c, true
		}
	}
	return c, false
}
