package core

import (
	"fmt"
	"regexp"
)

// MaxImageBytes bounds a run's image name.
const MaxImageBytes = 255

// imageRef is a container image reference as podman and docker read it:
// [registry[:port]/]path[:tag][@digest], lower-case path components. A
// name starting with "-" would read as a flag of the runtime, so none does.
var imageRef = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$`)

// CheckImage says what is wrong with a run's image (issue 27: the
// container image it runs in, on a worker with a container runtime),
// naming the field as a 400 does; nil for "" (no image) or a valid
// reference. The submission's check and the worker's are this one.
func CheckImage(image string) error {
	if image == "" {
		return nil
	}
	if len(image) > MaxImageBytes || !imageRef.MatchString(image) {
		return fmt.Errorf("image %q must be a container image reference of at most %d bytes, such as \"pytorch/pytorch:2.3.0\" or \"registry.lab:5000/rl/base@sha256:…\"", clipImage(image), MaxImageBytes)
	}
	return nil
}

func clipImage(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
