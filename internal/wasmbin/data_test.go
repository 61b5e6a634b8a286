package wasmbin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Hand-built modules. sec encodes a section, vec a vector of entries.
func sec(id byte, body ...[]byte) []byte {
	b := bytes.Join(body, nil)
	return append(append([]byte{id}, AppendULEB(nil, uint64(len(b)))...), b...)
}

func vec(entries ...[]byte) []byte {
	return append(AppendULEB(nil, uint64(len(entries))), bytes.Join(entries, nil)...)
}

func module(sections ...[]byte) []byte {
	return append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Join(sections, nil)...)
}

func str(s string) []byte { return append(AppendULEB(nil, uint64(len(s))), s...) }

// active is an active segment of memory 0 at i32.const off.
func active(off int64, data string) []byte {
	b := append([]byte{0, 0x41}, AppendSLEB(nil, off)...)
	return append(append(b, 0x0b), str(data)...)
}

var (
	typeSec    = sec(secType, vec([]byte{0x60, 0, 0}))                        // type 0: () -> ()
	funcSec    = sec(secFunction, vec([]byte{0}))                             // func 0: type 0
	codeSec    = sec(secCode, vec([]byte{2, 0, 0x0b}))                        // func 0: nop
	memSec     = sec(secMemory, vec([]byte{0, 1}))                            // memory 0: 1 page
	exportSec  = sec(secExport, vec(append(str("f"), 0, 0)))                  // export "f" = func 0
	nameSec    = sec(secCustom, str("name"), []byte{1}, str("\x01\x00\x01f")) // func 0 is "f"
	dataSec3   = sec(secData, vec(active(5000, "ghi"), active(0, "abc"), active(100, "def")))
	simpleData = module(typeSec, funcSec, memSec, exportSec, codeSec, dataSec3, nameSec)
)

func TestPassiveDataHandBuilt(t *testing.T) {
	out, name := PassiveData(simpleData)
	if name != DataInitExport {
		t.Fatalf("PassiveData did not apply to %x", simpleData)
	}
	// "abc"@0 and "def"@100 merge; "ghi"@5000 is 4897 bytes past them.
	p, ok := readDataPlan(out, false)
	if ok {
		t.Fatalf("the rewritten module still has active segments: %+v", p.segs)
	}
	if n := dataCount(t, out); n != 2 {
		t.Errorf("rewritten module has %d segments, want 2", n)
	}
	if !bytes.HasSuffix(out, nameSec) {
		t.Errorf("the name section was not kept as it was")
	}
	sameMemory(t, simpleData, out, name)
	merged := MergeData(simpleData)
	if n := dataCount(t, merged); n != 2 {
		t.Errorf("merged module has %d segments, want 2", n)
	}
	sameMemory(t, simpleData, merged, "")
	// A second pass finds nothing to do.
	if again, name := PassiveData(out); name != "" || !bytes.Equal(again, out) {
		t.Errorf("PassiveData applied to its own output")
	}
	if again := MergeData(merged); !bytes.Equal(again, merged) {
		t.Errorf("MergeData changed its own output")
	}
	// A segment naming memory 0 explicitly (flag 2) is active in it too.
	explicit := module(memSec, sec(secData, vec([]byte{2, 0, 0x41, 3, 0x0b, 1, 'a'}, active(9, "b"))))
	out, name = PassiveData(explicit)
	if name == "" {
		t.Fatal("PassiveData did not apply to a segment with an explicit memory 0")
	}
	sameMemory(t, explicit, out, name)
	// A module with data but no type, function, export or code section gets
	// all four, in order (wazero rejects misordered sections).
	bare := module(memSec, sec(secData, vec(active(7, "x"))))
	out, name = PassiveData(bare)
	if name == "" {
		t.Fatal("PassiveData did not apply to a module with no functions")
	}
	sameMemory(t, bare, out, name)
	// A data count section (bulk memory on) with code that names no
	// segment: the segments are merged and the count rewritten.
	counted := module(typeSec, funcSec, memSec, exportSec, sec(secDataCount, []byte{3}),
		sec(secCode, vec([]byte{11, 0, 0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 11, 0, 0x0b})), // memory.fill
		dataSec3)
	out, name = PassiveData(counted)
	if name == "" {
		t.Fatal("PassiveData did not apply to a module with a data count section and no memory.init")
	}
	if n := dataCount(t, out); n != 2 {
		t.Errorf("rewritten module has %d segments, want 2", n)
	}
	sameMemory(t, counted, out, name)
	merged = MergeData(counted)
	if n := dataCount(t, merged); n != 2 {
		t.Errorf("merged module has %d segments, want 2", n)
	}
	sameMemory(t, counted, merged, "")
}

