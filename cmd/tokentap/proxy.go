package main

import "io"

func runProxy(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("proxy", "not built yet in this version", stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	return notBuilt("proxy", stderr)
}
