package hardware

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

func TestParseNvidiaSMI(t *testing.T) {
	tests := []struct {
		name              string
		in                string
		gpu, vram, driver string
		wantErr           bool
	}{
		{name: "one RTX 3060", in: "NVIDIA GeForce RTX 3060, 12288 MiB, 580.178.04\n", gpu: "RTX 3060", vram: "12 GB", driver: "580.178.04"},
		{name: "two identical", in: "NVIDIA GeForce RTX 3090, 24576 MiB, 550.54.14\nNVIDIA GeForce RTX 3090, 24576 MiB, 550.54.14\n", gpu: "2× RTX 3090", vram: "2 × 24 GB", driver: "550.54.14"},
		{name: "mixed", in: "NVIDIA H100 80GB HBM3, 81559 MiB, 535.104.05\nNVIDIA GeForce RTX 4090, 24564 MiB, 535.104.05", gpu: "H100 80GB HBM3 + RTX 4090", vram: "80 GB + 24 GB", driver: "535.104.05"},
		{name: "memory N/A", in: "NVIDIA GB10, [N/A], 580.95.05\n", gpu: "GB10", vram: "", driver: "580.95.05"},
		{name: "blank lines ignored", in: "\n  \nNVIDIA RTX A6000, 49140 MiB, 570.86.10\n\n", gpu: "RTX A6000", vram: "48 GB", driver: "570.86.10"},
		{name: "empty output", in: "", gpu: ""},
		{name: "error text", in: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", wantErr: true},
		{name: "empty name", in: " , 1024 MiB, 1.0\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus, err := ParseNvidiaSMI([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			gpu, vram, driver := Summarize(gpus)
			if gpu != tt.gpu || vram != tt.vram || driver != tt.driver {
				t.Errorf("got (%q, %q, %q), want (%q, %q, %q)", gpu, vram, driver, tt.gpu, tt.vram, tt.driver)
			}
		})
	}
}

const xeonCPUInfo = `processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
physical id	: 0
core id		: 0
cpu cores	: 14

processor	: 1
model name	: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
physical id	: 0
core id		: 0
cpu cores	: 14

processor	: 2
model name	: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
physical id	: 0
core id		: 1
cpu cores	: 14
`

func TestParseCPUInfo(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		model string
		cores int
	}{
		{name: "hyperthreads share a core", in: xeonCPUInfo, model: "Intel Xeon E5-2680 v4", cores: 2},
		{name: "cpu cores without core ids", in: "processor : 0\nmodel name : AMD Ryzen 9 5950X 16-Core Processor\ncpu cores : 16\n", model: "AMD Ryzen 9 5950X", cores: 16},
		{name: "processor count only", in: "processor : 0\nModel Name : Neoverse-N1\n\nprocessor : 1\n\nprocessor : 2\n", model: "Neoverse-N1", cores: 3},
		{name: "empty", in: "", model: "", cores: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, cores := ParseCPUInfo([]byte(tt.in))
			if model != tt.model || cores != tt.cores {
				t.Errorf("got (%q, %d), want (%q, %d)", model, cores, tt.model, tt.cores)
			}
		})
	}
}

func TestRAM(t *testing.T) {
	tests := []struct {
		meminfo string
		want    string
	}{
		{"MemTotal:       32826312 kB\nMemFree: 1 kB\n", "32 GB"},
		{"MemFree: 1 kB\nMemTotal:       16262144 kB\n", "16 GB"},
		{"MemTotal:       65842964 kB\n", "64 GB"},
		{"MemTotal:       263842964 kB\n", "256 GB"},
		{"MemTotal:       8049356 kB\n", "8 GB"},
		{"MemTotal:       3903852 kB\n", "4 GB"},
		{"MemTotal:       24412344 kB\n", "24 GB"},
	}
	for _, tt := range tests {
		kb := ParseMemTotal([]byte(tt.meminfo))
		if got := FormatRAM(kb); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.meminfo, got, tt.want)
		}
	}
	if ParseMemTotal([]byte("MemTotal: lots kB\n")) != 0 || ParseMemTotal(nil) != 0 {
		t.Error("unparsable MemTotal should read 0")
	}
}

