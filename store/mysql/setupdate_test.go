package mysql

import (
	"fmt"
	"testing"

	"github.com/rlsched/rlsched/store/internal/sqlutil"
	"github.com/rlsched/rlsched/store/storetest"
)

// TestSetUpdatePlan: the batch statements find each run by its primary key
// rather than scanning tasks, whose every row a scan would lock; on a
// table of one run the optimizer scans unless told not to.
func TestSetUpdatePlan(t *testing.T) {
	s, _ := openTemp(t)
	queue(t, s, 1)
	for _, n := range []int{1, 8} {
		k := sqlutil.UpdateArgs
		set := make([]any, n*k)
		for i := range n {
			set[i*k+k-3], set[i*k+k-2], set[i*k+k-1] = fmt.Sprintf("r%02d", i), 0, "QUEUED"
		}
		lock := make([]any, n)
		for i := range n {
			lock[i] = fmt.Sprintf("r%02d", i)
		}
		for _, c := range []struct {
			q    string
			args []any
		}{{setUpdateSQL[n], set}, {lockSQL[n], lock}} {
			rows, err := s.db.QueryContext(t.Context(), "EXPLAIN "+c.q, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			cols, err := rows.Columns()
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				v := make([]any, len(cols))
				p := make([]any, len(cols))
				for i := range v {
					p[i] = &v[i]
				}
				if err := rows.Scan(p...); err != nil {
					t.Fatal(err)
				}
				row := map[string]string{}
				for i, x := range v {
					if b, ok := x.([]byte); ok {
						row[cols[i]] = string(b)
					}
				}
				if row["table"] == "t" || row["table"] == "tasks" {
					if row["key"] != "PRIMARY" || row["type"] == "ALL" || row["type"] == "index" {
						t.Fatalf("%d rows: tasks read by %s on key %q, want the primary key:\n%s", n, row["type"], row["key"], c.q)
					}
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			rows.Close()
		}
	}
}

func TestLargeBatch(t *testing.T) {
	s, _ := openTemp(t)
	storetest.LargeBatch(t, s)
}

// BenchmarkUpdateTasks: ns/op is one run's state change in a batch.
func BenchmarkUpdateTasks(b *testing.B) {
	for _, size := range []int{1, 16, 256} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			s, err := Open(newDatabase(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.BenchUpdateTasks(b, s, size)
		})
	}
}
