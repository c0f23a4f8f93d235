//go:build linux

package isolation

import (
	"strings"
	"testing"
)

func TestUIDsMappedIn(t *testing.T) {
	r := UIDRange{First: 61000, Last: 61999}
	f := func(uidMap, wantErr string) {
		t.Helper()
		err := uidsMappedIn(r, []byte(uidMap))
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("uid_map %q: %v, want %q", uidMap, err, wantErr)
		}
	}
	f("         0          0 4294967295\n", "")
	f("0 1000 1\n1 100000 65536\n", "")                           // rootless container: 1..65536 mapped
	f("0 1000 1\n1 100000 61500\n", "uid 61501 of RUN_UID_RANGE") // ends inside the range
	f("0 0 1000\n61500 161500 1000\n", "uid 61000")
	f("0 0 61500\n61500 161500 500\n", "") // two extents cover it
}
