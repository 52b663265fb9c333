// Package outfile writes a command's output file the way the user meant the
// name: "-" (and /dev/stdout) is standard output; a symbolic link is
// written through to its target and stays a link; a file that is not a
// regular one (a FIFO, a device such as /dev/null or /dev/full, a file
// reached through /proc or /dev/fd) is written in place; only a regular
// file (or a new one) is written to a temporary file beside it and renamed
// over it, so a reader never sees half a document and a failed write
// leaves the old file whole.
//
// Every check happens in Resolve, before a long run: the file can be
// written, an existing regular file is replaced only when the caller
// allows it, and an output is never one of the command's inputs (compared
// by os.SameFile, so another name for the same file is caught too).
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kind is how an output is written.
type Kind int

const (
	// Stdout: "-" or a name of the process's standard output.
	Stdout Kind = iota
	// Replace: a regular file, or none yet: a temporary file beside it,
	// renamed over it.
	Replace
	// InPlace: an existing file that is not a regular one (FIFO, device,
	// a /proc or /dev/fd name): opened and written as it is.
	InPlace
)

// Target is one output, resolved.
type Target struct {
	Given string // the name as given
	Path  string // the file written: Given with its symbolic links followed
	Kind  Kind
	// Exists: a regular file is at Path already (it will be replaced).
	Exists bool
}

// stdoutNames are names of the process's own standard output: writing them
// is writing stdout (opening them anew would truncate a redirected file, or
// fail on a socket).
var stdoutNames = map[string]bool{"-": true, "/dev/stdout": true, "/dev/fd/1": true, "/proc/self/fd/1": true}

// stderrNames are the process's standard error's: written through its
// open descriptor, for the same reasons.
var stderrNames = map[string]bool{"/dev/stderr": true, "/dev/fd/2": true, "/proc/self/fd/2": true}

// Options are the rules of one output.
type Options struct {
	// Flag names the flag or variable the name came from, for messages.
	Flag string
	// Overwrite lets an existing regular file be replaced.
	Overwrite bool
	// Inputs are the files the command reads: the output must be none of
	// them, whatever Overwrite says.
	Inputs []string
	// NoStdout refuses "-" (for an output that goes beside stdout's own).
	NoStdout bool
}

// Resolve checks an output before anything is sent or read for it.
func Resolve(name string, o Options) (Target, error) {
	t := Target{Given: name}
	flag := o.Flag
	if flag != "" {
		flag += " "
	}
	if stdoutNames[name] {
		if o.NoStdout {
			return t, fmt.Errorf("%s%s: standard output carries the report already; give a file name", flag, name)
		}
		t.Kind = Stdout
		return t, nil
	}
	path, err := follow(name)
	if err != nil {
		return t, fmt.Errorf("%s%s: %w", flag, name, err)
	}
	t.Path = path
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return t, fmt.Errorf("%s%s is a directory; give a file name", flag, name)
	case err == nil && !st.Mode().IsRegular(), err == nil && throughProc(name, path):
		t.Kind = InPlace
	case err == nil:
		t.Kind, t.Exists = Replace, true
	case errors.Is(err, fs.ErrNotExist):
		t.Kind = Replace
	default:
		return t, fmt.Errorf("%s%s: %w", flag, name, err)
	}
	for _, in := range o.Inputs {
		if SameFile(name, in) {
			return t, fmt.Errorf("%s%s is the input %s: a command never writes over what it reads; give another name", flag, name, in)
		}
	}
	if t.Exists && !o.Overwrite {
		return t, fmt.Errorf("%s%s: the file exists; give --overwrite to replace it, or another name", flag, name)
	}
	if t.Kind == InPlace {
		if err := syscall.Access(path, 2); err != nil { // W_OK
			return t, fmt.Errorf("%s%s: cannot write it: %w", flag, name, err)
		}
		return t, nil
	}
	if err := checkDir(path); err != nil {
		return t, fmt.Errorf("%s%s: %w", flag, name, err)
	}
	return t, nil
}

