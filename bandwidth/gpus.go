package bandwidth

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// GPU is one card of the bandwidth table.
type GPU struct {
	// Name as reports show it, e.g. "RTX 3060 12 GB".
	Name string
	// GBPerSec is its peak memory bandwidth, decimal GB/s, as the vendor
	// states it.
	GBPerSec float64
	// Source is the vendor document the figure comes from.
	Source string

	tokens []string // every one must be in the name
	not    []string // none may be
	vramGB int      // 0: any memory size
}

// Vendor documents the figures come from.
const (
	srcNVGeForce30 = "NVIDIA GeForce RTX 30 Series specifications (nvidia.com)"
	srcNVGeForce40 = "NVIDIA GeForce RTX 40 Series specifications (nvidia.com)"
	srcNVGeForce50 = "NVIDIA GeForce RTX 50 Series specifications (nvidia.com)"
	srcNVGeForce20 = "NVIDIA GeForce RTX 20 Series specifications (nvidia.com)"
	srcNVPro       = "NVIDIA RTX professional GPU datasheet (nvidia.com)"
	srcAMDRadeon   = "AMD Radeon RX specifications (amd.com/en/products/graphics)"
	srcAMDPro      = "AMD Radeon PRO specifications (amd.com)"
)

func dc(name string) string { return "NVIDIA " + name + " Tensor Core GPU datasheet" }

func amdDC(name string) string { return "AMD Instinct " + name + " accelerator data sheet" }

