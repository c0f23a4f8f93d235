package sqlutil

import (
	"database/sql"
	"math"

	"github.com/rlsched/rlsched/core"
)

// MetricTime is the value both backends store in a metric's t column: NULL
// for a point without a time, so that the upsert keeps the one stored.
func MetricTime(p core.MetricPoint) any {
	if p.Time == 0 {
		return nil
	}
	return p.Time
}

// TimeOrNaN is a stored metric time as a float, NaN when there is none.
func TimeOrNaN(t sql.NullInt64) float64 {
	if !t.Valid {
		return math.NaN()
	}
	return float64(t.Int64)
}
