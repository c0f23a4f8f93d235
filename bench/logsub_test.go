package main

import (
	"encoding/json"
	"testing"

	"github.com/rlsched/rlsched/bench/fleet"
)

func TestFastLogDataMatchesJSON(t *testing.T) {
	line := "T1732950000123456789 lw-000001 r0123 N0000000042 xxx\n"
	frames := []string{
		`{"topic":"/topic/logs/r1","type":"log","offset":0,"data":` + quote(line+line) + `}`,
		`{"topic":"/topic/logs/r1","type":"log","offset":0,"data":"a\"b\n"}`,
		`{"topic":"/topic/logs/r1","type":"log","offset":0,"data":"\u00e9\n"}`,
		`{"type":"subscribed","topic":"/topic/logs/r1","offset":0}`,
	}
	for _, f := range frames {
		var want subFrame
		if err := json.Unmarshal([]byte(f), &want); err != nil {
			t.Fatal(err)
		}
		got, ok := fastLogData([]byte(f), []byte("rest"))
		if !ok {
			if string(got) != "rest" {
				t.Errorf("%s: refused but changed the buffer to %q", f, got)
			}
			continue
		}
		if want.Type != "log" || string(got) != "rest"+want.Data {
			t.Errorf("%s: got %q, want %q", f, got, "rest"+want.Data)
		}
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestLineTime(t *testing.T) {
	ts, ok := fleet.LineTime([]byte("T1732950000123456789 w r N0000000001 xx"))
	if !ok || ts != 1732950000123456789 {
		t.Fatalf("LineTime = %d, %v", ts, ok)
	}
	if _, ok := fleet.LineTime([]byte("episode 1")); ok {
		t.Fatal("a foreign line was read as timed")
	}
}
