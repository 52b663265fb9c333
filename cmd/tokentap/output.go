package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/report"
)

// Checks of what a command will write, made before any load is sent: a run
// that takes half an hour must not find at its end that it cannot keep its
// result.

// checkWritable makes sure a file can be created at path: its directory
// exists and takes a new file. It creates nothing that stays.
func checkWritable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory; give a file name", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("directory %s does not exist", dir)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".tokentap-check-*")
	if err != nil {
		return fmt.Errorf("cannot create files in %s: %w", dir, errors.Unwrap(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// checkResultPath checks a result file asked for by name: it must be
// writable, and an existing file is replaced only with overwrite (a
// result is the record of a long run; losing one by a reused name is
// worse than a refusal). flagName names the flag or variable for messages.
func checkResultPath(path, flagName string, overwrite bool) error {
	if st, err := os.Stat(path); err == nil && !st.IsDir() && !overwrite {
		return fmt.Errorf("%s %s: the file exists; give --overwrite to replace it, or another name", flagName, path)
	}
	if err := checkWritable(path); err != nil {
		return fmt.Errorf("%s %s: %w", flagName, path, err)
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
