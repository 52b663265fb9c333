package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tokentap/tokentap/report"
	"github.com/tokentap/tokentap/result"
)

// reportConfig holds the report command's settings.
type reportConfig struct {
	Format      string `env:"REPORT_FORMAT"`
	Output      string `env:"REPORT_OUTPUT"`
	Percentiles string `env:"REPORT_PERCENTILES"`
}

const reportSummary = `Render a run's result document (the JSON a matrix run writes) as text, Markdown, CSV,
JSON or a self-contained HTML page; give two documents to compare them cell by cell.

  tokentap report run.json
  tokentap report run.json --format html -o run.html
  tokentap report before.json after.json --format md

Without --format the format follows the -o file's extension (.txt .md .csv .json .html),
else text.`

func runReport(args []string, stdout, stderr io.Writer) int {
	var cfg reportConfig
	if err := loadEnv(&cfg); err != nil {
		fmt.Fprintf(stderr, "tokentap report: %v\n", err)
		return 2
	}
	fset := newCLI("report", reportSummary, stdout, stderr)
	fset.StringVar(&cfg.Format, "format", cfg.Format, "text, md, csv, json or html [TOKENTAP_REPORT_FORMAT]")
	fset.StringVar(&cfg.Output, "o", cfg.Output, "write to this file instead of stdout [TOKENTAP_REPORT_OUTPUT]")
	fset.StringVar(&cfg.Percentiles, "percentiles", cfg.Percentiles, "latency percentiles to show, e.g. 50,90,99,99.9 (default: the run's, else 50,90,99) [TOKENTAP_REPORT_PERCENTILES]")
	// Flags may come before or after the file names.
	files, code, done := fset.parseArgs(args)
	if done {
		return code
	}
	if len(files) == 0 || len(files) > 2 {
		fmt.Fprintf(stderr, "tokentap report: give one result file to render or two to compare (got %d); see tokentap report --help\n", len(files))
		return 2
	}
	format := cfg.Format
	if format == "" {
		if f, ok := report.FormatForFile(cfg.Output); ok {
			format = f
		} else {
			format = "text"
		}
	}
	// Check what can be checked before reading anything.
	if err := checkFormat(format, fset.source("format"), false); err != nil {
		fmt.Fprintf(stderr, "tokentap report: %v\n", err)
		return exitUsage
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
	if cfg.Output != "" && cfg.Output != "-" {
		if err := checkWritable(cfg.Output); err != nil {
			fmt.Fprintf(stderr, "tokentap report: %s %s: %v\n", fset.source("o"), cfg.Output, err)
			return exitUsage
		}
	}
	var docs []*result.Result
	for _, f := range files {
		r, err := result.ReadFile(f)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(stderr, "tokentap report: %s does not exist: give the result file a matrix run wrote\n", f)
			} else {
				fmt.Fprintf(stderr, "tokentap report: cannot use %v\n", err)
			}
			return 1
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
		return 2
	}
	if cfg.Output == "" || cfg.Output == "-" {
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			fmt.Fprintf(stderr, "tokentap report: writing the report: %v\n", err)
			return 1
		}
		return 0
	}
	if err := os.WriteFile(cfg.Output, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "tokentap report: cannot write the report: %v\n", err)
		return 1
	}
	return 0
}
