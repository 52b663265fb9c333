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
	"strings"

	"github.com/tokentap/tokentap/merge"
	"github.com/tokentap/tokentap/result"
)

// mergeConfig holds the merge command's settings.
type mergeConfig struct {
	Out     string `env:"MERGE_OUT"`
	Records string `env:"MERGE_RECORDS"`
	Quiet   bool   `env:"QUIET"`
}

const mergeSummary = `Merge the result documents of a sharded run's shards (tokentap matrix --shard I/N, each
run on its own machine or pod with the same --start-at) into one run, which tokentap report
renders like any other. Histograms merge exactly, counters add, each cell takes the worst
status of its shards (docs/METHOD.md §10). Shards of different runs, with different settings
or engine facts, or whose windows do not overlap are refused, with the reason.

  tokentap merge shard-0.json shard-1.json shard-2.json -o run.json
  tokentap merge shard-*.json shard-*.jsonl -o run.json --records run.jsonl

Record files (tokentap matrix --records) given among the files are concatenated into
--records. Without -o the merged document goes to stdout.`

func runMerge(args []string, stdout, stderr io.Writer) int {
	var cfg mergeConfig
	if err := loadEnv(&cfg); err != nil {
		fmt.Fprintf(stderr, "tokentap merge: %v\n", err)
		return 2
	}
	fset := newCLI("merge", mergeSummary, stdout, stderr)
	fset.StringVar(&cfg.Out, "o", cfg.Out, "write the merged result document here (default: stdout) [TOKENTAP_MERGE_OUT]")
	fset.StringVar(&cfg.Out, "out", cfg.Out, "same as -o")
	fset.StringVar(&cfg.Records, "records", cfg.Records, "write the shards' records, concatenated, here (JSONL) [TOKENTAP_MERGE_RECORDS]")
	fset.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "no summary on stderr [TOKENTAP_QUIET]")
	files, code, done := fset.parseArgs(args)
	if done {
		return code
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "tokentap merge: give the shards' result files (see tokentap merge --help)\n")
		return 2
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
			return exitError
		}
		if isRec {
			recFile = append(recFile, f)
			continue
		}
		doc, err := result.ReadFile(f)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap merge: cannot use %v\n", err)
			return 1
		}
		ins = append(ins, merge.Input{Name: f, Doc: doc})
	}
	if len(recFile) > 0 && cfg.Records == "" {
		fmt.Fprintf(stderr, "tokentap merge: record files given (%s): name the merged records file with --records FILE\n", strings.Join(recFile, ", "))
		return 2
	}
	if len(ins) == 0 {
		fmt.Fprintf(stderr, "tokentap merge: no result documents among the files: give the shards' results (tokentap matrix --out)\n")
		return 2
	}
	run, sum, err := merge.Runs(ins)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap merge: refused: %v\n", err)
		return 1
	}
	if len(recFile) > 0 {
		if err := mergeRecords(cfg.Records, run, recFile); err != nil {
			fmt.Fprintf(stderr, "tokentap merge: records: %v\n", err)
			return 1
		}
	}
	if cfg.Out == "" || cfg.Out == "-" {
		if err := run.Write(stdout); err != nil {
			fmt.Fprintf(stderr, "tokentap merge: %v\n", err)
			return 1
		}
	} else if err := run.WriteFile(cfg.Out); err != nil {
		fmt.Fprintf(stderr, "tokentap merge: writing %s: %v\n", cfg.Out, err)
		return 1
	}
	if !cfg.Quiet {
		fmt.Fprintf(stderr, "tokentap merge: %d shards of run %s merged into one run of %d cells; histograms merged exactly (%d values dropped)",
			sum.Shards, run.Sharding.Run, len(run.Decode), sum.Dropped)
		if sum.ClockSpreadMs > 0 {
			fmt.Fprintf(stderr, "; shard clocks within %.1f ms of each other", sum.ClockSpreadMs)
		}
		fmt.Fprintln(stderr)
		if cfg.Out != "" && cfg.Out != "-" {
			fmt.Fprintf(stderr, "tokentap merge: render it with: tokentap report %s\n", cfg.Out)
		}
	}
	return 0
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
// (through a temporary file, so a refused merge leaves nothing behind).
func mergeRecords(out string, run *result.Result, paths []string) error {
	var files []merge.RecordFile
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		files = append(files, merge.RecordFile{Name: p, R: f})
	}
	tmp := out + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := merge.Records(w, run, files); err != nil {
		w.Close()
		os.Remove(tmp)
		return err
	}
	if err := w.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}
