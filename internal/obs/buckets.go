package obs

// Bucket layouts, in seconds unless named otherwise. Each spans what its
// metric sees in practice with room on both sides.
var (
	// requestBuckets: an HTTP answer, from a cached page to a slow query.
	requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// dispatchBuckets: submit to start, from an idle farm (milliseconds)
	// to a full one (hours).
	dispatchBuckets = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200}
	// commitBuckets: one store transaction, SQLite fsync to MySQL over a LAN.
	commitBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	// passBuckets: one scheduler pass over the queue, microseconds to a second.
	passBuckets = []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	// batchBuckets: rows per store batch (a count, not seconds).
	batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
)
