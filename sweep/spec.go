package sweep

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/sweep/goal"
)

// Limits of a sweep spec (API.md "Sweeps and seed groups").
const (
	// MaxMembers caps cells × seeds: one sweep is one store transaction.
	MaxMembers = 10_000
	// MaxSeeds caps seeds and seedCount; more seeds than this is a typo.
	MaxSeeds = 1000
	// MaxParams caps the params of one member, as /api/train does.
	MaxParams = 256
	// MaxMemberParamsBytes caps one member's params as compact JSON, and
	// MaxSweepParamsBytes all members' together, so a 1 MiB body cannot
	// expand into gigabytes of params.
	MaxMemberParamsBytes = 16 << 10
	MaxSweepParamsBytes  = 32 << 20
	maxNameChars         = 200
	// maxExactInt bounds integers that must survive JSON in every client
	// (a JavaScript or Python float holds them exactly).
	maxExactInt = 1<<53 - 1
)

// SeedParam is the param a sweep's seeds are given as, and the one a seed
// group leaves out.
const SeedParam = "seed"

// paramNameRe is the rule for a param name, also of /api/train's params
// (httpapi calls ValidParamName), so a member's params always pass it, and
// "--name value" is one flag for argparse (never starting with '-').
var paramNameRe = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$`)

// ValidParamName reports whether name may be a param (a flag name).
func ValidParamName(name string) bool { return paramNameRe.MatchString(name) }

const paramNameRule = "1–64 of [A-Za-z0-9_.-], not starting with '-'"

// FieldError is a bad spec: Field names the offending field the way a user
// wrote it ("grid.lr", "random.lr.min", "seedCount"); the REST layer
// answers 400 with Error().
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Dist is a random distribution of a param.
type Dist string

const (
	// Uniform draws a float in [min, max).
	Uniform Dist = "uniform"
	// LogUniform draws a float whose logarithm is uniform in [log min, log max).
	LogUniform Dist = "loguniform"
	// Int draws an integer in [min, max], both included.
	Int Dist = "int"
	// Choice draws one of values, each as likely.
	Choice Dist = "choice"
)

// axis is one grid param and its values in the order given.
type axis struct {
	name   string
	values []json.RawMessage
}

// randomParam is one random param.
type randomParam struct {
	name     string
	dist     Dist
	min, max float64
	values   []json.RawMessage // Choice only
}

// Spec is a validated sweep spec. Make one with Parse.
type Spec struct {
	Name    string
	Project string
	// Base is the "base" object as given (the /api/train fields every member
	// shares, {} when absent). Its params are replaced by each member's
	// Params; the REST layer validates the rest as it validates /api/train.
	Base json.RawMessage
	// Seeds are the seeds each cell runs with, in order; nil when the sweep
	// gives none (then no seed param is added).
	Seeds []int64
	// MaxParallel caps the active members; 0 means no cap.
	MaxParallel int
	// RandomSeed seeds the random draws: the spec's randomSeed, or one
	// derived from its random and samples fields (see deriveRandomSeed).
	RandomSeed uint64

	// Method is the spec's method, or random when it gives random params
	// and grid when not.
	Method Method
	// Metric and Goal are the objective the search and the early stopping
	// use (default DefaultMetric, maximize).
	Metric string
	Goal   goal.Goal
	// Budget is a tpe sweep's members in all; 0 for grid and random.
	Budget int
	// EarlyStop is the spec's earlyStop, its metric and goal defaulting to
	// the sweep's; nil when absent.
	//
	// Nothing acts on Metric, Goal or EarlyStop yet, nor proposes by TPE:
	// the sweep controller that will is to come (API.md).
	EarlyStop *EarlyStop

	raw        rawSpec // as decoded, for Normalized
	baseParams []kv
	grid       []axis        // sorted by name
	random     []randomParam // sorted by name
	samples    int           // 0 without random
}

// rawSpec is the body of POST /api/sweeps, each field kept raw so an error
// can name the field whose type is wrong.
type rawSpec struct {
	Name        json.RawMessage `json:"name"`
	Project     json.RawMessage `json:"project"`
	Base        json.RawMessage `json:"base"`
	Grid        json.RawMessage `json:"grid"`
	Random      json.RawMessage `json:"random"`
	Samples     json.RawMessage `json:"samples"`
	Seeds       json.RawMessage `json:"seeds"`
	SeedCount   json.RawMessage `json:"seedCount"`
	MaxParallel json.RawMessage `json:"maxParallel"`
	RandomSeed  json.RawMessage `json:"randomSeed"`
	Method      json.RawMessage `json:"method"`
	Metric      json.RawMessage `json:"metric"`
	Goal        json.RawMessage `json:"goal"`
	Budget      json.RawMessage `json:"budget"`
	EarlyStop   json.RawMessage `json:"earlyStop"`
}

// Normalized is the spec as it is stored and shown: the fields Parse
// read, under their own names (JSON decoding matched a key whatever its
// case, so "ENV" beside "env" must not survive to be shown unmasked),
// compact, the absent ones left out, and base replaced by the caller's
// decoded and re-encoded base (which leaves out what it keeps apart, such
// as a code diff). Never the body as sent.
func (s *Spec) Normalized(base json.RawMessage) (json.RawMessage, error) {
	r := s.raw
	r.Base = base
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if isNull(v) {
			delete(m, k)
		}
	}
	return json.Marshal(m)
}

type rawDist struct {
	Dist   json.RawMessage `json:"dist"`
	Min    json.RawMessage `json:"min"`
	Max    json.RawMessage `json:"max"`
	Values json.RawMessage `json:"values"`
}

// Parse validates a sweep spec (the JSON body of POST /api/sweeps). A bad
// spec is a *FieldError naming the field; unknown fields are ignored, JSON
// null is the same as absent.
func Parse(body []byte) (*Spec, error) {
	var r rawSpec
	if b := bytes.TrimSpace(body); len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &r) != nil {
		return nil, fieldErr("", "send a JSON object with base and grid, random or seeds")
	}
	s := &Spec{raw: r}
	var err error
	if s.Name, err = shortString(r.Name, "name"); err != nil {
		return nil, err
	}
	if s.Project, err = shortString(r.Project, "project"); err != nil {
		return nil, err
	}
	if err := s.parseBase(r.Base); err != nil {
		return nil, err
	}
	if err := s.parseMethodName(r.Method); err != nil {
		return nil, err
	}
	if err := s.parseGrid(r.Grid); err != nil {
		return nil, err
	}
	if err := s.parseRandom(r.Random, r.Samples); err != nil {
		return nil, err
	}
	if err := s.parseSeeds(r.Seeds, r.SeedCount); err != nil {
		return nil, err
	}
	if err := s.parseSearch(&r); err != nil {
		return nil, err
	}
	if len(s.grid) == 0 && len(s.random) == 0 && s.Seeds == nil {
		return nil, fieldErr("grid", "give grid values, random params or seeds: a sweep needs at least one of them")
	}
	if !isNull(r.MaxParallel) {
		n, err := integer(r.MaxParallel, "maxParallel")
		if err != nil {
			return nil, err
		}
		if n < 0 || n > MaxMembers {
			return nil, fieldErr("maxParallel", "must be 0..%d (0: no cap)", MaxMembers)
		}
		s.MaxParallel = int(n)
	}
	if isNull(r.RandomSeed) {
		s.RandomSeed = s.deriveRandomSeed()
	} else {
		n, err := integer(r.RandomSeed, "randomSeed")
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, fieldErr("randomSeed", "must be 0..%d", int64(maxExactInt))
		}
		s.RandomSeed = uint64(n)
	}
	if err := s.checkSize(); err != nil {
		return nil, err
	}
	return s, nil
}

func shortString(raw json.RawMessage, field string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", fieldErr(field, "must be a string")
	}
	if utf8.RuneCountInString(v) > maxNameChars || strings.IndexByte(v, 0) >= 0 {
		return "", fieldErr(field, "must be at most %d characters without NUL", maxNameChars)
	}
	return v, nil
}

func (s *Spec) parseBase(raw json.RawMessage) error {
	s.Base = json.RawMessage("{}")
	if isNull(raw) {
		return nil
	}
	var fields map[string]json.RawMessage
	if bytes.TrimSpace(raw)[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return fieldErr("base", "must be an object of /api/train fields")
	}
	s.Base = raw
	p := fields["params"]
	if isNull(p) {
		return nil
	}
	kvs, err := paramObject(p, "base.params", "")
	if err != nil {
		return err
	}
	for _, e := range kvs {
		if err := checkValue(e.val); err != nil {
			return fieldErr("base.params."+e.key, "%v", err)
		}
	}
	s.baseParams = kvs
	return nil
}

// paramObject decodes field, an object of param name: anything, refusing
// a name that is not a param name; shape ends the message of a malformed
// object.
func paramObject(raw json.RawMessage, field, shape string) ([]kv, error) {
	kvs, err := objectOf(raw)
	if err != nil {
		return nil, fieldErr(field, "%v%s", err, shape)
	}
	for _, e := range kvs {
		if !ValidParamName(e.key) {
			return nil, fieldErr(field, "name %q must be %s", clip.String(e.key, 64), paramNameRule)
		}
	}
	return kvs, nil
}

// checkValue refuses a param value that cannot become one argv element:
// null, and a string holding NUL.
func checkValue(v json.RawMessage) error {
	if isNull(v) {
		return fmt.Errorf("null is not a value; leave the param out instead")
	}
	if v[0] == '"' {
		var str string
		if json.Unmarshal(v, &str) == nil && strings.IndexByte(str, 0) >= 0 {
			return fmt.Errorf("contains a NUL byte")
		}
	}
	return nil
}

// distinctValues checks vs as a list of param values: non-empty, each a
// value, no two alike.
func distinctValues(vs []json.RawMessage, field string) error {
	if len(vs) == 0 {
		return fieldErr(field, "give at least one value")
	}
	seen := make(map[string]int, len(vs))
	for i, v := range vs {
		if err := checkValue(v); err != nil {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		c, err := canonical(v)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		if j, dup := seen[string(c)]; dup {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "repeats %s[%d]; each value once", field, j)
		}
		seen[string(c)] = i
	}
	return nil
}

func (s *Spec) parseGrid(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	kvs, err := paramObject(raw, "grid", " of name: [values]")
	if err != nil {
		return err
	}
	for _, e := range kvs {
		field := "grid." + e.key
		vs, err := arrayOf(e.val)
		if err != nil {
			return fieldErr(field, "must be an array of values, e.g. [0.001, 0.0003]")
		}
		if err := distinctValues(vs, field); err != nil {
			return err
		}
		s.grid = append(s.grid, axis{name: e.key, values: vs})
	}
	slices.SortFunc(s.grid, func(a, b axis) int { return strings.Compare(a.name, b.name) })
	return nil
}

func (s *Spec) parseRandom(raw, samples json.RawMessage) error {
	if !isNull(raw) {
		kvs, err := paramObject(raw, "random", " of name: {dist, min, max, values}")
		if err != nil {
			return err
		}
		for _, e := range kvs {
			if s.inGrid(e.key) {
				return fieldErr("random."+e.key, "%s is in grid too; give it in one place", e.key)
			}
			p, err := parseDist(e.key, e.val)
			if err != nil {
				return err
			}
			s.random = append(s.random, p)
		}
		slices.SortFunc(s.random, func(a, b randomParam) int { return strings.Compare(a.name, b.name) })
	}
	switch {
	case s.Method == TPE:
		return nil // parseBudget reads samples and budget
	case len(s.random) == 0 && !isNull(samples):
		return fieldErr("samples", "applies only with random params; drop it or add random")
	case len(s.random) == 0:
		return nil
	}
	n, err := memberCount(samples, "samples", "give how many random draws to make")
	s.samples = n
	return err
}

// memberCount reads a required count of 1..MaxMembers (samples, budget);
// missing says what to give when it is absent.
func memberCount(raw json.RawMessage, field, missing string) (int, error) {
	if isNull(raw) {
		return 0, fieldErr(field, "%s (1..%d)", missing, MaxMembers)
	}
	n, err := integer(raw, field)
	if err != nil {
		return 0, err
	}
	if n < 1 || n > MaxMembers {
		return 0, fieldErr(field, "must be 1..%d", MaxMembers)
	}
	return int(n), nil
}

func (s *Spec) inGrid(name string) bool {
	for _, a := range s.grid {
		if a.name == name {
			return true
		}
	}
	return false
}

const distNames = "uniform, loguniform, int, choice"

func parseDist(name string, raw json.RawMessage) (randomParam, error) {
	field := "random." + name
	p := randomParam{name: name}
	var r rawDist
	if bytes.TrimSpace(raw)[0] != '{' || json.Unmarshal(raw, &r) != nil {
		return p, fieldErr(field, "must be an object {dist, min, max} or {dist: choice, values}")
	}
	if isNull(r.Dist) {
		return p, fieldErr(field+".dist", "give one of %s", distNames)
	}
	var d string
	if json.Unmarshal(r.Dist, &d) != nil {
		return p, fieldErr(field+".dist", "must be a string, one of %s", distNames)
	}
	p.dist = Dist(d)
	switch p.dist {
	case Choice:
		if !isNull(r.Min) || !isNull(r.Max) {
			return p, fieldErr(field, "choice draws from values; drop min and max")
		}
		if isNull(r.Values) {
			return p, fieldErr(field+".values", "choice needs a non-empty array of values")
		}
		vs, err := arrayOf(r.Values)
		if err != nil {
			return p, fieldErr(field+".values", "must be an array of values")
		}
		if err := distinctValues(vs, field+".values"); err != nil {
			return p, err
		}
		p.values = vs
		return p, nil
	case Uniform, LogUniform, Int:
	default:
		return p, fieldErr(field+".dist", "unknown distribution %q; use one of %s", clip.String(d, 32), distNames)
	}
	if !isNull(r.Values) {
		return p, fieldErr(field+".values", "only choice takes values; %s takes min and max", d)
	}
	var err error
	if p.min, err = bound(r.Min, field+".min", d); err != nil {
		return p, err
	}
	if p.max, err = bound(r.Max, field+".max", d); err != nil {
		return p, err
	}
	if p.dist == Int {
		for _, b := range []struct {
			v     float64
			field string
		}{{p.min, field + ".min"}, {p.max, field + ".max"}} {
			if b.v != math.Trunc(b.v) || math.Abs(b.v) > maxExactInt {
				return p, fieldErr(b.field, "int takes integer bounds within ±%d", int64(maxExactInt))
			}
		}
	}
	if p.dist == LogUniform && p.min <= 0 {
		return p, fieldErr(field+".min", "loguniform needs min > 0")
	}
	if p.min > p.max {
		return p, fieldErr(field+".max", "must be ≥ min (%v)", p.min)
	}
	return p, nil
}

func bound(raw json.RawMessage, field, dist string) (float64, error) {
	if isNull(raw) {
		return 0, fieldErr(field, "%s needs min and max", dist)
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fieldErr(field, "must be a finite number")
	}
	return f, nil
}

// integer decodes an integral JSON number within ±2^53.
func integer(raw json.RawMessage, field string) (int64, error) {
	var f float64
	if json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || math.Abs(f) > maxExactInt {
		return 0, fieldErr(field, "must be an integer")
	}
	return int64(f), nil
}

func (s *Spec) parseSeeds(seeds, count json.RawMessage) error {
	switch {
	case !isNull(seeds) && !isNull(count):
		return fieldErr("seedCount", "give seeds or seedCount, not both")
	case !isNull(seeds):
		vs, err := arrayOf(seeds)
		if err != nil {
			return fieldErr("seeds", "must be an array of integers, e.g. [0, 1, 2]")
		}
		if len(vs) == 0 || len(vs) > MaxSeeds {
			return fieldErr("seeds", "give 1..%d seeds, or leave seeds out", MaxSeeds)
		}
		seen := make(map[int64]int, len(vs))
		for i, v := range vs {
			f := fmt.Sprintf("seeds[%d]", i)
			n, err := integer(v, f)
			if err != nil {
				return err
			}
			if j, dup := seen[n]; dup {
				return fieldErr(f, "repeats seeds[%d]; each seed once", j)
			}
			seen[n] = i
			s.Seeds = append(s.Seeds, n)
		}
	case !isNull(count):
		n, err := integer(count, "seedCount")
		if err != nil {
			return err
		}
		if n < 1 || n > MaxSeeds {
			return fieldErr("seedCount", "must be 1..%d", MaxSeeds)
		}
		s.Seeds = make([]int64, n)
		for i := range s.Seeds {
			s.Seeds[i] = int64(i)
		}
	default:
		return nil
	}
	seedsField := "seeds"
	if isNull(seeds) {
		seedsField = "seedCount"
	}
	if s.inGrid(SeedParam) {
		return fieldErr("grid."+SeedParam, "seed is in grid and in %s; give the seeds in one place", seedsField)
	}
	for _, p := range s.random {
		if p.name == SeedParam {
			return fieldErr("random."+SeedParam, "seed is in random and in %s; give the seeds in one place", seedsField)
		}
	}
	return nil
}

// Cells is how many param combinations the sweep has: the grid's product
// times the random samples; a tpe sweep's proposals.
func (s *Spec) Cells() int {
	if s.Method == TPE {
		return s.samples
	}
	n := 1
	for _, a := range s.grid {
		n *= len(a.values)
	}
	return n * max(s.samples, 1)
}

// Size is how many members the sweep has: cells × seeds.
func (s *Spec) Size() int { return s.Cells() * max(len(s.Seeds), 1) }

// checkSize refuses more than MaxMembers members, or params too large to
// store, before anything is expanded. Products are computed with a cap, so
// a grid of many long axes cannot overflow.
func (s *Spec) checkSize() error {
	grid := 1
	for _, a := range s.grid {
		if s.Method == TPE {
			break // the grid's axes are searched, not crossed
		}
		grid *= len(a.values)
		if grid > MaxMembers {
			return fieldErr("grid", "the grid alone has more than %d cells; at most %d members (cells × seeds)", MaxMembers, MaxMembers)
		}
	}
	cells := grid * max(s.samples, 1)
	if cells > MaxMembers {
		return fieldErr("samples", "%d grid cells × %d samples = %d cells; at most %d members (cells × seeds)", grid, s.samples, cells, MaxMembers)
	}
	if n := s.Size(); n > MaxMembers {
		field := "seeds"
		if len(s.grid) > 0 {
			field = "grid"
		}
		return fieldErr(field, "%d cells × %d seeds = %d members; at most %d", cells, len(s.Seeds), n, MaxMembers)
	}

	// The largest member: every param at its longest value.
	longest := map[string]int{}
	for _, e := range s.baseParams {
		longest[e.key] = len(e.val)
	}
	for _, a := range s.grid {
		longest[a.name] = 0
		for _, v := range a.values {
			longest[a.name] = max(longest[a.name], len(v))
		}
	}
	for _, p := range s.random {
		longest[p.name] = 32 // a float64 in 'g' form
		for _, v := range p.values {
			longest[p.name] = max(longest[p.name], len(v))
		}
	}
	if s.Seeds != nil {
		longest[SeedParam] = 17
	}
	if len(longest) > MaxParams {
		return fieldErr("grid", "base.params, grid, random and seed make %d params; at most %d", len(longest), MaxParams)
	}
	size := 2
	for k, n := range longest {
		size += len(k) + 4 + n
	}
	field := "grid"
	if len(s.grid) == 0 {
		field = "random"
	}
	if size > MaxMemberParamsBytes {
		return fieldErr(field, "a member's params can reach %d bytes; at most %d", size, MaxMemberParamsBytes)
	}
	if total := size * s.Size(); total > MaxSweepParamsBytes {
		return fieldErr(field, "%d members × up to %d bytes of params = %d bytes; at most %d MiB: fewer members or shorter values", s.Size(), size, total, MaxSweepParamsBytes>>20)
	}
	return nil
}

// deriveRandomSeed makes the random draws of a spec without randomSeed a
// function of its random params and samples only: the same spec draws the
// same values, and adding a grid value or a seed keeps them (except in a
// tpe sweep, whose grid axes are drawn too).
func (s *Spec) deriveRandomSeed() uint64 {
	h := sha256.New()
	// Every part is written as a JSON value followed by a NUL, so no two
	// specs give the same bytes.
	part := func(b []byte) { h.Write(b); h.Write([]byte{0}) }
	for _, p := range s.searched() {
		part(appendString(nil, p.name))
		part(appendString(nil, string(p.dist)))
		part(strconv.AppendFloat(nil, p.min, 'g', -1, 64))
		part(strconv.AppendFloat(nil, p.max, 'g', -1, 64))
		for _, v := range p.values {
			c, _ := canonical(v) // validated by Parse
			part(c)
		}
		part([]byte("]"))
	}
	part(strconv.AppendInt(nil, int64(s.samples), 10))
	return binary.BigEndian.Uint64(h.Sum(nil)) & maxExactInt
}
