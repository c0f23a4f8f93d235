// Package secure keeps rlsched's own state out of reach of the runs it starts
// and of other users of the machine: it creates and checks the directories
// and files that hold secrets and state (modes, owner), reads secrets from
// files only their owner can read, scrubs secrets from the environment that
// child processes inherit, and hides a server process from peers of its own
// uid (non-dumpable).
//
// What it must never do: change the mode of a directory that others share
// (sticky or world-writable, such as /tmp), take over a file or directory
// another uid owns, or read a secret from a file others can read.
package secure