// Each module breaks one of PassiveData's conditions; it must come back
// unchanged.
func TestPassiveDataDoesNotApply(t *testing.T) {
	imported := sec(secImport, vec(append(append(str("env"), str("mem")...), 2, 0, 1)))
	global := sec(6, vec([]byte{0x7f, 0, 0x41, 0, 0x0b})) // (global i32 (i32.const 0))
	cases := map[string][]byte{
		"overlap":       module(memSec, sec(secData, vec(active(0, "abcd"), active(2, "xy")))),
		"out of bounds": module(memSec, sec(secData, vec(active(65534, "abcd")))),
		"negative":      module(memSec, sec(secData, vec(active(-1, "a")))),
		"global offset": module(memSec, global, sec(secData, vec([]byte{0, 0x23, 0, 0x0b, 1, 'a'}))),
		"passive":       module(memSec, sec(secData, vec(active(0, "a"), append([]byte{1}, str("b")...)))),
		"data count, memory.init": module(typeSec, funcSec, memSec, sec(secDataCount, []byte{1}),
			sec(secCode, vec([]byte{12, 0, 0x41, 0, 0x41, 0, 0x41, 1, 0xfc, 8, 0, 0, 0x0b})), sec(secData, vec(active(0, "a")))),
		"data count, data.drop": module(typeSec, funcSec, memSec, sec(secDataCount, []byte{1}),
			sec(secCode, vec([]byte{4, 0, 0xfc, 9, 0, 0x0b})), sec(secData, vec(active(0, "a")))),
		"data count, padded data.drop": module(typeSec, funcSec, memSec, sec(secDataCount, []byte{1}),
			sec(secCode, vec([]byte{5, 0, 0xfc, 0x89, 0, 0, 0x0b})), sec(secData, vec(active(0, "a")))),
		"data count, unreadable code": module(typeSec, funcSec, memSec, sec(secDataCount, []byte{1}),
			sec(secCode, vec([]byte{2, 0, 0xff})), sec(secData, vec(active(0, "a")))),
		"data count differs": module(memSec, sec(secDataCount, []byte{2}), sec(secData, vec(active(0, "a")))),
		"imported mem":       module(imported, sec(secData, vec(active(0, "a")))),
		"no memory":          module(typeSec),
		"no data":            module(memSec),
		"empty data":         module(memSec, sec(secData, vec())),
		"start":              module(typeSec, funcSec, memSec, sec(secStart, []byte{0}), codeSec, dataSec3),
		"export taken":       module(typeSec, funcSec, memSec, sec(secExport, vec(append(str(DataInitExport), 0, 0))), codeSec, dataSec3),
		"memory index 1":     module(memSec, sec(secData, vec([]byte{2, 1, 0x41, 0, 0x0b, 1, 'a'}))),
		"two memories":       module(sec(secMemory, vec([]byte{0, 1}, []byte{0, 1})), sec(secData, vec(active(0, "a")))),
		"shared memory":      module(sec(secMemory, vec([]byte{3, 1, 1})), sec(secData, vec(active(0, "a")))),
		"64-bit memory":      module(sec(secMemory, vec([]byte{4, 1})), sec(secData, vec(active(0, "a")))),
		"code mismatch":      module(typeSec, funcSec, memSec, dataSec3),
		"trailing bytes":     module(memSec, sec(secData, vec(active(0, "a")), []byte{0})),
		"truncated":          simpleData[:len(simpleData)-3],
		"misordered":         module(memSec, typeSec, sec(secData, vec(active(0, "a")))),
		"not wasm":           []byte("hello, world"),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if out, export := PassiveData(b); export != "" || !bytes.Equal(out, b) {
				t.Errorf("PassiveData rewrote it (export %q)", export)
			}
			switch name {
			case "code mismatch": // wazero refuses it; MergeData need not
				_ = MergeData(b)
				return
			case "start", "export taken":
				// Merging alone keeps segments active: a start function
				// sees the same memory, no function is added.
				if out := MergeData(b); bytes.Equal(out, b) {
					t.Errorf("MergeData did not merge a module with a start function")
				} else {
					sameMemory(t, b, out, "")
				}
				return
			}
			if out := MergeData(b); !bytes.Equal(out, b) {
				t.Errorf("MergeData rewrote it")
			}
		})
	}
}

