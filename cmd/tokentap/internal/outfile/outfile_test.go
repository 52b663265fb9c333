package outfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestResolveAndWrite(t *testing.T) {
	type setup func(t *testing.T, dir string) (name string, o Options)
	plain := func(name string, o Options) setup {
		return func(t *testing.T, dir string) (string, Options) { return filepath.Join(dir, name), o }
	}
	write := func(t *testing.T, p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name     string
		setup    setup
		kind     Kind
		refuse   string // part of Resolve's error, "" when accepted
		check    func(t *testing.T, dir, name string, stdout string)
		writeErr bool
	}{
		{name: "new file", setup: plain("new.json", Options{}), kind: Replace,
			check: func(t *testing.T, dir, name, _ string) { wantContent(t, name, "DOC") }},
		{name: "existing file without overwrite", setup: func(t *testing.T, dir string) (string, Options) {
			p := filepath.Join(dir, "old.json")
			write(t, p, "OLD")
			return p, Options{Flag: "-o"}
		}, refuse: "-o "},
		{name: "existing file with overwrite keeps its mode", setup: func(t *testing.T, dir string) (string, Options) {
			p := filepath.Join(dir, "old.json")
			write(t, p, "OLD")
			return p, Options{Overwrite: true}
		}, kind: Replace, check: func(t *testing.T, dir, name, _ string) {
			wantContent(t, name, "DOC")
			if st, _ := os.Stat(name); st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600 kept", st.Mode().Perm())
			}
		}},
		{name: "symbolic link is written through and stays a link", setup: func(t *testing.T, dir string) (string, Options) {
			write(t, filepath.Join(dir, "target.json"), "{}")
			l := filepath.Join(dir, "link.json")
			if err := os.Symlink("target.json", l); err != nil {
				t.Fatal(err)
			}
			return l, Options{Overwrite: true}
		}, kind: Replace, check: func(t *testing.T, dir, name, _ string) {
			if st, err := os.Lstat(name); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the link was replaced: %v %v", st, err)
			}
			wantContent(t, filepath.Join(dir, "target.json"), "DOC")
		}},
		{name: "link to an existing file needs overwrite", setup: func(t *testing.T, dir string) (string, Options) {
			write(t, filepath.Join(dir, "target.json"), "{}")
			l := filepath.Join(dir, "link.json")
			if err := os.Symlink("target.json", l); err != nil {
				t.Fatal(err)
			}
			return l, Options{}
		}, refuse: "the file exists"},
		{name: "dangling link creates its target", setup: func(t *testing.T, dir string) (string, Options) {
			l := filepath.Join(dir, "link.json")
			if err := os.Symlink("made.json", l); err != nil {
				t.Fatal(err)
			}
			return l, Options{}
		}, kind: Replace, check: func(t *testing.T, dir, name, _ string) {
			wantContent(t, filepath.Join(dir, "made.json"), "DOC")
			if st, err := os.Lstat(name); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the link was replaced: %v", err)
			}
		}},
		{name: "dash is stdout", setup: func(t *testing.T, dir string) (string, Options) { return "-", Options{} }, kind: Stdout,
			check: func(t *testing.T, dir, name, stdout string) {
				if stdout != "DOC" {
					t.Errorf("stdout got %q", stdout)
				}
				if _, err := os.Stat(filepath.Join(dir, "-")); err == nil {
					t.Error("a file named - was written")
				}
			}},
		{name: "/dev/stdout is stdout", setup: func(t *testing.T, dir string) (string, Options) { return "/dev/stdout", Options{} }, kind: Stdout,
			check: func(t *testing.T, dir, name, stdout string) {
				if stdout != "DOC" {
					t.Errorf("stdout got %q", stdout)
				}
			}},
		// Devices through a link in the test's directory: a broken Write that
		// renamed over its output would replace the link, never the device.
		{name: "/dev/null is written in place without overwrite", setup: func(t *testing.T, dir string) (string, Options) { return devLink(t, dir, "/dev/null"), Options{} }, kind: InPlace,
			check: func(t *testing.T, dir, name, _ string) {
				if st, err := os.Stat("/dev/null"); err != nil || st.Mode()&os.ModeCharDevice == 0 {
					t.Fatalf("/dev/null is no longer a device: %v", err)
				}
			}},
		{name: "/dev/full is written in place and its error returned", setup: func(t *testing.T, dir string) (string, Options) {
			return devLink(t, dir, "/dev/full"), Options{Overwrite: true}
		}, kind: InPlace, writeErr: true, check: func(t *testing.T, dir, name, _ string) {
			if st, err := os.Stat("/dev/full"); err != nil || st.Mode()&os.ModeCharDevice == 0 {
				t.Fatalf("/dev/full is no longer a device: %v", err)
			}
		}},
		{name: "FIFO is written in place", setup: func(t *testing.T, dir string) (string, Options) {
			p := filepath.Join(dir, "fifo")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 1)
			go func() {
				f, err := os.Open(p)
				if err != nil {
					got <- err.Error()
					return
				}
				b, _ := io.ReadAll(f)
				f.Close()
				got <- string(b)
			}()
			t.Cleanup(func() {
				if s := <-got; s != "DOC" {
					t.Errorf("the FIFO's reader got %q", s)
				}
			})
			return p, Options{}
		}, kind: InPlace, check: func(t *testing.T, dir, name, _ string) {
			if st, err := os.Lstat(name); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
				t.Fatalf("the FIFO was replaced: %v", err)
			}
		}},
		{name: "the input itself", setup: func(t *testing.T, dir string) (string, Options) {
			p := filepath.Join(dir, "in.json")
			write(t, p, "IN")
			return p, Options{Overwrite: true, Inputs: []string{p}}
		}, refuse: "is the input"},
		{name: "the input by another name", setup: func(t *testing.T, dir string) (string, Options) {
			p := filepath.Join(dir, "in.json")
			write(t, p, "IN")
			l := filepath.Join(dir, "alias.json")
			if err := os.Link(p, l); err != nil {
				t.Fatal(err)
			}
			return l, Options{Overwrite: true, Inputs: []string{dir + "/./in.json"}}
		}, refuse: "is the input"},
		{name: "the input through a link", setup: func(t *testing.T, dir string) (string, Options) {
			p := filepath.Join(dir, "in.json")
			write(t, p, "IN")
			l := filepath.Join(dir, "l.json")
			if err := os.Symlink("in.json", l); err != nil {
				t.Fatal(err)
			}
			return l, Options{Overwrite: true, Inputs: []string{p}}
		}, refuse: "is the input"},
		{name: "directory", setup: func(t *testing.T, dir string) (string, Options) { return dir, Options{} }, refuse: "is a directory"},
		{name: "missing directory", setup: plain("no/such/x.json", Options{}), refuse: "does not exist"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			name, o := tt.setup(t, dir)
			tgt, err := Resolve(name, o)
			if tt.refuse != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refuse) {
					t.Fatalf("Resolve(%s) = %v, want an error saying %q", name, err, tt.refuse)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%s): %v", name, err)
			}
			if tgt.Kind != tt.kind {
				t.Fatalf("kind %d, want %d", tgt.Kind, tt.kind)
			}
			var stdout bytes.Buffer
			err = tgt.Write(&stdout, func(w io.Writer) error { _, err := io.WriteString(w, "DOC"); return err })
			if tt.writeErr != (err != nil) {
				t.Fatalf("Write: %v (want error: %v)", err, tt.writeErr)
			}
			if tt.check != nil {
				tt.check(t, dir, name, stdout.String())
			}
			left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
			if len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// A failed write leaves the old file whole.
func TestFailedWriteKeepsTheOldFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(p, []byte("OLD"), 0o644); err != nil {
		t.Fatal(err)
	}
	tgt, err := Resolve(p, Options{Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Write(io.Discard, func(w io.Writer) error { io.WriteString(w, "HALF"); return errors.New("boom") }); err == nil {
		t.Fatal("no error")
	}
	wantContent(t, p, "OLD")
}

// devLink links dir/dev to device and returns the link.
func devLink(t *testing.T, dir, device string) string {
	t.Helper()
	l := filepath.Join(dir, "dev")
	if err := os.Symlink(device, l); err != nil {
		t.Fatal(err)
	}
	return l
}

func wantContent(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != want {
		t.Fatalf("%s holds %q (%v), want %q", p, b, err, want)
	}
}

// TestStderrThroughItsDescriptor: /dev/stderr is written through the
// process's open stderr (reopening /proc/self/fd/2 truncated a file it
// was appended to).
func TestStderrThroughItsDescriptor(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte("pre "), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stderr
	os.Stderr = f
	defer func() { os.Stderr = saved }()
	tgt, err := Resolve("/dev/stderr", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Write(io.Discard, func(w io.Writer) error { _, err := io.WriteString(w, "DOC"); return err }); err != nil {
		t.Fatal(err)
	}
	wantContent(t, p, "pre DOC")
}
