package wasmbin

import (
	"errors"
	"testing"
	"time"
)

// loopPhiModule builds the F16 compile bomb: a reactor whose function 0
// declares n i32 locals and, inside depth nested loops, updates every local
// from two others (local_i = local_(i+1)%n + local_(7i)%n). depth 1 is the
// red team's loopphi shape; depth > 1 is its nested variant.
func loopPhiModule(n, depth int) []byte {
	uleb := func(b []byte, v uint64) []byte { return AppendULEB(b, v) }
	section := func(b []byte, id byte, body []byte) []byte {
		b = append(b, id)
		b = uleb(b, uint64(len(body)))
		return append(b, body...)
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = section(m, 1, []byte{2, 0x60, 0, 0, 0x60, 0, 1, 0x7f}) // () -> (), () -> (i32)
	m = section(m, 3, []byte{2, 0, 1})
	m = section(m, 5, []byte{1, 0, 1})
	exp := []byte{2, 6}
	exp = append(exp, "memory"...)
	exp = append(exp, 2, 0, 6)
	exp = append(exp, "handle"...)
	exp = append(exp, 0, 1)
	m = section(m, 7, exp)
	body := uleb([]byte{1}, uint64(n))
	body = append(body, 0x7f)
	for d := 0; d < depth; d++ {
		body = append(body, 0x03, 0x40)
	}
	for i := 0; i < n; i++ {
		body = append(body, 0x20)
		body = uleb(body, uint64((i+1)%n))
		body = append(body, 0x20)
		body = uleb(body, uint64((i*7)%n))
		body = append(body, 0x6a, 0x21)
		body = uleb(body, uint64(i))
	}
	for d := 0; d < depth; d++ {
		body = append(body, 0x20)
		body = uleb(body, uint64(d%n))
		body = append(body, 0x0d, 0, 0x0b)
	}
	body = append(body, 0x0b)
	code := []byte{2}
	code = uleb(code, uint64(len(body)))
	code = append(code, body...)
	code = append(code, 4, 0, 0x41, 0, 0x0b)
	return section(m, 10, code)
}

// TestF16CompileBomb: the red team's compile bombs (F16: 340 KB took 4 s,
// 1.1 MB 56 s to compile) and the nested-loop variant (a 13 KB module that
// took 5.3 s) are over DefaultBudget, found in milliseconds, and the error
// names the function and the limit. Every fixture of the repository,
// including the Go guests, is within it.
func TestF16CompileBomb(t *testing.T) {
	for _, tc := range []struct {
		name         string
		n, depth     int
		limit        string
		wantRefusal  bool
		wantCarried  uint64
		maxCheckTime time.Duration
	}{
		{"loopphi3k", 3000, 1, "", false, 3000, time.Second},
		{"loopphi30k", 30000, 1, "values carried around loops", true, 30000, time.Second},
		{"loopphi90k", 90000, 1, "locals", true, 90000, time.Second},
		{"loopphi15k", 15000, 1, "", false, 15000, time.Second},
		{"nested1kx500", 1000, 500, "values carried around loops", true, 500000, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := loopPhiModule(tc.n, tc.depth)
			start := time.Now()
			err := CheckBudget(b, DefaultBudget)
			el := time.Since(start)
			shapes, serr := Shapes(b)
			if serr != nil {
				t.Fatal(serr)
			}
			s := shapes[0]
			t.Logf("%s: %d bytes, locals %d, loops %d, carried %d, weight %.2e: checked in %v: %v", tc.name, len(b), s.Locals, s.Loops, s.Carried, float64(s.Weight), el, err)
			if s.Carried != tc.wantCarried {
				t.Errorf("carried = %d, want %d", s.Carried, tc.wantCarried)
			}
			if el > tc.maxCheckTime {
				t.Errorf("the check took %v", el)
			}
			if !tc.wantRefusal {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var be *BudgetError
			if !errors.As(err, &be) || !errors.Is(err, ErrOverBudget) {
				t.Fatalf("err = %v, want a *BudgetError", err)
			}
			if be.Func != 0 || be.Limit != tc.limit || be.Value <= be.Max {
				t.Fatalf("BudgetError = %+v, want function 0 over %q", be, tc.limit)
			}
		})
	}
	for name, b := range fixtures(t) {
		if err := CheckBudget(b, DefaultBudget); err != nil {
			t.Errorf("fixture %s refused: %v", name, err)
		}
	}
}

// Module-wide limits catch many functions each under the per-function ones.
func TestCheckBudgetModuleTotals(t *testing.T) {
	b := loopPhiModule(3000, 1)
	bu := DefaultBudget
	bu.MaxModuleCarriedSq = 3000*3000 - 1
	var be *BudgetError
	if err := CheckBudget(b, bu); !errors.As(err, &be) || be.Limit != "carried values squared in total" {
		t.Fatalf("err = %v", err)
	}
	if got := be.Error(); got == "" || be.Func != 0 {
		t.Fatalf("message %q", got)
	}
	bu = DefaultBudget
	bu.MaxModuleWeight = 1
	if err := CheckBudget(b, bu); !errors.As(err, &be) || be.Limit != "loop weight in total" {
		t.Fatalf("err = %v", err)
	}
	bu = DefaultBudget
	bu.MaxCodeBytes = 10
	if err := CheckBudget(b, bu); !errors.As(err, &be) || be.Limit != "code bytes" {
		t.Fatalf("err = %v", err)
	}
}

// CheckBudget never panics and stays linear on malformed input.
func FuzzCheckBudget(f *testing.F) {
	f.Add(loopPhiModule(10, 2))
	f.Add(tableModule)
	for _, b := range fixtures(f) {
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = CheckBudget(b, DefaultBudget)
		_, _ = Shapes(b)
	})
}