// throughProc reports whether a name reaches its file through /proc or
// /dev/fd, whose links name open files rather than paths to rename over.
func throughProc(name, path string) bool {
	for _, p := range []string{name, path} {
		if strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/dev/fd/") {
			return true
		}
	}
	return false
}

// follow follows the symbolic links of name's last element (a link to a
// link too) and returns the file they end at, which may not exist yet.
// Links in the directories above need no following: a rename in the
// final directory goes through them.
func follow(name string) (string, error) {
	p := name
	for range 40 {
		st, err := os.Lstat(p)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		if strings.HasPrefix(p, "/proc/") {
			return p, nil // a magic link: "pipe:[…]" is no path
		}
		dest, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(p), dest)
		}
		p = dest
	}
	return "", errors.New("too many levels of symbolic links")
}

// checkDir makes sure a file can be created beside path: its directory
// exists and takes a new file. It leaves nothing behind.
func checkDir(path string) error {
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

// SameFile reports whether names a and b are one file: the same path once
// cleaned, or, where both exist, the same file by device and inode (a
// link, a hard link, another spelling). Two names of standard output are
// the same file.
func SameFile(a, b string) bool {
	if stdoutNames[a] && stdoutNames[b] {
		return true
	}
	if pa, err := filepath.Abs(a); err == nil {
		if pb, err := filepath.Abs(b); err == nil && pa == pb {
			return true
		}
	}
	sa, err := os.Stat(a)
	if err != nil {
		return sameNew(a, b)
	}
	sb, err := os.Stat(b)
	if err != nil {
		return sameNew(a, b)
	}
	return os.SameFile(sa, sb)
}

// sameNew compares names of which one does not exist yet by where their
// links lead.
func sameNew(a, b string) bool {
	fa, err1 := follow(a)
	fb, err2 := follow(b)
	if err1 != nil || err2 != nil {
		return false
	}
	pa, err1 := filepath.Abs(fa)
	pb, err2 := filepath.Abs(fb)
	return err1 == nil && err2 == nil && pa == pb
}

// File is an output being written: Commit makes it the output (renames a
// regular file's temporary file over it), Abort drops what was written to
// a temporary file.
type File struct {
	t   Target
	w   io.Writer
	f   *os.File // nil for stdout
	tmp string   // the temporary file (Replace)
}

// Create opens the output for writing; stdout is the process's standard
// output (or what the command writes it to).
func (t Target) Create(stdout io.Writer) (*File, error) {
	switch t.Kind {
	case Stdout:
		return &File{t: t, w: stdout}, nil
	case InPlace:
		if stderrNames[t.Given] {
			return &File{t: t, w: os.Stderr}, nil
		}
		// O_TRUNC is ignored by FIFOs and devices; a regular file reached
		// through /proc is rewritten, as a shell's > would.
		f, err := os.OpenFile(t.Path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return nil, err
		}
		return &File{t: t, w: f, f: f}, nil
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(t.Path); err == nil {
		mode = st.Mode().Perm() // a replaced file keeps its mode
	}
	f, err := os.CreateTemp(filepath.Dir(t.Path), "."+filepath.Base(t.Path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{t: t, w: f, f: f, tmp: f.Name()}, nil
}

// Write writes to the output.
func (f *File) Write(p []byte) (int, error) { return f.w.Write(p) }

// Commit closes the output; a regular file's temporary file replaces it.
func (f *File) Commit() error {
	if f.f == nil {
		return nil
	}
	if err := f.f.Close(); err != nil {
		f.Abort()
		return err
	}
	if f.tmp == "" {
		return nil
	}
	if err := os.Rename(f.tmp, f.t.Path); err != nil {
		os.Remove(f.tmp)
		return err
	}
	return nil
}

// Abort gives the output up: a temporary file is removed, the old file
// (if any) stays as it was.
func (f *File) Abort() {
	if f.f != nil {
		f.f.Close()
	}
	if f.tmp != "" {
		os.Remove(f.tmp)
	}
}

// Write writes the whole output with write, committing only when it
// succeeded.
func (t Target) Write(stdout io.Writer, write func(io.Writer) error) error {
	f, err := t.Create(stdout)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}
