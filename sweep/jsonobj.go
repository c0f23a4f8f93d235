package sweep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rlsched/rlsched/internal/clip"
)

// kv is one member of a JSON object: its name and its compact value.
type kv struct {
	key string
	val json.RawMessage
}

// objectOf decodes a JSON object keeping its members' order; a name that
// appears twice is an error, since encoding/json would silently keep the last.
func objectOf(raw []byte) ([]kv, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("must be a JSON object")
	}
	var out []kv
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("malformed JSON object")
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("name %q appears twice", clip.String(key, 64))
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("malformed value of %q", clip.String(key, 64))
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, fmt.Errorf("malformed value of %q", clip.String(key, 64))
		}
		out = append(out, kv{key, buf.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("malformed JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("must be one JSON object")
	}
	return out, nil
}

// arrayOf decodes a JSON array into its compact elements.
func arrayOf(raw []byte) ([]json.RawMessage, error) {
	var vs []json.RawMessage
	if err := json.Unmarshal(raw, &vs); err != nil || vs == nil {
		return nil, fmt.Errorf("must be a JSON array")
	}
	for i, v := range vs {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, fmt.Errorf("malformed element %d", i)
		}
		vs[i] = buf.Bytes()
	}
	return vs, nil
}

// isNull reports whether raw is absent or JSON null: both mean "not given".
func isNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// appendObject writes kvs as a compact JSON object in their order.
func appendObject(dst []byte, kvs []kv) []byte {
	dst = append(dst, '{')
	for i, p := range kvs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, p.key)
		dst = append(dst, ':')
		dst = append(dst, p.val...)
	}
	return append(dst, '}')
}

// appendString writes s as a JSON string with the escapes encoding/json
// uses, except HTML escaping (the text is data, not markup): quote,
// backslash and control characters escaped, invalid UTF-8 as U+FFFD, and
// U+2028/U+2029 escaped so the text is also a valid JavaScript literal.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// canonical is v's canonical JSON text: objects with their names sorted,
// no insignificant space, integers as written, other numbers in Go's
// shortest 'g' form (so 0.001, 1e-3 and 1.0e-3 are one value, and 1.0 is 1).
// Two values that mean the same get the same text; it is the group key.
func canonical(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("malformed JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("must be one JSON value")
	}
	return appendCanonical(nil, v), nil
}

func appendCanonical(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, x)
	case string:
		return appendString(dst, x)
	case json.Number:
		return appendNumber(dst, x)
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonical(dst, e)
		}
		return append(dst, ']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendCanonical(dst, x[k])
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("BUG: canonical: unexpected %T from encoding/json", v))
}

// appendNumber writes an integer literal as it is (big integers keep every
// digit) and any other number in its shortest float64 form; an integral
// float (1.0, 1e3) becomes the integer literal it equals.
func appendNumber(dst []byte, n json.Number) []byte {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return append(dst, '0')
		}
		return append(dst, s...)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil { // out of float64 range: keep the literal
		return append(dst, s...)
	}
	if f == 0 {
		return append(dst, '0')
	}
	if f == float64(int64(f)) && f > -1<<53 && f < 1<<53 {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// flatKey is GroupKey's fast path, for the params the API stores: a flat
// object of numbers, plain ASCII strings, booleans and nulls. It scans raw
// text, which must be valid JSON, and reports false for anything else
// (nested values, escapes, non-ASCII, a name given twice), which then takes
// the general path. TestFlatKeyMatchesCanonical holds the two paths equal.
func flatKey(p []byte, drop string) (string, bool) {
	type pair struct{ key, val []byte }
	var buf [16]pair
	pairs := buf[:0]
	i := skipSpace(p, 0)
	if i == len(p) || p[i] != '{' {
		return "", false
	}
	i = skipSpace(p, i+1)
	for i < len(p) && p[i] != '}' {
		key, next, ok := plainString(p, i)
		if !ok {
			return "", false
		}
		i = skipSpace(p, next)
		if i == len(p) || p[i] != ':' {
			return "", false
		}
		i = skipSpace(p, i+1)
		if i == len(p) {
			return "", false
		}
		start := i
		switch c := p[i]; {
		case c == '"':
			if _, next, ok = plainString(p, i); !ok {
				return "", false
			}
			i = next
		case c == '{' || c == '[':
			return "", false
		default: // a number, true, false or null: up to the next delimiter
			for i < len(p) && p[i] != ',' && p[i] != '}' && p[i] != ' ' && p[i] != '\t' && p[i] != '\n' && p[i] != '\r' {
				i++
			}
		}
		pairs = append(pairs, pair{key, p[start:i]})
		i = skipSpace(p, i)
		if i < len(p) && p[i] == ',' {
			i = skipSpace(p, i+1)
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int { return bytes.Compare(a.key, b.key) })
	out := make([]byte, 0, len(p))
	out = append(out, '{')
	for j, e := range pairs {
		if j > 0 && bytes.Equal(e.key, pairs[j-1].key) {
			return "", false
		}
		if string(e.key) == drop {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), e.key...), '"', ':')
		if c := e.val[0]; c == '-' || (c >= '0' && c <= '9') {
			out = appendNumber(out, json.Number(e.val))
		} else {
			out = append(out, e.val...)
		}
	}
	return string(append(out, '}')), true
}

func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// plainString returns the contents of the JSON string starting at p[i] and
// the index after it, when it holds printable ASCII without escapes only:
// then its text is its own canonical form.
func plainString(p []byte, i int) (s []byte, next int, ok bool) {
	if p[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(p); j++ {
		switch c := p[j]; {
		case c == '"':
			return p[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, 0, false
		}
	}
	return nil, 0, false
}
