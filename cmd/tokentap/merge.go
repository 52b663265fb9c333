package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/tokentap/tokentap/cmd/tokentap/internal/outfile"
	"github.com/tokentap/tokentap/merge"
	"github.com/tokentap/tokentap/result"
)

// mergeConfig holds the merge command's settings.
type mergeConfig struct {
	Out       string `env:"MERGE_OUT"`
	Records   string `env:"MERGE_RECORDS_OUT"`
	Quiet     bool   `env:"QUIET"`
	Overwrite bool   `env:"OVERWRITE"`
}

const mergeSummary = `Merge the result documents of a sharded run's shards (tokentap matrix --shard I/N, each
run on its own machine or pod, started together by --rendezvous or --start-at) into one run, which tokentap report
renders like any other. Histograms merge exactly, counters add, each cell takes the worst
status of its shards (docs/METHOD.md §10). Shards of different runs, with different settings
or engine facts, or whose windows do not overlap are refused, with the reason.

  tokentap merge shard-0.json shard-1.json shard-2.json -o run.json
  tokentap merge shard-*.json shard-*.jsonl -o run.json --records-out run.jsonl
  tokentap merge shard-*.log -o run.json      # kubectl logs of shards run with --format=json

The shards' record files (tokentap matrix --records) go among the files to merge, beside
their results; --records-out names the one file they are concatenated into. Without -o
(or with -o -) the merged document goes to stdout. An existing file is kept unless
--overwrite, no output may be one of the files merged, and each output is named once.`

func runMerge(args []string, stdout, stderr io.Writer) int {
	var cfg mergeConfig
	if err := loadEnv(&cfg); err != nil {
		fmt.Fprintf(stderr, "tokentap merge: %v\n", err)
		return exitUsage
	}
	fset := newCLI("merge", mergeSummary, stdout, stderr)
	out1 := &onceString{p: &cfg.Out, name: "-o/--out"}
	fset.Var(out1, "o", "write the merged result document here (default: stdout) [TOKENTAP_MERGE_OUT]")
	fset.Var(out1, "out", "same as -o")
	// --records was this flag's name; it read as taking the shards'
	// record files, which go among the files merged. Kept as a synonym:
	// an output is never one of the files merged, and an existing file is
	// kept unless --overwrite, so the misreading cannot lose a file.
	rec1 := &onceString{p: &cfg.Records, name: "--records-out"}
	fset.Var(rec1, "records-out", "write the merged records here (JSONL): the shards' record files, given among the files to merge, concatenated [TOKENTAP_MERGE_RECORDS_OUT]")
	fset.Var(rec1, "records", "old name of --records-out")
	fset.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "no summary on stderr [TOKENTAP_QUIET]")
	fset.BoolVar(&cfg.Overwrite, "overwrite", cfg.Overwrite, "let -o and --records replace existing files (never one of the files merged) [TOKENTAP_OVERWRITE]")
	files, code, done := fset.parseArgs(args)
	if done {
		return code
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "tokentap merge: give the shards' result files (see tokentap merge --help)\n")
		return exitUsage
	}
	// The outputs are checked before anything is read: never a file
	// merged, never each other, an existing file kept unless --overwrite.
	if err := distinct(cfg.Out, fset.source("o"), cfg.Records, recSource(fset)); err != nil {
		fmt.Fprintf(stderr, "tokentap merge: %v\n", err)
		return exitUsage
	}
	out := outfile.Target{Kind: outfile.Stdout}
	var recOut outfile.Target
	if cfg.Out != "" {
		var err error
		if out, err = output(cfg.Out, fset.source("o"), cfg.Overwrite, files...); err != nil {
			fmt.Fprintf(stderr, "tokentap merge: %v\n", err)
			return exitUsage
		}
	}
	if cfg.Records != "" {
		var err error
		if recOut, err = output(cfg.Records, recSource(fset), cfg.Overwrite, files...); err != nil {
			fmt.Fprintf(stderr, "tokentap merge: %v\n", err)
			return exitUsage
		}
	}
	var (
		ins     []merge.Input
		recFile []string
	)
	for _, f := range files {
		isRec, err := isRecordFile(f)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(stderr, "tokentap merge: %s does not exist\n", f)
				return exitUsage
			}
			fmt.Fprintf(stderr, "tokentap merge: %v\n", err)
			return exitUsage
		}
		if isRec {
			recFile = append(recFile, f)
			continue
		}
		doc, err := readShard(f)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap merge: cannot use %v\n", err)
			return exitUsage
		}
		ins = append(ins, merge.Input{Name: f, Doc: doc})
	}
	if len(recFile) > 0 && cfg.Records == "" {
		fmt.Fprintf(stderr, "tokentap merge: record files given (%s): name the one file they are merged into with --records-out FILE\n", strings.Join(recFile, ", "))
		return exitUsage
	}
	if len(recFile) == 0 && cfg.Records != "" {
		fmt.Fprintf(stderr, "tokentap merge: %s %s: no record files among the files to merge: it is where they are merged into, and the shards' record files (tokentap matrix --records, .jsonl) go among the files to merge, e.g. tokentap merge shard-*.json shard-*.jsonl -o run.json --records-out run.jsonl\n", recSource(fset), cfg.Records)
		return exitUsage
	}
	if len(ins) == 0 {
		fmt.Fprintf(stderr, "tokentap merge: no result documents among the files: give the shards' results (tokentap matrix --out)\n")
		return exitUsage
	}
	run, sum, err := merge.Runs(ins)
	if err != nil {
		// Shards of different runs or settings: the files given are wrong.
		fmt.Fprintf(stderr, "tokentap merge: refused: %v\n", err)
		return exitUsage
	}
	if len(recFile) > 0 {
		if err := mergeRecords(recOut, stdout, run, recFile); err != nil {
			fmt.Fprintf(stderr, "tokentap merge: records: %v\n", err)
			var we writeError
			if errors.As(err, &we) {
				return exitError // the output failed, not the shards
			}
			return exitUsage
		}
	}
	if err := out.Write(stdout, run.Write); err != nil {
		fmt.Fprintf(stderr, "tokentap merge: writing %s: %v\n", cmp.Or(cfg.Out, "the merged document"), err)
		return exitError
	}
	if !cfg.Quiet {
		fmt.Fprintf(stderr, "tokentap merge: %d shards of run %s merged into one run of %d cells; histograms merged exactly (%d values dropped)",
			sum.Shards, run.Sharding.Run, len(run.Decode), sum.Dropped)
		if sum.ClockSpreadMs > 0 {
			fmt.Fprintf(stderr, "; shard clocks within %.1f ms of each other", sum.ClockSpreadMs)
		}
		fmt.Fprintln(stderr)
		if out.Kind != outfile.Stdout {
			fmt.Fprintf(stderr, "tokentap merge: render it with: tokentap report %s\n", cfg.Out)
		}
	}
	return 0
}

