package main

import "io"

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("replay", "not built yet in this version", stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	return notBuilt("replay", stderr)
}
