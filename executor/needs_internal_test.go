package executor

import "testing"

// A call without env, config or secrets gets the key needsDigest makes for
// it (made once, not per call); any value gives another key.
func TestWarmKeyWithoutNeeds(t *testing.T) {
	r := &reactorHandler{idle: newWarmSet(1)}
	empty := needsDigest(map[string]string{}, map[string][]byte{}, map[string]string{})
	for _, inv := range []*invocation{{}, {config: map[string][]byte{}, secrets: map[string]string{}}} {
		if got := r.warmKey(noEnv, inv); got != empty {
			t.Fatalf("warmKey of a call without needs = %x, want %x", got, empty)
		}
	}
	if got := r.warmKey(nil, &invocation{secrets: map[string]string{"k": ""}}); got == empty {
		t.Fatal("a secret did not change the key")
	}
	if got := r.warmKey(map[string]string{"E": "1"}, &invocation{}); got == empty {
		t.Fatal("an env value did not change the key")
	}
	if allocs := testing.AllocsPerRun(100, func() { r.warmKey(noEnv, &invocation{}) }); allocs > 0 {
		t.Fatalf("%.0f allocations for a call without needs", allocs)
	}
	if (&reactorHandler{}).warmKey(noEnv, &invocation{}) != (needsKey{}) {
		t.Fatal("a tool without warm instances got a key")
	}
}
