package matrix

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/result"
)

// This file is the decode limit's inputs (METHOD.md §8): the GPU's
// bandwidth and the model's facts, from the flags, a config.json and what
// the engine says of its model.

// Limits is what the decode limit is computed from besides what the
// engine says (METHOD.md §8).
type Limits struct {
	// GPU is the bandwidth given (--gpu-bandwidth); zero: looked up in the
	// table by the run's Hardware GPU and VRAM.
	GPU bandwidth.GPUBandwidth
	// Told is what the user said of the model, in the order it wins over
	// the engine: the flags, then a config.json (--model-config).
	Told []bandwidth.Told
	// ReadModelFile lets the run read the GGUF file the engine says it
	// serves (llama.cpp's /props model_path), where the engine runs on
	// this machine.
	ReadModelFile bool
}

func hardwareSource(h result.Hardware) string {
	if strings.Contains(h.Source, "given") {
		return "given"
	}
	return "detected"
}

// engineTold is what the engine said of its model (engines.ModelFacts),
// with the GGUF file it names read where it is on this machine, and
// llama.cpp's KV cache type from the launch command where one was given.
func (r *runner) engineTold() bandwidth.Told {
	f := r.info.ModelFacts
	t := bandwidth.Told{WeightFrom: f.WeightSource, KeyDType: f.KVDType, DTypeFrom: f.KVDTypeSource}
	t.Shape, t.ShapeFrom = f.Shape, f.ShapeSource
	t.WeightBytes = f.WeightBytes
	if f.Path != "" && !t.HasKV() {
		switch {
		case !r.cfg.Limits.ReadModelFile:
			t.WeightBytes = 0
			t.Why = append(t.Why, fmt.Sprintf("the engine serves %s (%s), a file on its machine: the KV layout and what a step reads of the weights (a mixture of experts, the input embeddings) are read from it only where the engine runs on this one (give --model-config, or --weight-bytes, --layers, --kv-heads and --head-dim)", f.Path, f.PathSource))
		default:
			if g, err := bandwidth.ReadGGUFFile(f.Path); err != nil {
				t.WeightBytes = 0
				t.Why = append(t.Why, fmt.Sprintf("the KV layout and weights could not be read from the engine's model file: %v (give --model-config, or --weight-bytes, --layers, --kv-heads and --head-dim)", err))
			} else {
				s, _ := g.Shape()
				from := fmt.Sprintf("GGUF metadata of %s (%s)", f.Path, f.PathSource)
				t.KV, t.ShapeFrom, t.Notes, t.Why, t.DType = s.KV, from, s.Notes, s.Why, s.DType
				switch {
				case s.WeightBytes == 0:
					t.WeightBytes = 0
				case t.WeightBytes > 0: // the engine's figure, split by the file's tensors
					t.EmbedBytes, t.MoE = s.EmbedBytes, s.MoE
					t.WeightFrom += ", less what a step does not read by the tensors of " + from
				default:
					t.WeightBytes, t.EmbedBytes, t.MoE, t.WeightFrom = s.WeightBytes, s.EmbedBytes, s.MoE, "the tensors of "+from
				}
			}
		}
	}
	if t.KeyDType == "" && r.info.Kind == engines.KindLlamaCpp && r.res.Engine.LaunchCommand != "" {
		t.KeyDType, t.ValueDType, t.DTypeFrom = llamaCacheTypes(r.res.Engine.LaunchCommand)
	}
	return t
}

var (
	cacheK = regexp.MustCompile(`(?:^|\s)(?:-ctk|--cache-type-k)[\s=]+(\S+)`)
	cacheV = regexp.MustCompile(`(?:^|\s)(?:-ctv|--cache-type-v)[\s=]+(\S+)`)
)

// llamaCacheTypes reads llama-server's KV cache types from its launch
// command: --cache-type-k/-ctk and --cache-type-v/-ctv, each f16 (its
// default) where the command does not set it.
func llamaCacheTypes(cmd string) (k, v, from string) {
	k, v = "f16", "f16"
	var set []string
	if m := cacheK.FindStringSubmatch(cmd); m != nil {
		k = m[1]
		set = append(set, "--cache-type-k")
	}
	if m := cacheV.FindStringSubmatch(cmd); m != nil {
		v = m[1]
		set = append(set, "--cache-type-v")
	}
	if len(set) == 0 {
		return k, v, "the launch command sets no --cache-type-k/-v: llama.cpp's default, f16"
	}
	return k, v, "the launch command's " + strings.Join(set, " and ") + " (f16 where not set)"
}
