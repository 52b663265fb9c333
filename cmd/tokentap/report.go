package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tokentap/tokentap/cmd/tokentap/internal/outfile"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/report"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/traffic"
)

// reportConfig holds the report command's settings.
type reportConfig struct {
	Format      string `env:"REPORT_FORMAT"`
	Output      string `env:"REPORT_OUTPUT"`
	Percentiles string `env:"REPORT_PERCENTILES"`
	Overwrite   bool   `env:"OVERWRITE"`
	Sort        string `env:"REPORT_SORT"`
	SLO         string `env:"REPORT_SLO"`
	Board       bool   `env:"REPORT_BOARD"`
}

const reportSummary = `Render a run's result document (the JSON a matrix run writes) as text, Markdown, CSV,
JSON or a self-contained HTML page; give two documents to compare them cell by cell.
Give three or more (or a directory of them, or --board) for a leaderboard of the runs and,
per context, the Pareto frontier of per-request against total tok/s over their Valid cells.
Given a proxy capture (the JSONL tokentap proxy --capture writes), it renders a traffic
summary: requests by model and outcome, tokens per second, and TTFT, time between tokens
and end-to-end percentiles.

  tokentap report run.json
  tokentap report run.json --format html -o run.html
  tokentap report before.json after.json --format md
  tokentap report runs/ --format html -o board.html
  tokentap report a.json b.json c.json --sort ttft --slo ttft=500ms,tbt=50ms
  tokentap report traffic.jsonl

Without --format the format follows the -o file's extension (.txt .md .csv .json .html),
else text.`

func runReport(args []string, stdout, stderr io.Writer) int {
	var cfg reportConfig
	if err := loadEnv(&cfg); err != nil {
		fmt.Fprintf(stderr, "tokentap report: %v\n", err)
		return exitUsage
	}
	fset := newCLI("report", reportSummary, stdout, stderr)
	fset.StringVar(&cfg.Format, "format", cfg.Format, "text, md, csv, json or html [TOKENTAP_REPORT_FORMAT]")
	fset.StringVar(&cfg.Output, "o", cfg.Output, "write to this file instead of stdout (- is stdout); an existing file is kept unless --overwrite [TOKENTAP_REPORT_OUTPUT]")
	fset.BoolVar(&cfg.Overwrite, "overwrite", cfg.Overwrite, "let -o replace an existing file (never one of the files read) [TOKENTAP_OVERWRITE]")
	fset.StringVar(&cfg.Percentiles, "percentiles", cfg.Percentiles, "latency percentiles to show, e.g. 50,90,99,99.9 (default: the run's, else 50,90,99) [TOKENTAP_REPORT_PERCENTILES]")
	fset.StringVar(&cfg.Sort, "sort", cfg.Sort, "with many runs (as a flag, even one or two): the leaderboard's column to sort by: "+report.SortColumns()+" [TOKENTAP_REPORT_SORT]")
	fset.StringVar(&cfg.SLO, "slo", cfg.SLO, "with many runs (as a flag, even one or two): keep on the Pareto frontiers only cells that meet these objectives, e.g. ttft=500ms,tbt=50ms,target=90% (judged per request where a run measured the same --slo, else from each cell's percentiles) [TOKENTAP_REPORT_SLO]")
	fset.BoolVar(&cfg.Board, "board", cfg.Board, "show the leaderboard and Pareto frontier even of one or two runs (two are otherwise compared cell by cell) [TOKENTAP_REPORT_BOARD]")
	// Flags may come before or after the file names.
	files, code, done := fset.parseArgs(args)
	if done {
		return code
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "tokentap report: give one result file to render, two to compare, or more (or a directory) for a leaderboard; see tokentap report --help\n")
		return exitUsage
	}
	format := report.Text
	if f, ok := report.FormatForFile(cfg.Output); ok {
		format = f
	}
	// Check what can be checked before reading anything.
	if cfg.Format != "" {
		f, err := report.ParseFormat(cfg.Format)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap report: %s: %v\n", fset.source("format"), err)
			return exitUsage
		}
		format = f
	}
	var opts report.Options
	if cfg.Percentiles != "" {
		ps, err := result.ParsePercentiles(cfg.Percentiles)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap report: %s %v\n", fset.source("percentiles"), err)
			return exitUsage
		}
		opts.Percentiles = ps
	}
	out := outfile.Target{Kind: outfile.Stdout}
	if cfg.Output != "" {
		var err error
		if out, err = output(cfg.Output, fset.source("o"), cfg.Overwrite, files...); err != nil {
			fmt.Fprintf(stderr, "tokentap report: %v\n", err)
			return exitUsage
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "tokentap report: %s does not exist: give the result file a matrix run wrote, or a proxy capture\n", f)
			return exitUsage
		}
	}
	// --sort and --slo on the command line ask for a board; their
	// variables only set a board's defaults, so one set in a shell for
	// boards leaves a single run's report and a comparison as they are.
	if cfg.Board || len(files) > 2 || hasDir(files) || fset.given("sort") || fset.given("slo") {
		return reportBoard(files, cfg, format, out, stdout, stderr)
	}
	for _, f := range files {
		if !isCapture(f) {
			continue
		}
		if len(files) == 2 {
			fmt.Fprintf(stderr, "tokentap report: %s is a proxy capture: a capture is summarised alone; comparing takes two result files\n", f)
			return exitUsage
		}
		return reportCapture(f, format, opts, out, stdout, stderr)
	}
	var docs []*result.Result
	for _, f := range files {
		r, err := result.ReadFile(f)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap report: cannot use %v\n", err)
			return exitUsage
		}
		docs = append(docs, r)
	}
	var buf bytes.Buffer
	var err error
	if len(docs) == 1 {
		err = report.RenderWith(&buf, docs[0], format, opts)
	} else {
		err = report.CompareLabeled(&buf, docs[0], docs[1], filepath.Base(files[0]), filepath.Base(files[1]), format)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tokentap report: %v\n", err)
		return exitUsage
	}
	return writeReport(buf.Bytes(), out, stdout, stderr)
}