// gpus is the table: the common data-centre and consumer cards of NVIDIA
// and AMD that run inference engines. A card whose memory or form factor
// changes its bandwidth is listed once per variant, told apart by the
// words of its name or its memory size (or its memory type, where cards of
// different memory report one name); Lookup refuses a name that fits
// several.
var gpus = []GPU{
	// NVIDIA data centre.
	{Name: "B300", GBPerSec: 8000, Source: "NVIDIA HGX B300 datasheet (8 TB/s per GPU)", tokens: []string{"B300"}},
	{Name: "B200", GBPerSec: 8000, Source: dc("B200 (HGX B200)"), tokens: []string{"B200"}},
	{Name: "H200", GBPerSec: 4800, Source: dc("H200"), tokens: []string{"H200"}},
	{Name: "H100 NVL", GBPerSec: 3900, Source: dc("H100"), tokens: []string{"H100", "NVL"}},
	{Name: "H100 SXM", GBPerSec: 3350, Source: dc("H100"), tokens: []string{"H100", "SXM"}, not: []string{"NVL", "PCIE"}},
	{Name: "H100 SXM", GBPerSec: 3350, Source: dc("H100"), tokens: []string{"H100", "HBM3"}, not: []string{"NVL", "PCIE", "SXM"}},
	{Name: "H100 PCIe", GBPerSec: 2000, Source: dc("H100"), tokens: []string{"H100", "PCIE"}},
	{Name: "H20", GBPerSec: 4000, Source: dc("H20"), tokens: []string{"H20"}},
	// H800 and A800: the export variants of the H100 and A100, the same
	// memory (NVIDIA H800 and A800 datasheets); named as their originals.
	{Name: "H800 SXM", GBPerSec: 3350, Source: dc("H800"), tokens: []string{"H800", "SXM"}, not: []string{"PCIE"}},
	{Name: "H800 SXM", GBPerSec: 3350, Source: dc("H800"), tokens: []string{"H800", "HBM3"}, not: []string{"PCIE", "SXM"}},
	{Name: "H800 PCIe", GBPerSec: 2000, Source: dc("H800"), tokens: []string{"H800", "PCIE"}},
	{Name: "A800 80 GB SXM4", GBPerSec: 2039, Source: dc("A800"), tokens: []string{"A800", "SXM4"}, vramGB: 80},
	{Name: "A800 80 GB PCIe", GBPerSec: 1935, Source: dc("A800"), tokens: []string{"A800", "PCIE"}, vramGB: 80},
	{Name: "A800 40 GB PCIe", GBPerSec: 1555, Source: dc("A800"), tokens: []string{"A800"}, vramGB: 40},
	{Name: "GH200 96 GB", GBPerSec: 4000, Source: "NVIDIA GH200 Grace Hopper Superchip datasheet", tokens: []string{"GH200"}, vramGB: 96},
	{Name: "GH200 144 GB", GBPerSec: 4900, Source: "NVIDIA GH200 Grace Hopper Superchip datasheet", tokens: []string{"GH200"}, vramGB: 144},
	{Name: "A100 80 GB SXM4", GBPerSec: 2039, Source: dc("A100"), tokens: []string{"A100", "SXM4"}, vramGB: 80},
	{Name: "A100 80 GB PCIe", GBPerSec: 1935, Source: dc("A100"), tokens: []string{"A100", "PCIE"}, vramGB: 80},
	{Name: "A100 40 GB", GBPerSec: 1555, Source: dc("A100"), tokens: []string{"A100"}, vramGB: 40},
	{Name: "A40", GBPerSec: 696, Source: "NVIDIA A40 datasheet", tokens: []string{"A40"}},
	{Name: "A30", GBPerSec: 933, Source: dc("A30"), tokens: []string{"A30"}},
	{Name: "A10", GBPerSec: 600, Source: dc("A10"), tokens: []string{"A10"}},
	{Name: "A10G", GBPerSec: 600, Source: "Amazon EC2 G5 instances (NVIDIA A10G), aws.amazon.com/ec2/instance-types/g5", tokens: []string{"A10G"}},
	{Name: "L40S", GBPerSec: 864, Source: "NVIDIA L40S datasheet", tokens: []string{"L40S"}},
	{Name: "L40", GBPerSec: 864, Source: "NVIDIA L40 datasheet", tokens: []string{"L40"}},
	{Name: "L20", GBPerSec: 864, Source: "NVIDIA L20 datasheet (48 GB GDDR6)", tokens: []string{"L20"}},
	{Name: "L4", GBPerSec: 300, Source: dc("L4"), tokens: []string{"L4"}},
	{Name: "T4", GBPerSec: 320, Source: dc("T4"), tokens: []string{"T4"}},
	{Name: "V100S", GBPerSec: 1134, Source: dc("V100"), tokens: []string{"V100S"}},
	{Name: "V100", GBPerSec: 900, Source: dc("V100"), tokens: []string{"V100"}},
	{Name: "RTX PRO 6000 Blackwell", GBPerSec: 1792, Source: "NVIDIA RTX PRO 6000 Blackwell datasheet (96 GB GDDR7, Workstation, Server and Max-Q editions alike)", tokens: []string{"RTX", "6000", "BLACKWELL"}},
	{Name: "RTX 6000 Ada", GBPerSec: 960, Source: srcNVPro, tokens: []string{"RTX", "6000", "ADA"}},
	{Name: "RTX A6000", GBPerSec: 768, Source: srcNVPro, tokens: []string{"RTX", "A6000"}},
	{Name: "RTX A5000", GBPerSec: 768, Source: srcNVPro, tokens: []string{"RTX", "A5000"}},
	{Name: "RTX A4000", GBPerSec: 448, Source: srcNVPro, tokens: []string{"RTX", "A4000"}},

	// NVIDIA GeForce.
	{Name: "RTX 5090", GBPerSec: 1792, Source: srcNVGeForce50, tokens: []string{"RTX", "5090"}},
	{Name: "RTX 5080", GBPerSec: 960, Source: srcNVGeForce50, tokens: []string{"RTX", "5080"}},
	{Name: "RTX 5070 Ti", GBPerSec: 896, Source: srcNVGeForce50, tokens: []string{"RTX", "5070", "TI"}},
	{Name: "RTX 5070", GBPerSec: 672, Source: srcNVGeForce50, tokens: []string{"RTX", "5070"}, not: []string{"TI"}},
	{Name: "RTX 5060 Ti", GBPerSec: 448, Source: srcNVGeForce50, tokens: []string{"RTX", "5060", "TI"}},
	{Name: "RTX 5060", GBPerSec: 448, Source: srcNVGeForce50, tokens: []string{"RTX", "5060"}, not: []string{"TI"}},
	{Name: "RTX 4090", GBPerSec: 1008, Source: srcNVGeForce40, tokens: []string{"RTX", "4090"}},
	{Name: "RTX 4080 SUPER", GBPerSec: 736, Source: srcNVGeForce40, tokens: []string{"RTX", "4080", "SUPER"}},
	{Name: "RTX 4080", GBPerSec: 716.8, Source: srcNVGeForce40, tokens: []string{"RTX", "4080"}, not: []string{"SUPER"}},
	{Name: "RTX 4070 Ti SUPER", GBPerSec: 672, Source: srcNVGeForce40, tokens: []string{"RTX", "4070", "TI", "SUPER"}},
	{Name: "RTX 4070 Ti", GBPerSec: 504, Source: srcNVGeForce40, tokens: []string{"RTX", "4070", "TI"}, not: []string{"SUPER"}},
	{Name: "RTX 4070 SUPER", GBPerSec: 504, Source: srcNVGeForce40, tokens: []string{"RTX", "4070", "SUPER"}, not: []string{"TI"}},
	// The RTX 4070 came with GDDR6X (504 GB/s), later also with GDDR6
	// (480 GB/s); both report the same name.
	{Name: "RTX 4070 GDDR6X", GBPerSec: 504, Source: srcNVGeForce40, tokens: []string{"RTX", "4070", "GDDR6X"}, not: []string{"TI", "SUPER"}},
	{Name: "RTX 4070 GDDR6", GBPerSec: 480, Source: srcNVGeForce40, tokens: []string{"RTX", "4070", "GDDR6"}, not: []string{"TI", "SUPER"}},
	{Name: "RTX 4060 Ti", GBPerSec: 288, Source: srcNVGeForce40, tokens: []string{"RTX", "4060", "TI"}},
	{Name: "RTX 4060", GBPerSec: 272, Source: srcNVGeForce40, tokens: []string{"RTX", "4060"}, not: []string{"TI"}},
	{Name: "RTX 3090 Ti", GBPerSec: 1008, Source: srcNVGeForce30, tokens: []string{"RTX", "3090", "TI"}},
	{Name: "RTX 3090", GBPerSec: 936, Source: srcNVGeForce30, tokens: []string{"RTX", "3090"}, not: []string{"TI"}},
	{Name: "RTX 3080 Ti", GBPerSec: 912, Source: srcNVGeForce30, tokens: []string{"RTX", "3080", "TI"}},
	{Name: "RTX 3080 12 GB", GBPerSec: 912, Source: srcNVGeForce30, tokens: []string{"RTX", "3080"}, not: []string{"TI"}, vramGB: 12},
	{Name: "RTX 3080 10 GB", GBPerSec: 760, Source: srcNVGeForce30, tokens: []string{"RTX", "3080"}, not: []string{"TI"}, vramGB: 10},
	{Name: "RTX 3070 Ti", GBPerSec: 608, Source: srcNVGeForce30, tokens: []string{"RTX", "3070", "TI"}},
	{Name: "RTX 3070", GBPerSec: 448, Source: srcNVGeForce30, tokens: []string{"RTX", "3070"}, not: []string{"TI"}},
	// The RTX 3060 Ti came with GDDR6 (448 GB/s), later also with GDDR6X
	// (608 GB/s); both report the same name.
	{Name: "RTX 3060 Ti GDDR6", GBPerSec: 448, Source: srcNVGeForce30, tokens: []string{"RTX", "3060", "TI", "GDDR6"}},
	{Name: "RTX 3060 Ti GDDR6X", GBPerSec: 608, Source: srcNVGeForce30, tokens: []string{"RTX", "3060", "TI", "GDDR6X"}},
	{Name: "RTX 3060 12 GB", GBPerSec: 360, Source: srcNVGeForce30, tokens: []string{"RTX", "3060"}, not: []string{"TI"}, vramGB: 12},
	{Name: "RTX 3060 8 GB", GBPerSec: 240, Source: srcNVGeForce30, tokens: []string{"RTX", "3060"}, not: []string{"TI"}, vramGB: 8},
	{Name: "RTX 2080 Ti", GBPerSec: 616, Source: srcNVGeForce20, tokens: []string{"RTX", "2080", "TI"}},
	{Name: "TITAN RTX", GBPerSec: 672, Source: srcNVGeForce20, tokens: []string{"TITAN", "RTX"}},

	// AMD data centre.
	{Name: "MI355X", GBPerSec: 8000, Source: amdDC("MI355X"), tokens: []string{"MI355X"}},
	{Name: "MI325X", GBPerSec: 6000, Source: amdDC("MI325X"), tokens: []string{"MI325X"}},
	{Name: "MI300X", GBPerSec: 5300, Source: amdDC("MI300X"), tokens: []string{"MI300X"}},
	{Name: "MI300A", GBPerSec: 5300, Source: "AMD Instinct MI300A APU data sheet", tokens: []string{"MI300A"}},
	{Name: "MI250X", GBPerSec: 3276.8, Source: amdDC("MI250X"), tokens: []string{"MI250X"}},
	{Name: "MI250", GBPerSec: 3276.8, Source: amdDC("MI250"), tokens: []string{"MI250"}},
	{Name: "MI210", GBPerSec: 1638.4, Source: amdDC("MI210"), tokens: []string{"MI210"}},
	{Name: "MI100", GBPerSec: 1228.8, Source: amdDC("MI100"), tokens: []string{"MI100"}},

	// AMD Radeon.
	{Name: "RX 9070 XT", GBPerSec: 640, Source: srcAMDRadeon, tokens: []string{"RX", "9070", "XT"}},
	{Name: "RX 9070", GBPerSec: 640, Source: srcAMDRadeon, tokens: []string{"RX", "9070"}, not: []string{"XT"}},
	{Name: "RX 7900 XTX", GBPerSec: 960, Source: srcAMDRadeon, tokens: []string{"RX", "7900", "XTX"}},
	{Name: "RX 7900 XT", GBPerSec: 800, Source: srcAMDRadeon, tokens: []string{"RX", "7900", "XT"}},
	{Name: "RX 7900 GRE", GBPerSec: 576, Source: srcAMDRadeon, tokens: []string{"RX", "7900", "GRE"}},
	{Name: "RX 7800 XT", GBPerSec: 624, Source: srcAMDRadeon, tokens: []string{"RX", "7800", "XT"}},
	{Name: "RX 7700 XT", GBPerSec: 432, Source: srcAMDRadeon, tokens: []string{"RX", "7700", "XT"}},
	{Name: "RX 7600 XT", GBPerSec: 288, Source: srcAMDRadeon, tokens: []string{"RX", "7600", "XT"}},
	{Name: "RX 7600", GBPerSec: 288, Source: srcAMDRadeon, tokens: []string{"RX", "7600"}, not: []string{"XT"}},
	{Name: "RX 6900 XT", GBPerSec: 512, Source: srcAMDRadeon, tokens: []string{"RX", "6900", "XT"}},
	{Name: "RX 6800 XT", GBPerSec: 512, Source: srcAMDRadeon, tokens: []string{"RX", "6800", "XT"}},
	{Name: "RX 6800", GBPerSec: 512, Source: srcAMDRadeon, tokens: []string{"RX", "6800"}, not: []string{"XT"}},
	{Name: "Radeon PRO W7900", GBPerSec: 864, Source: srcAMDPro, tokens: []string{"W7900"}},
	{Name: "Radeon PRO W7800", GBPerSec: 576, Source: srcAMDPro, tokens: []string{"W7800"}},
}

