package sweep

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/internal/clip"
)

func TestParse_Failure(t *testing.T) {
	f := func(body, wantField, wantIn string) {
		t.Helper()
		s, err := Parse([]byte(body))
		body = clip.String(body, 200)
		if err == nil {
			t.Errorf("Parse(%s): no error, %d members; want one naming %q", body, s.Size(), wantField)
			return
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("Parse(%s): %T %v, want a *FieldError", body, err, err)
			return
		}
		if fe.Field != wantField {
			t.Errorf("Parse(%s): field %q (%v), want %q", body, fe.Field, err, wantField)
		}
		if !strings.Contains(err.Error(), wantIn) {
			t.Errorf("Parse(%s): %q lacks %q", body, err, wantIn)
		}
		if wantField != "" && !strings.HasPrefix(err.Error(), wantField+": ") {
			t.Errorf("Parse(%s): %q does not start with the field", body, err)
		}
	}
	ints := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprint(i)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}

	// Not a spec at all.
	f(``, "", "JSON object")
	f(`[]`, "", "JSON object")
	f(`{"grid":`, "", "JSON object")
	f(`"grid"`, "", "JSON object")

	// Nothing to sweep over.
	f(`{}`, "grid", "at least one")
	f(`{"base":{"algorithm":"PPO"},"grid":{}}`, "grid", "at least one")
	f(`{"grid":null,"random":{},"seeds":null}`, "grid", "at least one")

	// Too many members: the grid alone, cells × samples, cells × seeds.
	f(`{"grid":{"a":`+ints(101)+`,"b":`+ints(100)+`}}`, "grid", "more than 10000 cells")
	f(`{"grid":{"a":`+ints(100)+`,"b":`+ints(100)+`},"seedCount":2}`, "grid", "10000 cells × 2 seeds = 20000 members")
	f(`{"grid":{"a":[1,2]},"random":{"lr":{"dist":"uniform","min":0,"max":1}},"samples":6000}`, "samples", "12000 cells")
	f(`{"random":{"lr":{"dist":"uniform","min":0,"max":1}},"samples":100,"seedCount":101}`, "seeds", "10100 members")

	// Grid values.
	f(`{"grid":[1,2]}`, "grid", "must be a JSON object")
	f(`{"grid":{"lr":[1],"lr":[2]}}`, "grid", `"lr" appears twice`)
	f(`{"grid":{"lr":0.1}}`, "grid.lr", "array of values")
	f(`{"grid":{"lr":[]}}`, "grid.lr", "at least one value")
	f(`{"grid":{"lr":[0.1,null]}}`, "grid.lr[1]", "null")
	f(`{"grid":{"lr":[0.001,1e-3]}}`, "grid.lr[1]", "repeats grid.lr[0]")
	f(`{"grid":{"n":[1,1.0]}}`, "grid.n[1]", "repeats")
	f(`{"grid":{"s":["a\u0000b"]}}`, "grid.s[0]", "NUL")
	f(`{"grid":{"s":["`+strings.Repeat("x", 20000)+`"]}}`, "grid", "at most 16384")
	f(`{"grid":{"s":["`+strings.Repeat("x", 15000)+`"],"n":`+ints(2500)+`}}`, "grid", "at most 32 MiB")

	// Param names: the rule of /api/train's params.
	f(`{"grid":{"--lr":[1]}}`, "grid", `"--lr" must be 1–64 of`)
	f(`{"grid":{"a b":[1]}}`, "grid", `"a b"`)
	f(`{"grid":{"":[1]}}`, "grid", `""`)
	f(`{"grid":{"`+strings.Repeat("a", 65)+`":[1]}}`, "grid", "1–64")
	f(`{"random":{"-x":{"dist":"int","min":0,"max":1}},"samples":1}`, "random", `"-x"`)
	f(`{"base":{"params":{"x=y":1}},"seedCount":1}`, "base.params", `"x=y"`)

	// Base.
	f(`{"base":[],"seedCount":2}`, "base", "object of /api/train fields")
	f(`{"base":{"params":[1]},"seedCount":2}`, "base.params", "JSON object")
	f(`{"base":{"params":{"lr":null}},"seedCount":2}`, "base.params.lr", "null")
	f(`{"name":7,"seedCount":2}`, "name", "string")
	f(`{"project":"`+strings.Repeat("p", 201)+`","seedCount":2}`, "project", "at most 200")

	// Random params.
	f(`{"random":{"lr":{"dist":"uniform","min":0,"max":1}}}`, "samples", "how many")
	f(`{"grid":{"lr":[1]},"samples":3}`, "samples", "only with random")
	f(`{"random":{"lr":{"dist":"uniform","min":0,"max":1}},"samples":0}`, "samples", "1..10000")
	f(`{"random":{"lr":{"dist":"uniform","min":0,"max":1}},"samples":2.5}`, "samples", "integer")
	f(`{"random":{"lr":[0,1]},"samples":1}`, "random.lr", "must be an object")
	f(`{"random":{"lr":{"min":0,"max":1}},"samples":1}`, "random.lr.dist", "give one of uniform, loguniform, int, choice")
	f(`{"random":{"lr":{"dist":"normal","min":0,"max":1}},"samples":1}`, "random.lr.dist", `unknown distribution "normal"`)
	f(`{"random":{"lr":{"dist":3}},"samples":1}`, "random.lr.dist", "must be a string")
	f(`{"random":{"lr":{"dist":"loguniform","min":0,"max":1}},"samples":1}`, "random.lr.min", "loguniform needs min > 0")
	f(`{"random":{"lr":{"dist":"loguniform","min":-1,"max":1}},"samples":1}`, "random.lr.min", "min > 0")
	f(`{"random":{"lr":{"dist":"uniform","min":2,"max":1}},"samples":1}`, "random.lr.max", "≥ min")
	f(`{"random":{"lr":{"dist":"uniform","max":1}},"samples":1}`, "random.lr.min", "needs min and max")
	f(`{"random":{"lr":{"dist":"uniform","min":0,"max":"1"}},"samples":1}`, "random.lr.max", "finite number")
	f(`{"random":{"lr":{"dist":"uniform","min":0,"max":1e999}},"samples":1}`, "random.lr.max", "finite number")
	f(`{"random":{"lr":{"dist":"uniform","min":0,"max":1,"values":[1]}},"samples":1}`, "random.lr.values", "only choice")
	f(`{"random":{"n":{"dist":"int","min":1.5,"max":4}},"samples":1}`, "random.n.min", "integer bounds")
	f(`{"random":{"n":{"dist":"int","min":1,"max":1e300}},"samples":1}`, "random.n.max", "integer bounds")
	f(`{"random":{"n":{"dist":"int","min":5,"max":4}},"samples":1}`, "random.n.max", "≥ min")
	f(`{"random":{"c":{"dist":"choice"}},"samples":1}`, "random.c.values", "non-empty array")
	f(`{"random":{"c":{"dist":"choice","values":[]}},"samples":1}`, "random.c.values", "at least one value")
	f(`{"random":{"c":{"dist":"choice","values":"ab"}},"samples":1}`, "random.c.values", "array")
	f(`{"random":{"c":{"dist":"choice","values":["a","a"]}},"samples":1}`, "random.c.values[1]", "repeats")
	f(`{"random":{"c":{"dist":"choice","values":["a"],"min":0}},"samples":1}`, "random.c", "drop min and max")
	f(`{"grid":{"lr":[1]},"random":{"lr":{"dist":"uniform","min":0,"max":1}},"samples":1}`, "random.lr", "in grid too")

	// Seeds.
	f(`{"grid":{"seed":[1,2]},"seeds":[3]}`, "grid.seed", "seed is in grid and in seeds")
	f(`{"grid":{"seed":[1,2]},"seedCount":3}`, "grid.seed", "in seedCount")
	f(`{"random":{"seed":{"dist":"int","min":0,"max":9}},"samples":2,"seedCount":3}`, "random.seed", "in random and in seedCount")
	f(`{"seeds":[1],"seedCount":1}`, "seedCount", "not both")
	f(`{"seeds":[]}`, "seeds", "1..1000 seeds")
	f(`{"seeds":3}`, "seeds", "array of integers")
	f(`{"seeds":[1,2,1]}`, "seeds[2]", "repeats seeds[0]")
	f(`{"seeds":["a"]}`, "seeds[0]", "integer")
	f(`{"seeds":[1.5]}`, "seeds[0]", "integer")
	f(`{"seeds":[9007199254740993]}`, "seeds[0]", "integer")
	f(`{"seeds":`+ints(1001)+`}`, "seeds", "1..1000")
	f(`{"seedCount":0}`, "seedCount", "1..1000")
	f(`{"seedCount":1001}`, "seedCount", "1..1000")
	f(`{"seedCount":-3}`, "seedCount", "1..1000")
	f(`{"seedCount":"3"}`, "seedCount", "integer")
	f(`{"seedCount":2.5}`, "seedCount", "integer")

	// maxParallel and randomSeed.
	f(`{"seedCount":2,"maxParallel":-1}`, "maxParallel", "0..10000")
	f(`{"seedCount":2,"maxParallel":1.5}`, "maxParallel", "integer")
	f(`{"seedCount":2,"maxParallel":10001}`, "maxParallel", "0..10000")
	f(`{"seedCount":2,"randomSeed":-1}`, "randomSeed", "0..")
	f(`{"seedCount":2,"randomSeed":"x"}`, "randomSeed", "integer")
}

