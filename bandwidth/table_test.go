package bandwidth

import (
	"fmt"
	"strings"
)

// limitTable is the decode limit of the eight public models of
// testdata/config (bf16 weights and KV cache, gpt-oss-20b's experts in
// MXFP4) at batch 1, 8 and 64 and context 0 and 32K, at bw bytes/s.
func limitTable(bw float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-18s %9s %9s %9s %9s %9s %9s\n", fmt.Sprintf("tok/s @ %g GB/s", bw/1e9), "b1 0", "b1 32K", "b8 0", "b8 32K", "b64 0", "b64 32K")
	for _, m := range realConfigs {
		_, in, err := loadConfig(m.file, bw)
		if err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "%-18s", strings.TrimSuffix(m.file, ".json"))
		for _, batch := range []float64{1, 8, 64} {
			for _, seq := range []float64{0, 32768} {
				fmt.Fprintf(&b, " %9.1f", in.Limit(batch, seq))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ExampleInputs_Limit prints the limit table of the eight public models
// (go test ./bandwidth -run ExampleInputs_Limit -v). Qwen3-30B-A3B at one
// sequence on 360 GB/s: 360e9 / 6,083,735,552 = 59.2 tok/s from its 8
// active experts, where its 61 GB of weights would give 5.9.
func ExampleInputs_Limit() {
	fmt.Print(limitTable(360e9))
	fmt.Print(limitTable(3.35e12))
	// Output:
	// tok/s @ 360 GB/s        b1 0    b1 32K      b8 0    b8 32K     b64 0   b64 32K
	// llama-3.1-8b            24.0      18.6     191.9      58.3    1535.0      79.5
	// qwen2.5-7b              25.5      22.5     203.7      98.7    1629.3     171.4
	// qwen3-30b-a3b           59.2      38.7     111.4      55.8     387.2      86.7
	// mixtral-8x7b            14.1      12.1      34.2      24.3     247.4      62.6
	// gpt-oss-20b             97.1      79.7     316.1     184.9    1828.4     358.1
	// gemma-3-12b             15.3      13.8     122.4      66.4     979.1     126.3
	// falcon-7b               26.0      25.5     208.0     180.1    1664.3     742.7
	// deepseek-v2-lite        73.4      60.8     160.9     110.6     744.7     239.6
	// tok/s @ 3350 GB/s       b1 0    b1 32K      b8 0    b8 32K     b64 0   b64 32K
	// llama-3.1-8b           223.2     173.5    1785.5     542.8   14284.0     739.6
	// qwen2.5-7b             236.9     209.1    1895.2     918.6   15161.3    1595.2
	// qwen3-30b-a3b          550.6     360.0    1037.0     519.3    3602.8     807.0
	// mixtral-8x7b           131.4     112.4     318.6     226.2    2301.8     582.6
	// gpt-oss-20b            903.4     741.7    2941.8    1720.4   17014.5    3332.2
	// gemma-3-12b            142.4     128.8    1138.9     617.6    9111.0    1175.1
	// falcon-7b              242.0     237.4    1935.9    1676.0   15487.5    6910.9
	// deepseek-v2-lite       683.3     565.7    1497.6    1028.8    6929.4    2229.4
}