// Table returns a copy of the bandwidth table, in its order.
func Table() []GPU { return slices.Clone(gpus) }

// noise are vendor and product-line words names carry or not.
var noise = map[string]bool{"NVIDIA": true, "GEFORCE": true, "TESLA": true, "AMD": true, "RADEON": true, "INSTINCT": true,
	"GENERATION": true, "GRAPHICS": true, "GPU": true, "TENSOR": true, "CORE": true, "PRO": true}

var sizeWord = regexp.MustCompile(`^(\d+)GB$`)

// words splits a GPU name into upper-case words, without vendor words;
// memory sizes written into the name ("80GB") are returned apart.
func words(name string) (w []string, sizeGB int) {
	f := strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool {
		return r == ' ' || r == '-' || r == '_' || r == ',' || r == '(' || r == ')' || r == '/'
	})
	for i := 0; i < len(f); i++ {
		x := f[i]
		if noise[x] {
			continue
		}
		if m := sizeWord.FindStringSubmatch(x); m != nil {
			sizeGB, _ = strconv.Atoi(m[1])
			continue
		}
		if x == "GB" && len(w) > 0 { // "80 GB"
			if n, err := strconv.Atoi(w[len(w)-1]); err == nil {
				sizeGB = n
				w = w[:len(w)-1]
				continue
			}
		}
		w = append(w, x)
	}
	return w, sizeGB
}

