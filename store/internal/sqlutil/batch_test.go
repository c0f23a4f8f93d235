package sqlutil

import (
	"fmt"
	"reflect"
	"testing"
)

func TestChunks(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string // each chunk as len/bucket
	}{
		{0, "[]"}, {1, "[1/1]"}, {3, "[3/4]"}, {4, "[4/4]"}, {5, "[5/8]"}, {512, "[512/512]"},
		{513, "[512/512 1/1]"}, {1100, "[512/512 512/512 76/128]"},
	} {
		rows := make([]int, c.n)
		for i := range rows {
			rows[i] = i
		}
		got := []string{}
		next := 0
		err := Chunks(rows, func(chunk []int, bucket int) error {
			if len(chunk) == 0 || chunk[0] != next {
				t.Fatalf("n=%d: chunk starts at %v, want row %d", c.n, chunk, next)
			}
			next += len(chunk)
			got = append(got, fmt.Sprintf("%d/%d", len(chunk), bucket))
			return nil
		})
		if err != nil || fmt.Sprint(got) != c.want || next != c.n {
			t.Errorf("Chunks(%d rows) = %v (%v), want %s", c.n, got, err, c.want)
		}
	}
}

func TestChunkArgsPads(t *testing.T) {
	rows := []PreparedUpdate{{Args: make([]any, UpdateArgs)}, {Args: make([]any, UpdateArgs)}, {Args: make([]any, UpdateArgs)}}
	for i := range rows {
		for k := range rows[i].Args {
			rows[i].Args[k] = i + 1
		}
	}
	args := ChunkArgs(rows, []int{2, 0}, 4)
	if len(args) != 4*UpdateArgs {
		t.Fatalf("%d args, want %d", len(args), 4*UpdateArgs)
	}
	if args[0] != 3 || args[UpdateArgs] != 1 || args[2*UpdateArgs] != nil || args[4*UpdateArgs-1] != nil {
		t.Fatalf("args = %v", args)
	}
}

func TestRounds(t *testing.T) {
	ids := []string{"a", "b", "a", "c", "a", "b"}
	got := Rounds([]int{0, 1, 2, 3, 4, 5}, func(i int) string { return ids[i] })
	want := [][]int{{0, 1, 3}, {2, 5}, {4}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Rounds = %v, want %v", got, want)
	}
	if got := Rounds(nil, func(int) string { return "" }); len(got) != 0 {
		t.Fatalf("Rounds(nil) = %v", got)
	}
}