// readShard reads a shard's result document: a file tokentap matrix --out
// wrote, or a pod's log (kubectl logs) of a shard that printed it on stdout
// (--format=json), its stderr lines among the document's.
func readShard(path string) (*result.Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := result.Read(bytes.NewReader(b))
	if err == nil {
		return doc, nil
	}
	if inLog, ok := fromLog(b); ok {
		if doc, lerr := result.Read(bytes.NewReader(inLog)); lerr == nil {
			return doc, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", path, err)
}

// fromLog takes the result document out of a log that holds it among
// other lines: a container's log interleaves stdout and stderr line by
// line. The document (indented JSON) opens with a line "{", closes with a
// line "}", and every line between is indented; a stderr line (tokentap's
// messages, log lines) is not, so it is left out wherever it fell. Whatever
// is taken is then read as a document, with all its checks.
func fromLog(b []byte) ([]byte, bool) {
	var (
		out     []byte
		in, end bool
	)
	for line := range bytes.Lines(b) {
		l := bytes.TrimRight(line, "\r\n")
		switch {
		case !in && string(l) == "{":
			if end {
				return nil, false // two documents: which shard is this?
			}
			in = true
			out = append(out, "{\n"...)
		case in && string(l) == "}":
			in, end = false, true
			out = append(out, "}\n"...)
		case in && len(l) > 0 && (l[0] == ' ' || l[0] == '\t'):
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out, end && !in
}

// isRecordFile tells a records file (JSONL, one record a line) from a
// result document: a record's first line is a whole JSON object with a
// sent_ns; a result document (indented, or not) is not.
func isRecordFile(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	line, err := br.ReadSlice('\n')
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	line = bytes.TrimSpace(line)
	if !json.Valid(line) {
		return false, nil
	}
	var probe struct {
		SentNS *int64 `json:"sent_ns"`
	}
	return json.Unmarshal(line, &probe) == nil && probe.SentNS != nil, nil
}

// mergeRecords writes the record files, concatenated and checked, to out
// (a regular file through a temporary one, so a refused merge leaves
// nothing behind).
func mergeRecords(out outfile.Target, stdout io.Writer, run *result.Result, paths []string) error {
	var files []merge.RecordFile
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		files = append(files, merge.RecordFile{Name: p, R: f})
	}
	return out.Write(stdout, func(w io.Writer) error {
		cw := &checkedWriter{w: w}
		_, err := merge.Records(cw, run, files)
		if cw.err != nil {
			return writeError{cw.err}
		}
		return err
	})
}

// writeError is a failure to write an output (exit 1), told from a record
// file that does not fit the run (exit 2).
type writeError struct{ err error }

func (e writeError) Error() string { return "writing: " + e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

// checkedWriter remembers its writer's first error.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// recSource names the flag (or variable) the merged records' file came
// from: --records-out, its old name --records, or the variable.
func recSource(fs *cli) string {
	if fs.given("records") {
		return "--records"
	}
	return fs.source("records-out")
}

// onceString is a string flag that refuses to be given twice (under any
// of its names): of an output repeated, the flag package kept the last
// and said nothing.
type onceString struct {
	p    *string
	name string
	set  bool
}

func (o *onceString) String() string {
	if o == nil || o.p == nil {
		return ""
	}
	return *o.p
}

func (o *onceString) Set(v string) error {
	if o.set {
		return fmt.Errorf("%s given twice (%s and %s): name one output file", o.name, *o.p, v)
	}
	o.set, *o.p = true, v
	return nil
}