func TestParseOSRelease(t *testing.T) {
	tests := []struct{ in, want string }{
		{"NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nPRETTY_NAME=\"Ubuntu 24.04.5 LTS\"\n", "Ubuntu 24.04.5"},
		{"PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\n", "Debian GNU/Linux 13 (trixie)"},
		{"# comment\nNAME=Fedora\nVERSION_ID=41\n", "Fedora 41"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ParseOSRelease([]byte(tt.in)); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestDetectFromFiles points the detector at a fake root holding the seed
// machine's files and a sample nvidia-smi answer.
func TestDetectFromFiles(t *testing.T) {
	root := t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/cpuinfo", xeonCPUInfo)
	write("proc/meminfo", "MemTotal:       32826312 kB\n")
	write("etc/os-release", "PRETTY_NAME=\"Ubuntu 24.04.5 LTS\"\n")
	d := detector{root: root, smi: func(context.Context) ([]byte, error) {
		return []byte("NVIDIA GeForce RTX 3060, 12288 MiB, 580.178.04\n"), nil
	}}
	got := d.detect(context.Background())
	want := result.Hardware{Type: "Discrete GPU", GPU: "RTX 3060", VRAM: "12 GB", Driver: "580.178.04",
		CPU: "Intel Xeon E5-2680 v4 (2C)", RAM: "32 GB", OS: "Ubuntu 24.04.5", Source: "detected"}
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestDetectRunsNvidiaSMI runs a stand-in nvidia-smi found on PATH, so the
// real exec path (arguments included) is exercised on machines without a GPU.
func TestDetectRunsNvidiaSMI(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("shell script stand-in needs a Unix shell")
	}
	dir := t.TempDir()
	script := "#!/bin/sh\n" +
		"[ \"$1\" = \"--query-gpu=name,memory.total,driver_version\" ] && [ \"$2\" = \"--format=csv,noheader\" ] || { echo bad args >&2; exit 3; }\n" +
		"echo 'NVIDIA GeForce RTX 3060, 12288 MiB, 580.178.04'\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	h := Detect(context.Background())
	if h.GPU != "RTX 3060" || h.VRAM != "12 GB" || h.Type != "Discrete GPU" {
		t.Errorf("Detect with stand-in nvidia-smi: %+v", h)
	}
}

// TestDetectHere checks detection on the machine running the tests: Linux
// always has /proc/cpuinfo and /proc/meminfo.
func TestDetectHere(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("detection reads /proc, which only Linux has")
	}
	t.Setenv("PATH", t.TempDir()) // no nvidia-smi
	h := Detect(context.Background())
	if h.Type != "CPU" || h.GPU != "" {
		t.Errorf("without nvidia-smi want Type CPU and no GPU, got %+v", h)
	}
	if h.CPU == "" || !strings.HasSuffix(h.CPU, "C)") || !strings.HasSuffix(h.RAM, " GB") || h.Source != "detected" {
		t.Errorf("incomplete detection here: %+v", h)
	}
}

func TestOverride(t *testing.T) {
	det := result.Hardware{Type: "CPU", CPU: "AMD EPYC 7B13 (2C)", RAM: "8 GB", OS: "Debian GNU/Linux 13 (trixie)", Source: "detected"}
	tests := []struct {
		name  string
		given result.Hardware
		want  result.Hardware
	}{
		{name: "nothing given", want: det},
		{name: "engine on a GPU box", given: result.Hardware{GPU: "RTX 3060", VRAM: "12 GB"},
			want: result.Hardware{Type: "Discrete GPU", GPU: "RTX 3060", VRAM: "12 GB", CPU: det.CPU, RAM: det.RAM, OS: det.OS, Source: "detected+given"}},
		{name: "everything given", given: result.Hardware{Type: "Discrete GPU", GPU: "RTX 3060", VRAM: "12 GB", Driver: "1", CPU: "x", RAM: "32 GB", OS: "Ubuntu"},
			want: result.Hardware{Type: "Discrete GPU", GPU: "RTX 3060", VRAM: "12 GB", Driver: "1", CPU: "x", RAM: "32 GB", OS: "Ubuntu", Source: "given"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Override(det, tt.given); got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseNvidiaSMI(f *testing.F) {
	f.Add("NVIDIA GeForce RTX 3060, 12288 MiB, 580.178.04\n")
	f.Add("a,b,c\n,,\n")
	f.Fuzz(func(t *testing.T, s string) {
		gpus, err := ParseNvidiaSMI([]byte(s))
		if err != nil {
			return
		}
		for _, g := range gpus {
			if g.Name == "" || g.VRAMMiB < 0 {
				t.Fatalf("bad GPU %+v from %q", g, s)
			}
		}
		Summarize(gpus)
	})
}

func FuzzParseProcFiles(f *testing.F) {
	f.Add(xeonCPUInfo)
	f.Add("MemTotal: 1 kB\nPRETTY_NAME=\"x\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		if _, cores := ParseCPUInfo([]byte(s)); cores < 0 {
			t.Fatalf("negative cores from %q", s)
		}
		if kb := ParseMemTotal([]byte(s)); kb < 0 {
			t.Fatalf("negative memory from %q", s)
		} else if kb > 0 && !strings.HasSuffix(FormatRAM(kb), " GB") {
			t.Fatalf("FormatRAM(%d) = %q", kb, FormatRAM(kb))
		}
		ParseOSRelease([]byte(s))
	})
}
