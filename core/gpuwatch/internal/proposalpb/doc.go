// Package proposalpb is generated from gpus.proto: the heartbeat fields
// proposed for issue 16, compiled only for core/gpuwatch's benchmark until
// they move into codec/pb/rlsched.proto. Nothing else may import it.
package proposalpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative gpus.proto
