// Command tokentap measures how fast an OpenAI-compatible inference engine
// really is: a measuring reverse proxy, a load generator that runs the speed
// test matrix, and reports. Each subcommand lives in its own file; this file
// only dispatches.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/tokentap/tokentap/scenarios"
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
	fmt.Fprintf(w, "\nRun 'tokentap help <command>' (or 'tokentap <command> --help') for a command's flags.\nEvery flag can also be set with a TOKENTAP_* environment variable (shown in each\ncommand's help); flags win.\n\n%s", exitCodesHelp)
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help":
		if len(args) > 1 { // "tokentap help matrix" is "tokentap matrix --help"
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		return runVersion(nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	msg := fmt.Sprintf("tokentap: unknown command %q", args[0])
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	if s := nearestWord(args[0], names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	fmt.Fprintf(stderr, "%s\n\n", msg)
	usage(stderr)
	return exitUsage
}

// nearestWord is the word of known closest to s (at most 2 edits), or "".
func nearestWord(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := scenarios.Distance(strings.ToLower(s), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newCLI("version", "print version, commit and build date", stdout, stderr)
	if code, done := fs.parse(args); done {
		return code
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(version, commit, date, info))
	return exitOK
}

// versionLine is "tokentap VERSION (commit C, built D)". The Makefile
// stamps all three; a plain go build or go install has none of them, so
// they come from what Go embeds: the module version (go install …@v1.2.3)
// and the checkout's revision and commit time (go build in a git checkout,
// unless -buildvcs=false), "+dirty" when it had uncommitted changes.
func versionLine(version, commit, date string, info *debug.BuildInfo) string {
	if info != nil {
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			version = info.Main.Version
		}
		if commit == "" && settings["vcs.revision"] != "" {
			commit = settings["vcs.revision"]
			if len(commit) > 12 {
				commit = commit[:12]
			}
			if settings["vcs.modified"] == "true" {
				commit += "+dirty"
			}
		}
		if date == "" && settings["vcs.time"] != "" {
			date = settings["vcs.time"] + " (commit time)"
		}
	}
	unstamped := version == "dev" && commit == ""
	if commit == "" {
		commit = "unknown"
	}
	if date == "" {
		date = "unknown"
	}
	line := fmt.Sprintf("tokentap %s (commit %s, built %s)", version, commit, date)
	if unstamped {
		// Go embeds the commit only in go build of a git clone (not go
		// run, not a git worktree, not with -buildvcs=false in GOFLAGS).
		line += "; not stamped: go run, GOFLAGS=-buildvcs=false or a git worktree leave Go nothing to embed, make build stamps all three"
	}
	return line
}