// writeReport writes a rendered report to its output (stdout, or -o's
// file through package outfile).
func writeReport(b []byte, out outfile.Target, stdout, stderr io.Writer) int {
	err := out.Write(stdout, func(w io.Writer) error { _, err := w.Write(b); return err })
	if err != nil {
		fmt.Fprintf(stderr, "tokentap report: cannot write the report: %v\n", err)
		return exitError
	}
	return exitOK
}

// isCapture reports whether path holds JSONL records (a proxy capture, a
// replay's --records) rather than a result document: its first line is a
// JSON object with a record's fields.
func isCapture(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a record of a long stream is a long line
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var probe map[string]json.RawMessage
		if json.Unmarshal(line, &probe) != nil {
			return false
		}
		_, sent := probe["sent_ns"]
		_, v := probe["v"]
		return sent && v
	}
	return false
}

// reportCapture renders the traffic summary of a capture.
func reportCapture(path string, format report.Format, o report.Options, output outfile.Target, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap report: %v\n", err)
		return exitUsage
	}
	recs, err := record.ReadAll(f)
	f.Close()
	if errors.Is(err, record.ErrTornLine) && len(recs) > 0 {
		fmt.Fprintf(stderr, "tokentap report: %s: skipped 1 torn last line (the proxy stopped mid-write); the summary covers the %d whole records\n", path, len(recs))
		err = nil
	}
	if err != nil {
		fmt.Fprintf(stderr, "tokentap report: %s: %v (after %d good records)\n", path, err, len(recs))
		return exitUsage
	}
	if len(recs) == 0 {
		fmt.Fprintf(stderr, "tokentap report: %s holds no records\n", path)
		return exitUsage
	}
	var buf bytes.Buffer
	if err := report.RenderTraffic(&buf, traffic.Summarize(recs, o.Percentiles), format, filepath.Base(path)); err != nil {
		fmt.Fprintf(stderr, "tokentap report: %v\n", err)
		return exitUsage
	}
	return writeReport(buf.Bytes(), output, stdout, stderr)
}
