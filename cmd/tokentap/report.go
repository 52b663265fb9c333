package main

import "io"

func runReport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("report", "not built yet in this version", stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	return notBuilt("report", stderr)
}
