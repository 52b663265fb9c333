// Package hardware describes the machine tokentap runs on, for the Hardware
// section of a report: GPUs from nvidia-smi when it is installed, the CPU
// model and core count from /proc/cpuinfo, installed RAM from /proc/meminfo
// and the OS from /etc/os-release. Where the engine runs on another machine,
// the user gives the figures instead and Override merges them.
package hardware

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tokentap/tokentap/result"
)

// smiQuery is the nvidia-smi invocation Detect runs.
var smiQuery = []string{"--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"}

// Detect describes the machine it runs on. Every source is optional: a
// missing nvidia-smi means no GPU is reported (Type "CPU"), an unreadable
// /proc file leaves its field empty. It never fails; ctx bounds the
// nvidia-smi call (at most 10 s).
func Detect(ctx context.Context) result.Hardware {
	return detector{root: "/", smi: runSMI}.detect(ctx)
}

// detector reads from root (a directory holding proc/ and etc/) and asks
// smi for the nvidia-smi output, so tests can point it at sample files.
type detector struct {
	root string
	smi  func(ctx context.Context) ([]byte, error)
}

func (d detector) detect(ctx context.Context) result.Hardware {
	var h result.Hardware
	if out, err := d.smi(ctx); err == nil {
		if gpus, err := ParseNvidiaSMI(out); err == nil && len(gpus) > 0 {
			h.GPU, h.VRAM, h.Driver = Summarize(gpus)
			h.Type = "Discrete GPU"
		}
	}
	if h.Type == "" {
		h.Type = "CPU"
	}
	if b, err := os.ReadFile(filepath.Join(d.root, "proc", "cpuinfo")); err == nil {
		if model, cores := ParseCPUInfo(b); model != "" {
			h.CPU = model
			if cores > 0 {
				h.CPU = fmt.Sprintf("%s (%dC)", model, cores)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(d.root, "proc", "meminfo")); err == nil {
		if kb := ParseMemTotal(b); kb > 0 {
			h.RAM = FormatRAM(kb)
		}
	}
	if b, err := os.ReadFile(filepath.Join(d.root, "etc", "os-release")); err == nil {
		h.OS = ParseOSRelease(b)
	}
	h.Source = "detected"
	return h
}

// runSMI runs nvidia-smi when it is on PATH.
func runSMI(ctx context.Context) ([]byte, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, path, smiQuery...).Output()
}

// GPU is one line of nvidia-smi output.
type GPU struct {
	Name    string // as nvidia-smi names it, e.g. "NVIDIA GeForce RTX 3060"
	VRAMMiB int    // memory.total in MiB
	Driver  string // driver_version
}

// ParseNvidiaSMI parses the output of
// `nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader`:
// one GPU per line, e.g. "NVIDIA GeForce RTX 3060, 12288 MiB, 580.178.04".
// Memory may also read "[N/A]" (some integrated or MIG devices): VRAMMiB is
// then 0. An error names the first line that does not have three fields.
func ParseNvidiaSMI(out []byte) ([]GPU, error) {
	var gpus []GPU
	sc := bufio.NewScanner(bytes.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("nvidia-smi line %d: want name, memory.total, driver_version; got %q", n, line)
		}
		g := GPU{Name: strings.TrimSpace(f[0]), Driver: strings.TrimSpace(f[2])}
		mem := strings.TrimSpace(f[1])
		mem = strings.TrimSpace(strings.TrimSuffix(mem, "MiB"))
		if v, err := strconv.Atoi(mem); err == nil && v > 0 {
			g.VRAMMiB = v
		}
		if g.Name == "" {
			return nil, fmt.Errorf("nvidia-smi line %d: empty GPU name in %q", n, line)
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// ShortGPUName drops the vendor words the seed pages leave out:
// "NVIDIA GeForce RTX 3060" → "RTX 3060", "NVIDIA H100 80GB HBM3" → "H100 80GB HBM3".
func ShortGPUName(name string) string {
	for _, p := range []string{"NVIDIA ", "GeForce "} {
		name = strings.TrimPrefix(name, p)
	}
	return strings.TrimSpace(name)
}

// Summarize turns the GPU list into the report's GPU, VRAM and driver
// fields: identical GPUs are counted ("2× RTX 3090", "2 × 24 GB"), mixed ones
// listed with " + ".
func Summarize(gpus []GPU) (gpu, vram, driver string) {
	if len(gpus) == 0 {
		return "", "", ""
	}
	type group struct {
		name string
		mib  int
		n    int
	}
	var groups []group
	for _, g := range gpus {
		name := ShortGPUName(g.Name)
		found := false
		for i := range groups {
			if groups[i].name == name && groups[i].mib == g.VRAMMiB {
				groups[i].n++
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, group{name, g.VRAMMiB, 1})
		}
	}
	var names, mems []string
	for _, g := range groups {
		prefix := ""
		if g.n > 1 {
			prefix = fmt.Sprintf("%d× ", g.n)
		}
		names = append(names, prefix+g.name)
		if g.mib > 0 {
			mp := ""
			if g.n > 1 {
				mp = fmt.Sprintf("%d × ", g.n)
			}
			mems = append(mems, mp+FormatVRAM(g.mib))
		}
	}
	return strings.Join(names, " + "), strings.Join(mems, " + "), gpus[0].Driver
}

// FormatVRAM shows MiB as whole GB the way cards are sold: 12288 → "12 GB",
// 24564 → "24 GB", 81559 → "80 GB".
func FormatVRAM(mib int) string {
	return fmt.Sprintf("%d GB", int(math.Round(float64(mib)/1024)))
}

var cpuNoise = regexp.MustCompile(`\((R|TM|tm|r)\)|\bCPU\b|\s+@\s+[\d.]+\s*GHz|\b\d+-Core Processor\b|\bProcessor\b`)

// ParseCPUInfo reads /proc/cpuinfo: the first "model name", cleaned of
// trademarks, "CPU" and clock ("Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz"
// → "Intel Xeon E5-2680 v4"), and the number of physical cores (distinct
// physical id/core id pairs; "cpu cores" × sockets, or the processor count,
// where those are missing).
func ParseCPUInfo(b []byte) (model string, cores int) {
	type key struct{ phys, core string }
	seen := map[key]bool{}
	sockets := map[string]bool{}
	procs, perSocket := 0, 0
	var phys, core string
	flush := func() {
		if phys != "" && core != "" {
			seen[key{phys, core}] = true
		}
		phys, core = "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			procs++
		case "model name", "Model Name":
			if model == "" {
				model = v
			}
		case "physical id":
			phys = v
			sockets[v] = true
		case "core id":
			core = v
		case "cpu cores":
			if n, err := strconv.Atoi(v); err == nil {
				perSocket = n
			}
		}
	}
	flush()
	model = strings.Join(strings.Fields(cpuNoise.ReplaceAllString(model, " ")), " ")
	switch {
	case len(seen) > 0:
		cores = len(seen)
	case perSocket > 0:
		cores = perSocket * max(1, len(sockets))
	default:
		cores = procs
	}
	return model, cores
}

// ParseMemTotal returns MemTotal from /proc/meminfo in kB (0 if absent).
func ParseMemTotal(b []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "MemTotal" {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	return 0
}

// FormatRAM shows MemTotal (kB) as the installed size people know: the
// kernel keeps some memory for itself, so 32 GB installed reads about
// 31.3 GiB; round up to a whole GB below 8, to a multiple of 4 GB below 64
// and to a multiple of 8 GB above (15.5 → "16 GB", 62.8 → "64 GB").
func FormatRAM(kb int64) string {
	gib := float64(kb) / (1024 * 1024)
	step := 1.0
	switch {
	case gib >= 64:
		step = 8
	case gib >= 8:
		step = 4
	}
	return fmt.Sprintf("%d GB", int64(math.Ceil(gib/step-1e-9)*step))
}

// ParseOSRelease returns PRETTY_NAME from /etc/os-release without a
// trailing " LTS" ("Ubuntu 24.04.5 LTS" → "Ubuntu 24.04.5"), or NAME and
// VERSION_ID when PRETTY_NAME is missing.
func ParseOSRelease(b []byte) string {
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		} else {
			v = strings.Trim(v, `"'`)
		}
		vals[k] = v
	}
	s := vals["PRETTY_NAME"]
	if s == "" {
		s = strings.TrimSpace(vals["NAME"] + " " + vals["VERSION_ID"])
	}
	return strings.TrimSuffix(s, " LTS")
}

// Override merges hardware the user gave (flags, env) over what was
// detected: every non-empty given field wins. Source becomes "given" when
// nothing detected survives, "detected+given" when both contribute, and
// stays "detected" when nothing was given.
func Override(detected, given result.Hardware) result.Hardware {
	out := detected
	gave, kept := false, false
	pick := func(dst *string, d, g string) {
		if g != "" {
			*dst = g
			gave = true
		} else if d != "" {
			kept = true
		}
	}
	pick(&out.Type, detected.Type, given.Type)
	pick(&out.GPU, detected.GPU, given.GPU)
	pick(&out.VRAM, detected.VRAM, given.VRAM)
	pick(&out.Driver, detected.Driver, given.Driver)
	pick(&out.CPU, detected.CPU, given.CPU)
	pick(&out.RAM, detected.RAM, given.RAM)
	pick(&out.OS, detected.OS, given.OS)
	// A GPU given without a type is a discrete GPU, not the detected "CPU".
	if given.GPU != "" && given.Type == "" && detected.GPU == "" {
		out.Type = "Discrete GPU"
	}
	switch {
	case gave && kept:
		out.Source = "detected+given"
	case gave:
		out.Source = "given"
	default:
		out.Source = detected.Source
	}
	return out
}