// Many tiny segments spread MaxDataGap apart: merging stops filling gaps
// once it has added the segments' size plus maxFillSlack in zeros.
func TestMergeDataFillBounded(t *testing.T) {
	const n = 2000
	var segs [][]byte
	for i := range n {
		segs = append(segs, active(int64(i*(MaxDataGap+1)), "x"))
	}
	b := module(sec(secMemory, vec(AppendULEB([]byte{0}, 200))), sec(secData, vec(segs...)))
	out := MergeData(b)
	if len(out) > len(b)+n+maxFillSlack+MaxDataGap {
		t.Fatalf("merged module is %d bytes (from %d)", len(out), len(b))
	}
	if got := dataCount(t, out); got < 2 || got >= n {
		t.Fatalf("%d segments after merging, want fewer than %d but more than one", got, n)
	}
	t.Logf("%d segments of 1 byte, %d bytes → %d segments, %d bytes", n, len(b), dataCount(t, out), len(out))
	sameMemory(t, b, out, "")
}

// Every committed fixture: where the rewrite applies, instantiating the
// rewritten module (and calling the export) leaves memory exactly as
// instantiating the original does; where it does not, the bytes come back.
func TestPassiveDataFixtures(t *testing.T) {
	applied := map[string]bool{}
	for name, b := range dataFixtures(t) {
		t.Run(name, func(t *testing.T) {
			out, export := PassiveData(b)
			merged := MergeData(b)
			if export == "" {
				if !bytes.Equal(out, b) {
					t.Fatal("PassiveData did not apply but changed the bytes")
				}
			} else {
				applied[name] = true
				if !sameCustomSections(b, out) {
					t.Error("custom sections differ")
				}
				sameMemory(t, b, out, export)
			}
			if !bytes.Equal(merged, b) {
				sameMemory(t, b, merged, "")
			}
			if export != "" || !bytes.Equal(merged, b) {
				t.Logf("%d segments, %d bytes → passive %d segments, %d bytes; merged %d bytes", dataCount(t, b), len(b), dataCount(t, out), len(out), len(merged))
			}
		})
	}
	// The Go guests are what the rewrite is for: it must apply to them.
	required := []string{"go_echo_reactor.wasm", "counter.wasm"}
	if !testing.Short() {
		required = append(required, "go_echo_command.wasm", "counter_reactor.wasm", "http_fetch_reactor.wasm")
	}
	for _, name := range required {
		if !applied[name] {
			t.Errorf("PassiveData did not apply to %s", name)
		}
	}
}

