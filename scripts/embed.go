// Package scripts ships the Python helpers inside the binary, so every
// worker can run the default trainer without a checkout: an argv element
// "@scripts/train.py" names the copy a worker materialises (docs/protocol.md).
// The Python here uses the standard library only and must never reach for a
// package a lab's machine may not have (PyPI may be out of reach).
package scripts

import "embed"

// FS holds train.py and rlsched.py.
//
//go:embed *.py
var FS embed.FS
