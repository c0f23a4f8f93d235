// Package scripts ships the Python helpers inside the binary, so every
// worker can run the default trainer without a checkout: an argv element
// "@scripts/train.py" names the copy a worker materialises (docs/protocol.md).
package scripts

import "embed"

// FS holds train.py and rlsched.py.
//
//go:embed *.py
var FS embed.FS