// The JS PDK's QuickJS plug-ins (wizer-initialised) carry 10,000 active
// segments and a data count section their code never uses: the rewrite
// applies, and instantiating the result leaves memory as the original
// does. The Haskell PDK's two segments (no data count) are merged too.
func TestPassiveDataExtismPDK(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 2 MB modules")
	}
	for name, want := range map[string]uint64{"hello-from-js.wasm": 10000, "hello-from-haskell.wasm": 2} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile("../../testdata/wasm/extism/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if n := dataCount(t, b); n != want {
				t.Fatalf("%d segments, want %d", n, want)
			}
			out, export := PassiveData(b)
			if export == "" {
				t.Fatal("PassiveData did not apply")
			}
			if !sameCustomSections(b, out) {
				t.Error("custom sections differ")
			}
			sameMemory(t, b, out, export)
			merged := MergeData(b)
			sameMemory(t, b, merged, "")
			t.Logf("%d segments, %d bytes → passive %d segments, %d bytes; merged %d segments", want, len(b), dataCount(t, out), len(out), dataCount(t, merged))
			// What the executor rewrites: the fuel pass's output.
			metered, err := fuelInstrumentHook(b)
			if err != nil {
				t.Fatalf("the fuel pass refused it: %v", err)
			}
			out, export = PassiveData(metered)
			if export == "" {
				t.Fatal("PassiveData did not apply to the fuel pass's output")
			}
			sameMemory(t, metered, out, export)
		})
	}
}

// What the executor rewrites is the fuel pass's output: the same holds
// for every fixture the pass accepts (of the standard-Go builds, which
// TestPassiveDataFixtures checks as built, only go_echo_reactor: each takes
// seconds, more under -race).
func TestPassiveDataMetered(t *testing.T) {
	applied := 0
	for name, b := range dataFixtures(t) {
		if len(b) > 1<<20 && name != "go_echo_reactor.wasm" {
			continue
		}
		metered, err := fuelInstrumentHook(b)
		if err != nil {
			continue // refused by the pass: the executor does not rewrite it
		}
		t.Run(name, func(t *testing.T) {
			out, export := PassiveData(metered)
			if export == "" {
				if !bytes.Equal(out, metered) {
					t.Fatal("PassiveData did not apply but changed the bytes")
				}
				return
			}
			applied++
			sameMemory(t, metered, out, export)
		})
	}
	if applied < 3 {
		t.Fatalf("PassiveData applied to %d metered fixtures", applied)
	}
}

// dataFixtures returns the committed fixtures (fixtures), under -short
// without the guests over 1 MiB (standard-Go builds: seconds each in the
// interpreter) but go_echo_reactor.wasm.
func dataFixtures(t *testing.T) map[string][]byte {
	fx := fixtures(t)
	if len(fx) < 10 {
		t.Fatalf("found %d fixtures in testdata/wasm", len(fx))
	}
	for name, b := range fx {
		if testing.Short() && len(b) > 1<<20 && name != "go_echo_reactor.wasm" {
			delete(fx, name)
		}
	}
	return fx
}

// dataCount returns the number of data segments of b.
func dataCount(t testing.TB, b []byte) uint64 {
	t.Helper()
	r := &Reader{b: b, off: 8}
	for r.off < len(b) {
		id, _ := r.Byte()
		size, err := r.ULEB(32)
		if err != nil {
			t.Fatal(err)
		}
		if id == secData {
			n, _ := r.ULEB(32)
			return n
		}
		r.off += int(size)
	}
	return 0
}

// sameCustomSections reports whether a and b hold the same custom sections
// in the same order, byte for byte.
func sameCustomSections(a, b []byte) bool {
	customs := func(m []byte) [][]byte {
		var out [][]byte
		r := &Reader{b: m, off: 8}
		for r.off < len(m) {
			start := r.off
			id, _ := r.Byte()
			size, err := r.ULEB(32)
			if err != nil || size > uint64(len(m)-r.off) {
				return nil
			}
			r.off += int(size)
			if id == secCustom {
				out = append(out, m[start:r.off])
			}
		}
		return out
	}
	ca, cb := customs(a), customs(b)
	if len(ca) != len(cb) {
		return false
	}
	for i := range ca {
		if !bytes.Equal(ca[i], cb[i]) {
			return false
		}
	}
	return true
}

