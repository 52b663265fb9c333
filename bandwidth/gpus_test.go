package bandwidth

import (
	"strconv"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		name, vram string
		want       float64
	}{
		{"NVIDIA GeForce RTX 3060", "12 GB", 360},
		{"RTX 3060", "8 GB", 240},
		{"RTX 3060 12GB", "", 360},
		{"NVIDIA GeForce RTX 3060 Ti GDDR6", "8 GB", 448},
		{"RTX 3060 Ti GDDR6X", "8 GB", 608},
		{"NVIDIA GeForce RTX 4070 GDDR6X", "12 GB", 504},
		{"RTX 4070 GDDR6", "12 GB", 480},
		{"NVIDIA GeForce RTX 4070 Ti", "12 GB", 504},
		{"NVIDIA GeForce RTX 4090", "24 GB", 1008},
		{"NVIDIA GeForce RTX 4080 SUPER", "16 GB", 736},
		{"NVIDIA GeForce RTX 4080", "16 GB", 716.8},
		{"NVIDIA GeForce RTX 4070 Ti SUPER", "16 GB", 672},
		{"NVIDIA GeForce RTX 3080", "10 GB", 760},
		{"NVIDIA GeForce RTX 3080", "12 GB", 912},
		{"NVIDIA H100 80GB HBM3", "80 GB", 3350},
		{"NVIDIA H100 PCIe", "80 GB", 2000},
		{"NVIDIA H100 NVL", "94 GB", 3900},
		{"NVIDIA A100-SXM4-80GB", "80 GB", 2039},
		{"NVIDIA A100 80GB PCIe", "80 GB", 1935},
		{"NVIDIA A100-PCIE-40GB", "40 GB", 1555},
		{"NVIDIA L40S", "45 GB", 864},
		{"NVIDIA L4", "23 GB", 300},
		{"NVIDIA A10G", "23 GB", 600},
		{"Tesla T4", "15 GB", 320},
		{"Tesla V100-SXM2-32GB", "32 GB", 900},
		{"NVIDIA RTX 6000 Ada Generation", "48 GB", 960},
		{"NVIDIA RTX A6000", "48 GB", 768},
		{"AMD Instinct MI300X", "192 GB", 5300},
		{"AMD Radeon RX 7900 XTX", "24 GB", 960},
		{"Radeon RX 7900 XT", "", 800},
		{"AMD Radeon PRO W7900", "48 GB", 864},
		{"NVIDIA H800 80GB HBM3", "80 GB", 3350},
		{"NVIDIA H800 PCIe", "80 GB", 2000},
		{"NVIDIA A800-SXM4-80GB", "80 GB", 2039},
		{"NVIDIA A800 80GB PCIe", "80 GB", 1935},
		{"NVIDIA A800 40GB Active", "40 GB", 1555},
		{"NVIDIA L20", "48 GB", 864},
		{"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "96 GB", 1792},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "96 GB", 1792},
		{"NVIDIA B300 SXM6 AC", "288 GB", 8000},
		{"AMD Instinct MI355X", "288 GB", 8000},
	}
	for _, tt := range tests {
		g, ok, why := Lookup(tt.name, tt.vram)
		if !ok || g.GBPerSec != tt.want || g.Source == "" {
			t.Errorf("Lookup(%q, %q) = %+v, %v (%s); want %v GB/s with a source", tt.name, tt.vram, g, ok, why, tt.want)
		}
	}
	refused := []struct{ name, vram, says string }{
		{"", "", "no GPU"},
		{"simulated, shaped like an RTX 3060", "12 GB (simulated)", "simulated"},
		{"2× RTX 3090", "2 × 24 GB", "several GPUs"},
		{"RTX 3090 + RTX 3060", "", "several GPUs"},
		{"NVIDIA H100", "", "H100 SXM (3350 GB/s)"},
		{"NVIDIA H800", "", "H800 SXM (3350 GB/s)"},
		{"RTX 3060", "", "RTX 3060 12 GB (360 GB/s)"},
		// Cards that report one name for two memories: refused, never
		// the faster one.
		{"NVIDIA GeForce RTX 3060 Ti", "8 GB", "RTX 3060 Ti GDDR6 (448 GB/s), RTX 3060 Ti GDDR6X (608 GB/s)"},
		{"NVIDIA GeForce RTX 4070", "12 GB", "RTX 4070 GDDR6X (504 GB/s), RTX 4070 GDDR6 (480 GB/s)"},
		{"NVIDIA GeForce RTX 4090 Laptop GPU", "16 GB", "not in tokentap's bandwidth table"},
		{"Intel Arc A770", "16 GB", "not in tokentap's bandwidth table"},
	}
	for _, tt := range refused {
		g, ok, why := Lookup(tt.name, tt.vram)
		if ok || !strings.Contains(why, tt.says) {
			t.Errorf("Lookup(%q, %q) = %+v, %v, %q; want refused saying %q", tt.name, tt.vram, g, ok, why, tt.says)
		}
	}
	// Every entry has a figure and a source, and names itself.
	for _, g := range Table() {
		if g.GBPerSec <= 0 || g.Source == "" {
			t.Errorf("%s: %v GB/s from %q", g.Name, g.GBPerSec, g.Source)
		}
		vram := ""
		if g.vramGB > 0 {
			vram = strconv.Itoa(g.vramGB) + " GB"
		}
		if got, ok, why := Lookup(g.Name, vram); !ok || got.GBPerSec != g.GBPerSec {
			t.Errorf("Lookup of the table's own name %q: %+v, %v, %s", g.Name, got, ok, why)
		}
	}
}
