package httpapi

import (
	"strings"
	"testing"
)

func TestAnswerCache(t *testing.T) {
	c := newAnswerCache(10)
	c.put("a", "v1", []byte("1234"))
	if got := string(c.get("a", "v1")); got != "1234" {
		t.Fatalf("get a v1: %q", got)
	}
	if c.get("a", "v2") != nil || c.get("b", "v1") != nil || c.get("a", "") != nil {
		t.Fatal("an answer of another version, key, or no version")
	}
	c.put("b", "", []byte("x")) // no version: never kept
	if c.get("b", "") != nil || len(c.m) != 1 {
		t.Fatalf("kept an answer without a version: %v", c.m)
	}
	c.put("a", "v2", []byte("12"))
	c.put("b", "v1", []byte("abcd"))
	c.put("c", "v1", []byte("wxyz")) // 2+4+4 = 10: all fit
	if c.get("a", "v2") == nil || c.get("a", "v1") != nil || c.size != 10 {
		t.Fatalf("replace: size %d", c.size)
	}
	c.put("d", "v1", []byte("zz")) // 12 > 10: the oldest (a) goes
	if c.get("a", "v2") != nil || c.get("d", "v1") == nil || c.size != 10 {
		t.Fatalf("eviction: size %d, keys %v", c.size, c.order)
	}
	c.put("e", "v1", []byte(strings.Repeat("x", 6))) // over half of max: not kept
	if c.get("e", "v1") != nil {
		t.Fatal("kept an answer over half the cache")
	}
}
