package core

// Version is set at build time with -ldflags "-X github.com/rlsched/rlsched/core.Version=...".
var Version = "0.1.0-dev"