func TestParse_Success(t *testing.T) {
	f := func(body string, cells, size, maxParallel int) *Spec {
		t.Helper()
		s, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%s): %v", body, err)
		}
		if s.Cells() != cells || s.Size() != size || s.MaxParallel != maxParallel {
			t.Errorf("Parse(%s): %d cells, %d members, maxParallel %d; want %d, %d, %d",
				body, s.Cells(), s.Size(), s.MaxParallel, cells, size, maxParallel)
		}
		if n := len(s.Members()); n != size {
			t.Errorf("Parse(%s): %d members expanded, Size says %d", body, n, size)
		}
		return s
	}
	f(`{"seedCount":5}`, 1, 5, 0)
	f(`{"seeds":[0,7,-3]}`, 1, 3, 0)
	f(`{"grid":{"lr":[0.1]}}`, 1, 1, 0)
	f(`{"grid":{"seed":[1,2,3]}}`, 3, 3, 0) // seeds given as a grid axis: allowed alone
	f(`{"grid":{"a":[1,2,3],"b":["x","y"]},"seedCount":4,"maxParallel":5}`, 6, 24, 5)
	f(`{"grid":{"a":[1,2]},"random":{"lr":{"dist":"loguniform","min":1e-5,"max":1e-2}},"samples":3,"seeds":[1,2]}`, 6, 12, 0)
	f(`{"random":{"lr":{"dist":"uniform","min":1,"max":1}},"samples":2}`, 2, 2, 0) // min = max is a constant
	f(`{"random":{"c":{"dist":"choice","values":[[64,64],{"a":1},"s",true]}},"samples":4}`, 4, 4, 0)
	f(`{"grid":{"a":[1,2,3,4,5,6,7,8,9,10]},"seedCount":1000}`, 10, 10000, 0) // exactly the limit
	f(`{"grid":{"a":[1]},"samples":null,"seeds":null,"seedCount":2,"maxParallel":null}`, 1, 2, 0)
	f(`{"seedCount":2,"unknownField":{"x":1}}`, 1, 2, 0)

	s := f(`{"name":"lr sweep","project":"cartpole","base":{"algorithm":"PPO","episodes":300},"seedCount":2,"randomSeed":42}`, 1, 2, 0)
	if s.Name != "lr sweep" || s.Project != "cartpole" || string(s.Base) != `{"algorithm":"PPO","episodes":300}` || s.RandomSeed != 42 {
		t.Errorf("fields: %+v", s)
	}
	if s := f(`{"seedCount":1}`, 1, 1, 0); string(s.Base) != "{}" {
		t.Errorf("absent base: %s, want {}", s.Base)
	}
}

