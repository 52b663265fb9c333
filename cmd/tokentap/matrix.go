package main

import "io"

func runMatrix(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("matrix", "not built yet in this version", stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	return notBuilt("matrix", stderr)
}
