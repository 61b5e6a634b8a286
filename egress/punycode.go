package egress

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Punycode (RFC 3492) parameters.
const (
	pcBase        = 36
	pcTMin        = 1
	pcTMax        = 26
	pcSkew        = 38
	pcDamp        = 700
	pcInitialBias = 72
	pcInitialN    = 128
)

var errPunycode = errors.New("punycode overflow")

func pcAdapt(delta, numPoints int32, first bool) int32 {
	if first {
		delta /= pcDamp
	} else {
		delta /= 2
	}
	delta += delta / numPoints
	k := int32(0)
	for delta > ((pcBase-pcTMin)*pcTMax)/2 {
		delta /= pcBase - pcTMin
		k += pcBase
	}
	return k + (pcBase-pcTMin+1)*delta/(delta+pcSkew)
}

func pcDigit(d int32) byte {
	if d < 26 {
		return byte('a' + d)
	}
	return byte('0' + d - 26)
}

// punycodeEncode encodes one label (RFC 3492 section 6.3), without the
// "xn--" prefix.
func punycodeEncode(s string) (string, error) {
	var out strings.Builder
	runes := []rune(s)
	basic := int32(0)
	for _, r := range runes {
		if r < 0x80 {
			out.WriteByte(byte(r))
			basic++
		}
	}
	h := basic
	if basic > 0 {
		out.WriteByte('-')
	}
	n, delta, bias := int32(pcInitialN), int32(0), int32(pcInitialBias)
	for h < int32(len(runes)) {
		m := int32(utf8.MaxRune + 1)
		for _, r := range runes {
			if r >= n && r < m {
				m = r
			}
		}
		if (m - n) > (1<<31-1-delta)/(h+1) {
			return "", errPunycode
		}
		delta += (m - n) * (h + 1)
		n = m
		for _, r := range runes {
			if r < n {
				delta++
				if delta < 0 {
					return "", errPunycode
				}
			}
			if r != n {
				continue
			}
			q := delta
			for k := int32(pcBase); ; k += pcBase {
				t := k - bias
				if t < pcTMin {
					t = pcTMin
				} else if t > pcTMax {
					t = pcTMax
				}
				if q < t {
					break
				}
				out.WriteByte(pcDigit(t + (q-t)%(pcBase-t)))
				q = (q - t) / (pcBase - t)
			}
			out.WriteByte(pcDigit(q))
			bias = pcAdapt(delta, h+1, h == basic)
			delta = 0
			h++
		}
		delta++
		n++
	}
	return out.String(), nil
}
