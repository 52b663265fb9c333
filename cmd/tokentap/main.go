// Command tokentap measures how fast an OpenAI-compatible inference engine
// really is: a measuring reverse proxy, a load generator that runs the speed
// test matrix, and reports. Each subcommand lives in its own file; this file
// only dispatches.
package main

import (
	"fmt"
	"io"
	"os"
)

// Stamped at build time by the Makefile (-ldflags -X).
var (
	version = "dev"
	commit  = ""
	date    = ""
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"matrix", "run the speed test matrix against an engine (the built-in fake when no --target)", runMatrix},
		{"proxy", "measuring reverse proxy in front of an engine", runProxy},
		{"replay", "replay a proxy capture against an engine with its original timing", runReplay},
		{"report", "render a run's result as text, Markdown, CSV, JSON or HTML; compare two runs", runReport},
		{"merge", "merge the results of a sharded run's shards into one run", runMerge},
		{"fake-engine", "serve the built-in fake engine (vLLM-like, known timing) for trying tokentap without a GPU", runFakeEngine},
		{"version", "print version, commit and build date", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "tokentap measures how fast an OpenAI-compatible inference engine really is.\n\nUsage:\n  tokentap <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'tokentap <command> --help' for a command's flags. Every flag can also be set\nwith a TOKENTAP_* environment variable (shown in each command's help); flags win.\n")
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-version", "--version":
		return runVersion(nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "tokentap: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "print version, commit and build date", stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	c, d := commit, date
	if c == "" {
		c = "unknown"
	}
	if d == "" {
		d = "unknown"
	}
	fmt.Fprintf(stdout, "tokentap %s (commit %s, built %s)\n", version, c, d)
	return 0
}
