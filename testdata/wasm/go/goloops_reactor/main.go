// goloops_reactor is the corpus of standard-Go loop shapes that the fuel
// pass is measured on (internal/fuel BenchmarkGoLoopShapes, the bench
// suite's Go-loop shape table): a GOOS=wasip1 reactor whose export
// run(shape, n) runs loop shape number shape for about n iterations and
// returns a checksum, so that a plain and a metered instance can be checked
// to compute the same thing. Each shape is a way Go code loops that the Go
// compiler lowers differently: a loop in a small //go:noinline function, in
// a //go:wasmexport function (loop_export), around a call, over a slice, a
// map, a string's runes, nested, in a closure, in a method, around a switch,
// around a call that defers and recovers, around an interface call, and
// around append. The guest never calls the host inside a loop.
package main

import "unicode/utf8"

func main() {}

// Shape numbers (the host's table lists the same names in this order).
const (
	shapeNoinline = iota
	shapeCall
	shapeRangeSlice
	shapeRangeMap
	shapeNested
	shapeClosure
	shapeMethod
	shapeSwitch
	shapeRunes
	shapeDeferRecover
	shapeInterface
	shapeAppend
	shapeGlobal
)

//go:wasmexport run
func run(shape int32, n int64) int64 {
	switch shape {
	case shapeNoinline:
		return noinlineLoop(n)
	case shapeCall:
		return callLoop(n)
	case shapeRangeSlice:
		return rangeSlice(n)
	case shapeRangeMap:
		return rangeMap(n)
	case shapeNested:
		return nested(n)
	case shapeClosure:
		return closureLoop(n)
	case shapeMethod:
		a := &acc{mul: 3}
		a.loop(n)
		return a.sum
	case shapeSwitch:
		return switchLoop(n)
	case shapeRunes:
		return runes(n)
	case shapeDeferRecover:
		return deferRecover(n)
	case shapeInterface:
		return ifaceLoop(n)
	case shapeAppend:
		return appendLoop(n)
	case shapeGlobal:
		return globalLoop(n)
	}
	return -1
}

// loop_export is a tight loop written directly in a //go:wasmexport
// function.
//
//go:wasmexport loop_export
func loopExport(n int64) int64 {
	var s int64
	for i := int64(0); i < n; i++ {
		s += i ^ (s >> 3)
	}
	return s
}

//go:noinline
func noinlineLoop(n int64) int64 {
	var s int64
	for i := int64(0); i < n; i++ {
		s += i*7 ^ s>>5
	}
	return s
}

//go:noinline
func step(s, i int64) int64 { return s + i*i ^ s>>7 }

func callLoop(n int64) int64 {
	var s int64
	for i := int64(0); i < n; i++ {
		s = step(s, i)
	}
	return s
}

var slice = func() []int64 {
	x := make([]int64, 1024)
	for i := range x {
		x[i] = int64(i * 2654435761 % 1000)
	}
	return x
}()

//go:noinline
func rangeSlice(n int64) int64 {
	var s int64
	for r := int64(0); r < n/int64(len(slice)); r++ {
		for _, v := range slice {
			s += v ^ r
		}
	}
	return s
}

var table = func() map[int64]int64 {
	m := make(map[int64]int64, 64)
	for i := int64(0); i < 64; i++ {
		m[i*31] = i
	}
	return m
}()

//go:noinline
func rangeMap(n int64) int64 {
	var s int64
	for r := int64(0); r < n/int64(len(table)); r++ {
		for k, v := range table {
			s += k*v ^ r // order-independent: a sum of terms
		}
	}
	return s
}

//go:noinline
func nested(n int64) int64 {
	var s int64
	const inner = 100
	for i := int64(0); i < n/inner; i++ {
		for j := int64(0); j < inner; j++ {
			s += i*j ^ s>>9
		}
	}
	return s
}

//go:noinline
func closureLoop(n int64) int64 {
	k := n & 7
	f := func(n int64) int64 {
		var s int64
		for i := int64(0); i < n; i++ {
			s += i + k ^ s>>4
		}
		return s
	}
	return call(f, n)
}

//go:noinline
func call(f func(int64) int64, n int64) int64 { return f(n) }

type acc struct {
	sum, mul int64
}

//go:noinline
func (a *acc) loop(n int64) {
	for i := int64(0); i < n; i++ {
		a.sum += i*a.mul ^ a.sum>>6
	}
}

//go:noinline
func switchLoop(n int64) int64 {
	var s int64
	for i := int64(0); i < n; i++ {
		switch i & 3 {
		case 0:
			s += i
		case 1:
			s ^= i
		case 2:
			s -= i >> 1
		default:
			s = s*3 + 1
		}
	}
	return s
}

const text = "héllo, wörld — ünïcödé ☃ text with some ascii and some 日本語 runes. "

//go:noinline
func runes(n int64) int64 {
	var s int64
	per := int64(utf8.RuneCountInString(text))
	for r := int64(0); r < n/per; r++ {
		for i, c := range text {
			s += int64(c) ^ int64(i)
		}
	}
	return s
}

//go:noinline
func deferRecover(n int64) int64 {
	var s int64
	for i := int64(0); i < n; i++ {
		s += guarded(i)
	}
	return s
}

// guarded defers a recover, and panics on one call in 1024.
func guarded(i int64) (v int64) {
	defer func() {
		if recover() != nil {
			v = -1
		}
	}()
	if i&1023 == 1023 {
		panic("boom")
	}
	return i & 15
}

type stepper interface{ step(int64) int64 }

type addStep struct{ k int64 }

func (a addStep) step(s int64) int64 { return s + a.k ^ s>>3 }

type mulStep struct{ k int64 }

func (m mulStep) step(s int64) int64 { return s*m.k + 1 }

var steppers = []stepper{addStep{3}, mulStep{5}}

//go:noinline
func ifaceLoop(n int64) int64 {
	var s int64
	st := steppers[n&1]
	for i := int64(0); i < n; i++ {
		s = st.step(s)
	}
	return s
}

//go:noinline
func appendLoop(n int64) int64 {
	var s int64
	const per = 4096
	for r := int64(0); r < n/per; r++ {
		var x []int32
		for i := int32(0); i < per; i++ {
			x = append(x, i^int32(r))
		}
		s += int64(x[len(x)-1]) + int64(len(x))
	}
	return s
}

var spins int64

//go:noinline
func globalLoop(n int64) int64 {
	spins = 0
	for i := int64(0); i < n; i++ {
		spins++
	}
	return spins
}