// vramGB reads a VRAM figure as reports show it ("12 GB", "80GB"); 0 when
// it is not one plain size.
func vramGB(vram string) int {
	v := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(vram), " ", ""))
	if m := sizeWord.FindStringSubmatch(v); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

var multiGPU = regexp.MustCompile(`^\d+\s*[x×]\s`)

// Lookup finds a GPU by its name as nvidia-smi, rocm-smi or the user give
// it ("NVIDIA GeForce RTX 3060", "RTX 3060", "AMD Instinct MI300X") and its
// memory ("12 GB", for cards sold with several sizes; a size written in the
// name counts when vram is empty). ok is false, with a reason that says
// what to do, for a name the table does not have, a name that fits
// variants of different bandwidth ("H100": SXM, PCIe or NVL), several GPUs
// ("2× RTX 3090": how the engine splits the model across them decides what
// it reads with), or simulated hardware.
func Lookup(name, vram string) (g GPU, ok bool, reason string) {
	n := strings.TrimSpace(name)
	switch {
	case n == "":
		return GPU{}, false, "no GPU was detected or given (give --gpu NAME or --gpu-bandwidth, e.g. 360GB/s)"
	case strings.Contains(strings.ToLower(n), "simulated"):
		return GPU{}, false, fmt.Sprintf("the GPU %q is simulated (give --gpu-bandwidth to compare anyway)", n)
	case strings.Contains(n, "×") || strings.Contains(n, " + ") || multiGPU.MatchString(n):
		return GPU{}, false, fmt.Sprintf("%s: with several GPUs, the bandwidth the model is read with depends on how the engine splits it (give --gpu-bandwidth: the sum over the GPUs for tensor parallelism)", n)
	}
	w, size := words(n)
	if v := vramGB(vram); v > 0 {
		size = v
	}
	var found, partial []GPU
	for _, e := range gpus {
		switch {
		case e.matches(w, size):
			found = append(found, e)
		case e.covers(w, size):
			partial = append(partial, e)
		}
	}
	list := func(es []GPU) string {
		var names []string
		for _, e := range es {
			s := fmt.Sprintf("%s (%s GB/s)", e.Name, fmtGB(e.GBPerSec))
			if !slices.Contains(names, s) {
				names = append(names, s)
			}
		}
		return strings.Join(names, ", ")
	}
	switch {
	case len(found) == 1:
		return found[0], true, ""
	case len(found) > 1:
		return GPU{}, false, fmt.Sprintf("%s fits %s: give --gpu-bandwidth", n, list(found))
	case len(partial) > 0 && slices.ContainsFunc(partial, func(e GPU) bool { return e.vramGB == 0 }):
		return GPU{}, false, fmt.Sprintf("%s comes as %s, which report the same name: give --gpu with the variant (e.g. %q), or --gpu-bandwidth", n, list(partial), partial[len(partial)-1].Name)
	case len(partial) > 0:
		return GPU{}, false, fmt.Sprintf("%s comes as %s: give --vram, or --gpu-bandwidth", n, list(partial))
	}
	return GPU{}, false, fmt.Sprintf("%s is not in tokentap's bandwidth table (give --gpu-bandwidth, e.g. 360GB/s)", n)
}