func TestValidParamName(t *testing.T) {
	for _, ok := range []string{"lr", "learning_rate", "optim.lr", "n-steps", "_x", "0", ".hidden", strings.Repeat("a", 64)} {
		if !ValidParamName(ok) {
			t.Errorf("ValidParamName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "-lr", "--lr", "a b", "a=b", "lr\x00", "ü", strings.Repeat("a", 65)} {
		if ValidParamName(bad) {
			t.Errorf("ValidParamName(%q) = true", bad)
		}
	}
}

// TestDerivedRandomSeed: without randomSeed the draws depend on random and
// samples only, so the same spec draws the same, and a grid value, a seed
// or a name added keeps the draws.
func TestDerivedRandomSeed(t *testing.T) {
	seed := func(body string) uint64 {
		t.Helper()
		s, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%s): %v", body, err)
		}
		return s.RandomSeed
	}
	const r = `"random":{"lr":{"dist":"loguniform","min":1e-5,"max":0.01},"c":{"dist":"choice","values":["a","b"]}},"samples":8`
	base := seed(`{` + r + `}`)
	for _, same := range []string{
		`{` + r + `}`,
		`{"name":"x","grid":{"g":[1,2]},"seedCount":3,` + r + `}`,
		`{"random":{"c":{"dist":"choice","values":["a","b"]},"lr":{"dist":"loguniform","min":0.00001,"max":1e-2}},"samples":8}`,
	} {
		if got := seed(same); got != base {
			t.Errorf("randomSeed of %s: %d, want %d", same, got, base)
		}
	}
	for _, other := range []string{
		`{"random":{"lr":{"dist":"loguniform","min":1e-5,"max":0.01},"c":{"dist":"choice","values":["a","b"]}},"samples":9}`,
		`{"random":{"lr":{"dist":"loguniform","min":1e-5,"max":0.1},"c":{"dist":"choice","values":["a","b"]}},"samples":8}`,
		`{"random":{"lr":{"dist":"uniform","min":1e-5,"max":0.01},"c":{"dist":"choice","values":["a","b"]}},"samples":8}`,
		`{"random":{"lr":{"dist":"loguniform","min":1e-5,"max":0.01},"c":{"dist":"choice","values":["b","a"]}},"samples":8}`,
	} {
		if got := seed(other); got == base {
			t.Errorf("randomSeed of %s equals that of a different spec", other)
		}
	}
	if got := seed(`{` + r + `,"randomSeed":7}`); got != 7 {
		t.Errorf("explicit randomSeed: %d, want 7", got)
	}
	if base > maxExactInt {
		t.Errorf("derived randomSeed %d is not exact in JSON", base)
	}
}
