package egress

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

// FuzzRequest drives a whole request — method, URL, one header — through a
// session whose resolver answers public and private addresses and whose
// dialer never connects. Whatever the input: no panic, an ABI error number
// from the table, and every dialled address passed classification.
func FuzzRequest(f *testing.F) {
	f.Add("GET", "http://api.example.com/x", "Accept", "application/json")
	f.Add("POST", "http://0x7f.1/", "X-A", "b\r\nc")
	f.Add("get", "http://[::ffff:169.254.169.254]/", "Host", "x")
	f.Add("PUT", "https://u@api.example.com/", "Authorization", "{{secret:T}}")
	f.Add("DELETE", "http://private.example:8080/", "X", "{{secret:")
	valid := map[Reason]bool{}
	for _, e := range Reasons() {
		valid[e] = true
	}
	dns := map[string][][]string{
		"api.example.com":       {{"93.184.216.34"}},
		"private.example":       {{"10.0.0.1", "fd00::1"}},
		"mixed.api.example.com": {{"127.0.0.1", "93.184.216.35"}},
	}
	pols := []*Policy{}
	for _, p := range []struct {
		kind  string
		hosts []string
	}{{"unrestricted", nil}, {"allowlist", []string{"*.example.com:*", "api.example.com", "10.0.0.0/8"}}} {
		pol, err := ParsePolicy(p.kind, p.hosts)
		if err != nil {
			f.Fatal(err)
		}
		pols = append(pols, pol)
	}
	f.Fuzz(func(t *testing.T, method, rawURL, hname, hvalue string) {
		for _, pol := range pols {
			pn := newPipeNet(t, okHandler())
			s := NewSession(pol, Options{Resolver: &fakeResolver{answers: dns}, Dial: pn.Dial,
				Secret: func(n string) (string, bool) { return "v", n == "T" }})
			resp, err := s.Do(context.Background(), &Request{Method: method, URL: rawURL, Header: map[string]string{hname: hvalue}})
			if err != nil {
				if e := ReasonOf(err); !valid[e] {
					t.Fatalf("reason %q is not in the reason table (%v)", e, err)
				}
			} else {
				_ = resp.Close()
			}
			for _, d := range pn.Dialed() {
				host := d[:strings.LastIndexByte(d, ':')]
				ip, perr := netip.ParseAddr(strings.Trim(host, "[]"))
				if perr != nil {
					t.Fatalf("dialled %q, not an IP", d)
				}
				if !allowedForSomeEntry(s, pol, ip) {
					t.Fatalf("dialled %s, which is denied", d)
				}
			}
			s.Close()
		}
	})
}

// allowedForSomeEntry reports whether any entry of pol (or none) would let s
// connect to ip: an upper bound of what a dial may reach.
func allowedForSomeEntry(s *Session, pol *Policy, ip netip.Addr) bool {
	if _, ok := s.AddressAllowed(Entry{}, ip); ok {
		return true
	}
	for _, e := range pol.Entries() {
		if _, ok := s.AddressAllowed(e, ip); ok {
			return true
		}
	}
	return false
}
