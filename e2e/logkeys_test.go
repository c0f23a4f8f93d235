package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// duplicateKeys returns the keys that appear more than once at the top
// level of the JSON object line.
func duplicateKeys(line []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		if seen[k] {
			dups = append(dups, k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	return dups, nil
}

// TestJSONLogLinesHaveUniqueKeys: with LOG_FORMAT=json every line of a
// master and a worker is one JSON object without repeated keys (log
// shippers such as Elasticsearch reject documents with duplicate fields).
func TestJSONLogLinesHaveUniqueKeys(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	w := b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1"})
	m.WaitJoined(t, "w1")
	c, _ := signup(t, m.URL, "alice", "ADMIN")
	id, _ := b.submit(c, map[string]any{"command": []string{"python3", "-c", "print('hi')"}})
	c.waitStatus(id, "SUCCEEDED", 30*time.Second)
	w.WaitLog(t, 10*time.Second, "the end of the run", func(l logLine) bool { return l.Msg() == "run ended" })
	for _, p := range []*proc{m.Proc, w} {
		data, err := os.ReadFile(p.ErrPath)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		bad := 0
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 || line[0] != '{' {
				continue // the guard's plain-text messages
			}
			dups, err := duplicateKeys(line)
			if err != nil || len(dups) > 0 {
				if bad++; bad <= 3 {
					t.Errorf("%s logged a line with duplicate keys %v (err %v): %s", p.Name, dups, err, line)
				}
			}
		}
		if bad > 3 {
			t.Errorf("%s: %d such lines in all", p.Name, bad)
		}
	}
}
