package server

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/sandboxd/sandboxd/executor"
)

// usageHeader is the sandboxd-usage value: the bytes json.Marshal writes
// for u, appended by hand (json.Marshal's reflection was 1.4% of the
// served path's CPU under wrk, bench-serve -cpuprofile). A value
// json.Marshal refuses (NaN, ±Inf) goes through it, so the header is what
// it always was: empty.
func usageHeader(u *executor.Usage) string {
	var buf [96]byte
	b := append(buf[:0], `{"cpuMs":`...)
	var ok bool
	if b, ok = appendJSONFloat(b, u.CPUMs); !ok {
		return marshalUsage(u)
	}
	b = append(b, `,"wallMs":`...)
	if b, ok = appendJSONFloat(b, u.WallMs); !ok {
		return marshalUsage(u)
	}
	b = append(b, `,"peakMemMB":`...)
	if b, ok = appendJSONFloat(b, u.PeakMemMB); !ok {
		return marshalUsage(u)
	}
	if u.Fuel != 0 {
		b = append(b, `,"fuel":`...)
		b = strconv.AppendInt(b, u.Fuel, 10)
	}
	b = append(b, '}')
	return string(b)
}

func marshalUsage(u *executor.Usage) string {
	b, _ := json.Marshal(u)
	return string(b)
}

// appendJSONFloat appends f as encoding/json writes a float64: the
// shortest representation, in exponent form below 1e-6 and from 1e21 on
// (with a one-digit negative exponent unpadded). ok is false for NaN and
// ±Inf, which encoding/json refuses.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
