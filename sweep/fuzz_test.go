package sweep

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParse: no body makes Parse panic or answer anything but a spec or a
// *FieldError, and a spec it accepts expands within the limits into
// members whose params are JSON objects /api/train accepts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"seedCount":3}`,
		`{"base":{"params":{"lr":1,"seed":9}},"grid":{"lr":[0.1,0.2],"b":["x"]},"seeds":[1,2]}`,
		`{"random":{"lr":{"dist":"loguniform","min":1e-5,"max":1},"n":{"dist":"int","min":1,"max":3},"c":{"dist":"choice","values":[1,"a",[2]]}},"samples":3}`,
		`{"grid":{"seed":[1]},"seeds":[1]}`,
		`{"grid":{"a":[1,1.0]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := Parse(body)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Message == "" {
				t.Fatalf("Parse(%q): %T %v, want a *FieldError", body, err, err)
			}
			return
		}
		if s.Size() < 1 || s.Size() > MaxMembers {
			t.Fatalf("Parse(%q): %d members", body, s.Size())
		}
		ms := s.Members()
		if len(ms) != s.Size() {
			t.Fatalf("Parse(%q): %d members expanded, Size %d", body, len(ms), s.Size())
		}
		for _, m := range ms {
			var p map[string]json.RawMessage
			if err := json.Unmarshal(m.Params, &p); err != nil || len(m.Params) > MaxMemberParamsBytes {
				t.Fatalf("Parse(%q): member params %q: %v", body, m.Params, err)
			}
			for k := range p {
				if !ValidParamName(k) {
					t.Fatalf("Parse(%q): member param name %q", body, k)
				}
			}
			if _, err := GroupKey(m.Params); err != nil {
				t.Fatalf("Parse(%q): GroupKey(%s): %v", body, m.Params, err)
			}
		}
	})
}
