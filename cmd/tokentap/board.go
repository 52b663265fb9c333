package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tokentap/tokentap/cmd/tokentap/internal/outfile"
	"github.com/tokentap/tokentap/report"
	"github.com/tokentap/tokentap/result"
)

// hasDir reports whether any of the arguments is a directory.
func hasDir(files []string) bool {
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// reportBoard renders the leaderboard and Pareto frontiers of many runs:
// the files given, and every .json file of a directory given (not its
// subdirectories). A file given by name must be a result document; a
// directory's JSON file that is none is listed on the board as not read,
// with why.
func reportBoard(args []string, cfg reportConfig, format report.Format, out outfile.Target, stdout, stderr io.Writer) int {
	o := report.BoardOptions{Sort: cfg.Sort}
	if cfg.SLO != "" {
		spec, err := parseSLO(cfg.SLO)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap report: %v\n", err)
			return exitUsage
		}
		o.SLO = spec
	}
	var runs []report.BoardRun
	for _, a := range args {
		if st, err := os.Stat(a); err == nil && st.IsDir() {
			entries, err := os.ReadDir(a)
			if err != nil {
				fmt.Fprintf(stderr, "tokentap report: %v\n", err)
				return exitUsage
			}
			var found int
			for _, e := range entries {
				name := filepath.Join(a, e.Name())
				if e.IsDir() || !strings.EqualFold(filepath.Ext(name), ".json") {
					continue
				}
				found++
				if isCapture(name) {
					o.Skipped = append(o.Skipped, report.BoardSkipped{File: name, Why: "a proxy capture (report it alone)"})
					continue
				}
				r, err := result.ReadFile(name)
				if err != nil {
					o.Skipped = append(o.Skipped, report.BoardSkipped{File: name, Why: strings.TrimPrefix(err.Error(), name+": ")})
					continue
				}
				runs = append(runs, report.BoardRun{File: name, Result: r})
			}
			if found == 0 {
				fmt.Fprintf(stderr, "tokentap report: %s holds no .json file: give the directory the matrix runs' --out files are in\n", a)
				return exitUsage
			}
			continue
		}
		if isCapture(a) {
			fmt.Fprintf(stderr, "tokentap report: %s is a proxy capture: a capture is summarised alone; a leaderboard takes result files\n", a)
			return exitUsage
		}
		r, err := result.ReadFile(a)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap report: cannot use %v\n", err)
			return exitUsage
		}
		runs = append(runs, report.BoardRun{File: a, Result: r})
	}
	if len(runs) == 0 {
		var l []string
		for _, s := range o.Skipped {
			l = append(l, s.File+": "+s.Why)
		}
		fmt.Fprintf(stderr, "tokentap report: no result document among the files found (%s)\n", strings.Join(l, "; "))
		return exitUsage
	}
	// Outputs never overwrite an input, directories' files included.
	if out.Kind != outfile.Stdout {
		for _, r := range runs {
			if same(r.File, cfg.Output) {
				fmt.Fprintf(stderr, "tokentap report: -o %s is one of the runs read\n", cfg.Output)
				return exitUsage
			}
		}
	}
	var buf bytes.Buffer
	if err := report.RenderBoard(&buf, runs, format, o); err != nil {
		fmt.Fprintf(stderr, "tokentap report: %v\n", err)
		return exitUsage
	}
	return writeReport(buf.Bytes(), out, stdout, stderr)
}

// same reports whether two paths name one file.
func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
