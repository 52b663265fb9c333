package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tokentap/tokentap/cmd/tokentap/internal/outfile"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/report"
)

// Checks of what a command will write, made before any load is sent: a run
// that takes half an hour must not find at its end that it cannot keep its
// result.

// output checks an output flag's file before anything is sent or read
// for it (package outfile: "-" is stdout, links are written through,
// special files in place, an existing regular file is replaced only with
// overwrite, an input is never written over).
func output(name, flagName string, overwrite bool, inputs ...string) (outfile.Target, error) {
	var in []string
	for _, i := range inputs {
		if i != "" {
			in = append(in, i)
		}
	}
	return outfile.Resolve(name, outfile.Options{Flag: flagName, Overwrite: overwrite, Inputs: in})
}

// distinct refuses two outputs of one command that are one file (the
// result and the records written over each other).
func distinct(a, aFlag, b, bFlag string) error {
	if a != "" && b != "" && outfile.SameFile(a, b) {
		return fmt.Errorf("%s and %s are both %s: give each its own file", aFlag, bFlag, a)
	}
	return nil
}

// reserveResultName picks the default result name for a run started at
// now, tokentap-run-DATE-TIME.json in dir, and creates it empty so that a
// second run started in the same second cannot take it too: that one gets
// tokentap-run-DATE-TIME-2.json, and so on. The caller writes the result
// over it, or removes it when the run never started.
func reserveResultName(dir string, now time.Time) (string, error) {
	base := "tokentap-run-" + now.UTC().Format("20060102-150405")
	for i := 1; i < 1000; i++ {
		name := base + ".json"
		if i > 1 {
			name = base + "-" + strconv.Itoa(i) + ".json"
		}
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("cannot create the result file in %s: %w", dir, errors.Unwrap(err))
		}
		f.Close()
		return path, nil
	}
	return "", fmt.Errorf("999 results named %s already in %s", base, dir)
}

// checkFormat checks a report format (or "none", where allowed) before the
// run whose report it is.
func checkFormat(format, flagName string, none bool) error {
	if none && format == "none" {
		return nil
	}
	if _, err := report.ParseFormat(format); err != nil {
		if none {
			return fmt.Errorf("%s: %w, or none", flagName, err)
		}
		return fmt.Errorf("%s: %w", flagName, err)
	}
	return nil
}

// targetURL checks an engine URL given by flagName before anything is
// sent, and returns it normalized: a bare host:port is taken as
// http://host:port (what people type), a trailing /v1 is dropped.
func targetURL(raw, flagName string) (string, error) {
	base, _, err := engines.NormalizeBase(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	return base, nil
}
