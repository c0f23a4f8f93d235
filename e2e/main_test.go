package e2e

import (
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

func TestMain(m *testing.M) { rig.Main(m) }
