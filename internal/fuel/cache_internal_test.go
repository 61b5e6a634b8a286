package fuel

import (
	"crypto/sha256"
	"testing"
)

// A disk entry reads back as written, only for the input and pass version
// it was written for, and not at all once any byte of it changed.
func TestFuelEntryRoundTrip(t *testing.T) {
	key := fuelKey{sha256.Sum256([]byte("module")), Version}
	out := []byte("\x00asm\x01\x00\x00\x00metered-module-bytes")
	st := &Stats{Resettable: true, TableElems: 12, Functions: 3}
	entry, err := encodeFuelEntry(key, out, st, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, v, ok := decodeFuelEntry(key, entry)
	if !ok || string(got) != string(out) || v != (Verdict{Resettable: true, Globals: 2, TableElems: 12}) {
		t.Fatalf("round trip: ok %v, %q, %+v", ok, got, v)
	}
	if _, _, ok := decodeFuelEntry(fuelKey{sha256.Sum256([]byte("other")), Version}, entry); ok {
		t.Fatal("an entry was accepted for another input")
	}
	if _, _, ok := decodeFuelEntry(fuelKey{key.digest, Version + 1}, entry); ok {
		t.Fatal("an entry was accepted for another pass version")
	}
	for i := range entry {
		b := append([]byte(nil), entry...)
		b[i] ^= 1
		if _, _, ok := decodeFuelEntry(key, b); ok {
			t.Fatalf("an entry with byte %d flipped was accepted", i)
		}
		if _, _, ok := decodeFuelEntry(key, entry[:i]); ok {
			t.Fatalf("an entry truncated to %d bytes was accepted", i)
		}
	}
	// A non-resettable verdict never carries snapshot globals.
	bad, _ := encodeFuelEntry(key, out, &Stats{}, 1)
	if _, _, ok := decodeFuelEntry(key, bad); ok {
		t.Fatal("a non-resettable entry with snapshot globals was accepted")
	}
}
