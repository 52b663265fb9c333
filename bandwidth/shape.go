package bandwidth

import (
	"fmt"
	"strings"
)

// Shape is what the limit needs to know of a model, as far as one source
// tells it (0 or "": not told).
type Shape struct {
	// WeightBytes are the bytes of all the model's weights.
	WeightBytes int64
	// EmbedBytes are the input token-embedding table's bytes where it is
	// not also the output head (untied): a decode step reads only the
	// batch's rows of it, so it is not counted as read (METHOD §8).
	EmbedBytes int64
	// MoE are the routed experts, where the model is a mixture of experts.
	MoE MoE
	// KV is the KV cache's layout.
	KV KV
	// DType is the model's weight dtype (config.json torch_dtype), which
	// a KV cache dtype of "auto" means.
	DType string
	// Why says, for a figure a source could not give although it tried,
	// what stood in the way (a quantized config has no exact weight
	// bytes, an attention kind tokentap does not know).
	Why []string
	// Notes are what a reader of the inputs should know of how a figure
	// was read (a config class's default taken for an absent key).
	Notes []string
}

// MoE are a mixture of experts' routed experts: every token of a decode
// step is routed to Used of the Experts of each of the Layers that have
// them. Shared experts and dense layers are in the dense part.
type MoE struct {
	Experts, Used, Layers int
	// Bytes are all the routed experts' weights, over every MoE layer.
	Bytes int64
}

// IsMoE reports whether the experts are known.
func (m MoE) IsMoE() bool { return m.Experts > 0 && m.Used > 0 && m.Used <= m.Experts && m.Bytes > 0 }

// KV is the KV cache's layout: what one token of context costs on the
// layers whose cache grows with the context (full attention), on the
// layers that keep at most a window of tokens (sliding-window attention),
// and the constant state of linear-attention or state-space layers.
// Elements are per token, keys and values apart (their dtypes may differ).
type KV struct {
	FullLayers            int
	FullKeys, FullValues  int64
	WindowLayers, Window  int
	WindowKeys, WindowVal int64
	// StateLayers keep a state of StateBytes (all of them together) per
	// sequence, whatever its length.
	StateLayers int
	StateBytes  int64
	// Layers, KVHeads and HeadDim describe a uniform layout (every layer
	// full attention with the same heads); 0 otherwise. KeyDim and
	// ValueDim, where they differ from HeadDim, replace it.
	Layers, KVHeads, HeadDim, KeyDim, ValueDim int
	// Layout says the layout in words, for reports.
	Layout string
}

// UniformKV is the layout of layers of full attention, each with kvHeads
// heads of keyDim and valueDim elements.
func UniformKV(layers, kvHeads, keyDim, valueDim int) KV {
	if layers <= 0 || kvHeads <= 0 || keyDim <= 0 || valueDim <= 0 {
		return KV{}
	}
	kv := KV{FullLayers: layers, FullKeys: int64(layers) * int64(kvHeads) * int64(keyDim),
		FullValues: int64(layers) * int64(kvHeads) * int64(valueDim), Layers: layers, KVHeads: kvHeads, HeadDim: keyDim}
	kv.Layout = fmt.Sprintf("%d layers × %d KV heads × %d head dim", layers, kvHeads, keyDim)
	if keyDim != valueDim {
		kv.KeyDim, kv.ValueDim = keyDim, valueDim
		kv.Layout = fmt.Sprintf("%d layers × %d KV heads × (%d key + %d value dims)", layers, kvHeads, keyDim, valueDim)
	}
	return kv
}

// HasKV reports whether the KV layout is known.
func (s Shape) HasKV() bool { return s.KV.Known() }

// Known reports whether the layout says anything.
func (k KV) Known() bool {
	return k.FullKeys+k.FullValues > 0 || (k.Window > 0 && k.WindowKeys+k.WindowVal > 0) || k.StateBytes > 0
}

// KVBytesPerToken is what one token of context costs on the full-attention
// layers at the given key and value bytes per element; 0 when the layout
// is unknown.
func (s Shape) KVBytesPerToken(keyBytes, valueBytes float64) float64 {
	return float64(s.KV.FullKeys)*keyBytes + float64(s.KV.FullValues)*valueBytes
}

// WindowBytesPerToken is what one token within the window costs on the
// sliding-window layers.
func (s Shape) WindowBytesPerToken(keyBytes, valueBytes float64) float64 {
	return float64(s.KV.WindowKeys)*keyBytes + float64(s.KV.WindowVal)*valueBytes
}

// layerKind is one layer's attention, as a source declares it.
type layerKind int

const (
	fullLayer layerKind = iota
	windowLayer
	stateLayer
)

// layeredKV builds a layout from each layer's kind and its key and value
// elements per token (for state layers: none; stateBytes is their state
// per layer).
func layeredKV(kinds []layerKind, keys, values []int64, window int, stateBytes int64) KV {
	var kv KV
	for i, k := range kinds {
		switch k {
		case fullLayer:
			kv.FullLayers++
			kv.FullKeys += keys[i]
			kv.FullValues += values[i]
		case windowLayer:
			kv.WindowLayers++
			kv.WindowKeys += keys[i]
			kv.WindowVal += values[i]
		case stateLayer:
			kv.StateLayers++
			kv.StateBytes += stateBytes
		}
	}
	if kv.WindowLayers > 0 {
		kv.Window = window
	}
	var parts []string
	if kv.FullLayers > 0 {
		parts = append(parts, fmt.Sprintf("%d full-attention layers, %d key + %d value elements per token", kv.FullLayers, kv.FullKeys, kv.FullValues))
	}
	if kv.WindowLayers > 0 {
		parts = append(parts, fmt.Sprintf("%d sliding-window layers (%d tokens), %d + %d per token", kv.WindowLayers, kv.Window, kv.WindowKeys, kv.WindowVal))
	}
	if kv.StateLayers > 0 {
		parts = append(parts, fmt.Sprintf("%d linear-attention layers, a state of %s per sequence", kv.StateLayers, FormatBytes(float64(kv.StateBytes))))
	}
	kv.Layout = strings.Join(parts, "; ")
	return kv
}