// sameMemory instantiates orig and rewritten (calling init on the latter
// when set) and fails t unless their memories are byte for byte equal.
func sameMemory(t testing.TB, orig, rewritten []byte, init string) {
	t.Helper()
	want, err := memoryAfterInstantiation(orig, "")
	if err != nil {
		t.Fatalf("original: %v", err)
	}
	got, err := memoryAfterInstantiation(rewritten, init)
	if err != nil {
		t.Fatalf("rewritten: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("memory is %d bytes, want %d", len(got), len(want))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("memory differs first at %d: %#x, want %#x", i, got[i], want[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// memoryAfterInstantiation instantiates b, its imported functions stubbed
// (they trap if called: nothing here calls them), without running _start,
// calls init when set, and returns a copy of its memory.
func memoryAfterInstantiation(b []byte, init string) ([]byte, error) {
	// The committed Go fixtures take seconds in wazero's interpreter under
	// -race on a loaded machine (CI: 5 s was passed once): only a fuzzed
	// start function needs a short bound.
	return memoryAfterInstantiationLimited(b, init, 65536, 2*time.Minute)
}

// memoryAfterInstantiationLimited is memoryAfterInstantiation refusing
// modules whose memory passes maxPages pages or whose tables pass a million
// elements (the fuzz test's bound: wazero allocates both when it
// instantiates).
func memoryAfterInstantiationLimited(b []byte, init string, maxPages uint32, timeout time.Duration) ([]byte, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	for _, tl := range m.Tables {
		if tl.Min > 1<<20 {
			return nil, fmt.Errorf("a table of %d elements", tl.Min)
		}
	}
	// A start function may loop forever: a fuzzed one would hang the test.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(api.CoreFeaturesV2).
		WithMemoryLimitPages(maxPages).WithCloseOnContextDone(true))
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, b)
	if err != nil {
		return nil, err
	}
	if err := fuelHostModuleHook(ctx, r); err != nil { // for metered modules
		return nil, err
	}
	if err := stubImports(ctx, r, cm); err != nil {
		return nil, err
	}
	mod, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithStartFunctions().WithName(""))
	if err != nil {
		return nil, err
	}
	if init != "" {
		f := mod.ExportedFunction(init)
		if f == nil {
			return nil, fmt.Errorf("no export %q", init)
		}
		if _, err := f.Call(ctx); err != nil {
			return nil, err
		}
	}
	mem := mod.Memory()
	if mem == nil || reflect.ValueOf(mem).IsNil() { // wazero returns a typed nil
		return nil, nil
	}
	contents, _ := mem.Read(0, mem.Size())
	return bytes.Clone(contents), nil
}

