package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/matrix"
)

// This file is matrix's flags of the decode limit (METHOD.md §8) and its
// --slo (§6).

// LimitFlags are matrix's settings of the decode limit (METHOD.md §8) and
// its SLOs (§6). Embedded in matrixFlags, exported so caarlos0/env sees
// it.
type LimitFlags struct {
	SLO          string `env:"SLO"`
	GPUBandwidth string `env:"GPU_BANDWIDTH"`
	ModelConfig  string `env:"MODEL_CONFIG"`
	WeightBytes  string `env:"WEIGHT_BYTES"`
	Layers       int    `env:"LAYERS"`
	KVHeads      int    `env:"KV_HEADS"`
	HeadDim      int    `env:"HEAD_DIM"`
	KVDType      string `env:"KV_DTYPE"`
}

func (l *LimitFlags) register(fs *cli) {
	fs.StringVar(&l.SLO, "slo", l.SLO, sloHelp)
	fs.StringVar(&l.GPUBandwidth, "gpu-bandwidth", l.GPUBandwidth, "GPU memory bandwidth for the decode limit, e.g. 360GB/s (default: tokentap's table, by the GPU detected or given with --gpu) [TOKENTAP_GPU_BANDWIDTH]")
	fs.StringVar(&l.ModelConfig, "model-config", l.ModelConfig, "the model's Hugging Face config.json: its KV cache layout (sliding-window and linear-attention layers too), dtype and, for unquantized models of known architectures, the weights a step reads (a mixture of experts' active experts) [TOKENTAP_MODEL_CONFIG]")
	fs.StringVar(&l.WeightBytes, "weight-bytes", l.WeightBytes, "bytes of the weights every decode step reads, e.g. 4.9GB (default: what the engine or --model-config says) [TOKENTAP_WEIGHT_BYTES]")
	fs.IntVar(&l.Layers, "layers", l.Layers, "the model's layers, for its KV cache size per token [TOKENTAP_LAYERS]")
	fs.IntVar(&l.KVHeads, "kv-heads", l.KVHeads, "the model's key/value heads [TOKENTAP_KV_HEADS]")
	fs.IntVar(&l.HeadDim, "head-dim", l.HeadDim, "the model's attention head dimension [TOKENTAP_HEAD_DIM]")
	fs.StringVar(&l.KVDType, "kv-dtype", l.KVDType, "the engine's KV cache dtype: f16, bf16, fp8, q8_0, q4_0, … (default: what the engine says) [TOKENTAP_KV_DTYPE]")
}

// apply checks the flags and sets them on the matrix config.
func (l LimitFlags) apply(cfg *matrix.Config) error {
	var err error
	if cfg.SLO, err = parseSLO(l.SLO); err != nil {
		return err
	}
	lim := &cfg.Limits
	if l.GPUBandwidth != "" {
		bw, err := bandwidth.ParseBandwidth(l.GPUBandwidth)
		if err != nil {
			return fmt.Errorf("--gpu-bandwidth: %w", err)
		}
		lim.GPU = bandwidth.GPUBandwidth{GBPerSec: bw / 1e9, From: "flag --gpu-bandwidth " + l.GPUBandwidth}
	}
	var flags bandwidth.Told
	var named []string
	if l.WeightBytes != "" {
		b, err := bandwidth.ParseBytes(l.WeightBytes)
		if err != nil {
			return fmt.Errorf("--weight-bytes: %w", err)
		}
		flags.WeightBytes, flags.WeightFrom = b, "flag --weight-bytes "+l.WeightBytes
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--layers", l.Layers}, {"--kv-heads", l.KVHeads}, {"--head-dim", l.HeadDim}} {
		switch {
		case f.v < 0:
			return fmt.Errorf("%s %d: want a positive number", f.name, f.v)
		case f.v > 0:
			named = append(named, f.name+" "+strconv.Itoa(f.v))
		}
	}
	if len(named) > 0 && len(named) < 3 {
		return fmt.Errorf("%s: give --layers, --kv-heads and --head-dim together (the KV cache's size per token needs all three)", strings.Join(named, ", "))
	}
	if len(named) == 3 {
		flags.KV = bandwidth.UniformKV(l.Layers, l.KVHeads, l.HeadDim, l.HeadDim)
		flags.ShapeFrom = "flags " + strings.Join(named, ", ")
	}
	if l.KVDType != "" {
		if _, ok := bandwidth.DTypeBytes(l.KVDType); !ok && !strings.EqualFold(l.KVDType, "auto") {
			return fmt.Errorf("--kv-dtype %q: use f32, f16, bf16, fp8, int8, q8_0, q5_1, q5_0, q4_1, q4_0 or iq4_nl", l.KVDType)
		}
		flags.KeyDType, flags.DTypeFrom = l.KVDType, "flag --kv-dtype"
	}
	lim.Told = append(lim.Told, flags)
	if l.ModelConfig != "" {
		b, err := os.ReadFile(l.ModelConfig)
		if err != nil {
			return fmt.Errorf("--model-config: %w", err)
		}
		s, err := bandwidth.FromHFConfig(b)
		if err != nil {
			return fmt.Errorf("--model-config %s: %w", l.ModelConfig, err)
		}
		from := "--model-config " + l.ModelConfig
		lim.Told = append(lim.Told, bandwidth.Told{Shape: s, WeightFrom: from + ": its parameters × " + s.DType, ShapeFrom: from})
	}
	return nil
}