// covers reports whether a name of words w is a less specific name of
// the entry: every word is the entry's (or a form-factor word), none is
// one it rules out, no memory size contradicts it, but the entry needs
// more (a word, or a memory size).
func (e GPU) covers(w []string, sizeGB int) bool {
	if len(w) == 0 || (e.vramGB > 0 && sizeGB > 0 && e.vramGB != sizeGB) {
		return false
	}
	for _, x := range w {
		if !slices.Contains(e.tokens, x) && !formFactor[x] {
			return false
		}
		if slices.Contains(e.not, x) {
			return false
		}
	}
	return true
}

func (e GPU) matches(w []string, sizeGB int) bool {
	for _, t := range e.tokens {
		if !slices.Contains(w, t) {
			return false
		}
	}
	for _, t := range e.not {
		if slices.Contains(w, t) {
			return false
		}
	}
	// Every word of the name must be accounted for by the entry, or be a
	// form-factor word: "RTX 4080" does not name an "RTX 4080 SUPER", and
	// an unknown "RTX 4080 XYZ" is not a 4080.
	for _, x := range w {
		if !slices.Contains(e.tokens, x) && !formFactor[x] {
			return false
		}
	}
	return e.vramGB == 0 || e.vramGB == sizeGB
}

// formFactor are words a name may carry that do not change which card it
// is (bandwidth-changing ones, like SXM4 or PCIE on an A100, are in the
// entries' tokens where they matter).
var formFactor = map[string]bool{"PCIE": true, "SXM": true, "SXM2": true, "SXM4": true, "SXM5": true, "SXM6": true, "HBM3": true, "HBM3E": true,
	"LAPTOP": false, "ADA": true,
	// Editions of one card with one memory: the RTX PRO 6000 Blackwell's
	// Workstation, Server and Max-Q editions, the A800 40GB Active (its
	// cooling), the B300's "SXM6 AC".
	"WORKSTATION": true, "SERVER": true, "EDITION": true, "MAX": true, "Q": true, "ACTIVE": true, "AC": true}

func fmtGB(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
