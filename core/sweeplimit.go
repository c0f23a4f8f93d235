package core

// SweepLimit is what the scheduler knows of a sweep with a cap on its
// active members (API.md "Sweeps and seed groups": maxParallel): the cap,
// and how many members are DISPATCHED or RUNNING in the store now.
type SweepLimit struct {
	MaxParallel int
	Active      int
}

// SweepTag is the tag every member of sweep id carries.
func SweepTag(id string) string { return "sweep:" + id }
