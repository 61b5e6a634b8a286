package fuel

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// statsRecord is the stored form of Stats: the pass version that produced
// it and every field, so a cache of instrumented modules can keep the
// pass's verdict (Resettable above all) beside the module it describes
// instead of looking for exports in the module.
type statsRecord struct {
	Pass  int   `json:"pass"`
	Stats Stats `json:"stats"`
}

// MarshalStats returns the stored form of st: JSON of the pass Version and
// every field of st.
func MarshalStats(st *Stats) ([]byte, error) {
	return json.Marshal(statsRecord{Pass: Version, Stats: *st})
}

// UnmarshalStats reads what MarshalStats wrote. It refuses a record of
// another pass version (the module beside it was instrumented by another
// pass: re-instrument) and anything that is not such a record: a cache
// treats either as a miss.
func UnmarshalStats(b []byte) (*Stats, error) {
	var rec struct {
		Pass  *int            `json:"pass"`
		Stats json.RawMessage `json:"stats"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("fuel stats: %w", err)
	}
	if rec.Pass == nil || *rec.Pass != Version || len(rec.Stats) == 0 {
		return nil, fmt.Errorf("fuel stats: not a record of pass version %d", Version)
	}
	st := &Stats{}
	dec := json.NewDecoder(bytes.NewReader(rec.Stats))
	dec.DisallowUnknownFields()
	if err := dec.Decode(st); err != nil {
		return nil, fmt.Errorf("fuel stats: %w", err)
	}
	return st, nil
}
