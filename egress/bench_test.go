package egress

import (
	"net/netip"
	"testing"
)

func BenchmarkParseURL(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseURL("https://API.Example.com./v1/items?q=1"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPolicyMatch(b *testing.B) {
	pol, err := ParsePolicy("allowlist", []string{"a.example.org", "*.example.net", "10.0.0.0/8", "https://api.example.com:8443", "*.example.com"})
	if err != nil {
		b.Fatal(err)
	}
	_, o, _ := ParseURL("https://deep.api.example.com/x")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := pol.Match(o); !ok {
			b.Fatal("no match")
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	ips := []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("64:ff9b::a00:1"), netip.MustParseAddr("2606:4700::1111")}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = Classify(ips[i%len(ips)])
	}
}