func FuzzPassiveData(f *testing.F) {
	f.Add(simpleData)
	f.Add(module(memSec, sec(secData, vec(active(7, "x")))))
	f.Add(module(memSec, sec(secData, vec(active(0, "abcd"), active(2, "xy")))))
	f.Add(module(typeSec, funcSec, memSec, sec(secStart, []byte{0}), codeSec, dataSec3))
	for _, name := range []string{"echo_reactor.wasm", "counter.wasm", "oob.wasm"} {
		if b, err := os.ReadFile("../../testdata/wasm/" + name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, export := PassiveData(b)
		merged := MergeData(b)
		if export == "" && !bytes.Equal(out, b) {
			t.Fatal("PassiveData did not apply but changed the bytes")
		}
		// wazero's decoder trusts vector counts (a data section claiming
		// 2^32 segments makes it allocate 180 GB, a type 2^31 params 26 GB):
		// instantiate only what passes the checks that come before wazero
		// in the executor, the compile budget and the fuel pass.
		if len(b) > 1<<16 || CheckBudget(b, DefaultBudget) != nil {
			return
		}
		if _, err := fuelInstrumentHook(b); err != nil {
			return
		}
		// Whatever wazero accepts and instantiates, the rewritten module
		// reproduces.
		want, err := memoryAfterInstantiationLimited(b, "", 64, 5*time.Second)
		if err != nil {
			return
		}
		for _, c := range []struct {
			b    []byte
			init string
		}{{out, export}, {merged, ""}} {
			got, err := memoryAfterInstantiationLimited(c.b, c.init, 64, 5*time.Second)
			if err != nil {
				t.Fatalf("the original instantiates, the rewritten module does not: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("memory differs (first at %d)", firstDiff(got, want))
			}
		}
	})
}

// stubImports instantiates in r a host module for every module cm imports
// functions from, each function trapping when called.
func stubImports(ctx context.Context, r wazero.Runtime, cm wazero.CompiledModule) error {
	hosts := map[string]wazero.HostModuleBuilder{}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if r.Module(mod) != nil {
			continue // instantiated already (the fuel host module)
		}
		h, ok := hosts[mod]
		if !ok {
			h = r.NewHostModuleBuilder(mod)
			hosts[mod] = h
		}
		h.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {
			panic("stub import called")
		}), f.ParamTypes(), f.ResultTypes()).Export(name)
	}
	for _, h := range hosts {
		if _, err := h.Instantiate(ctx); err != nil {
			return err
		}
	}
	return nil
}

func TestExportsFunction(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		name string
		want bool
	}{
		{simpleData, "f", true},
		{simpleData, "g", false},
		{module(memSec, sec(secExport, vec(append(str("f"), 2, 0)))), "f", false}, // a memory
		{module(memSec, []byte{secExport, 5, 1, 1, 'f'}), "f", false},             // truncated
		{[]byte("junk"), "f", false},
	} {
		if got := ExportsFunction(c.b, c.name); got != c.want {
			t.Errorf("ExportsFunction(%x, %q) = %v", c.b, c.name, got)
		}
	}
	out, _ := PassiveData(simpleData)
	if !ExportsFunction(out, DataInitExport) || !ExportsFunction(out, "f") {
		t.Error("the rewritten module does not export both functions")
	}
}

// A guest can reach the init function: `call 1` in a module of one function
// is invalid, but names the function PassiveData appends. The data.drop
// after each memory.init makes every call after the first trap, so the
// unmetered copy happens at most once per instance.
func TestPassiveDataInitRunsOnce(t *testing.T) {
	callsNext := sec(secCode, vec([]byte{4, 0, 0x10, 1, 0x0b})) // func 0: call 1
	b := module(typeSec, funcSec, memSec, exportSec, callsNext, dataSec3)
	out, export := PassiveData(b)
	if export == "" {
		t.Fatal("PassiveData did not apply")
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(api.CoreFeaturesV2))
	defer r.Close(ctx)
	if _, err := r.CompileModule(ctx, b); err == nil {
		t.Fatal("wazero compiled the original, whose call names no function")
	}
	cm, err := r.CompileModule(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, hostInits := range []bool{true, false} {
		mod, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			t.Fatal(err)
		}
		if hostInits {
			if _, err := mod.ExportedFunction(export).Call(ctx); err != nil {
				t.Fatal(err)
			}
		} else if _, err := mod.ExportedFunction("f").Call(ctx); err != nil {
			// An instance from an image: the first call copies.
			t.Fatalf("the first call of the init function: %v", err)
		}
		if got, _ := mod.Memory().Read(0, 3); string(got) != "abc" {
			t.Fatalf("memory at 0 = %q after the init function", got)
		}
		for _, name := range []string{"f", export} {
			if _, err := mod.ExportedFunction(name).Call(ctx); err == nil || !strings.Contains(err.Error(), "out of bounds") {
				t.Fatalf("hostInits %v: calling %s again: %v, want an out of bounds trap", hostInits, name, err)
			}
		}
		_ = mod.Close(ctx)
	}
}
