package main

import "io"

func runFakeEngine(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("fake-engine", "not built yet in this version", stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	return notBuilt("fake-engine", stderr)
}
