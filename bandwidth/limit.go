// Package bandwidth puts a decode cell beside the limit its GPU's memory
// bandwidth sets (METHOD.md §8). Decode is memory-bound: one step of a
// batch of b sequences reads the weights the step needs once and every
// sequence's KV cache, so
//
//	total tok/s ≤ bandwidth × b / (weights read at b + b × KV bytes of a sequence)
//
// where the weights read at b are the dense part (all but the input token
// embeddings and the routed experts) plus, for a mixture of experts, the
// experts the batch's tokens touch: E·(1 − (1 − k/E)^b) per MoE layer in
// expectation under uniform routing; and a sequence's KV bytes are its
// context on the full-attention layers, at most the window on the
// sliding-window layers, and a constant state on linear-attention layers.
//
// The inputs come from what tokentap can be told or can read, each with its
// source: the GPU's bandwidth from a table of common cards (gpus.go) or
// --gpu-bandwidth; the model's shape from the engine where it tells it
// (llama.cpp's GGUF, Ollama's /api/show; vLLM's cache dtype), a Hugging
// Face config.json (--model-config, hfconfig.go), a GGUF header (gguf.go,
// ggufshape.go), or flags. An input nobody gave is missing, and then no
// cell gets a limit: the package never guesses.
package bandwidth

import (
	"math"

	"github.com/tokentap/tokentap/result"
)

// Inputs are the figures the limit is computed from.
type Inputs struct {
	// BytesPerSec is the GPU memory bandwidth (all GPUs that read the
	// model's weights together).
	BytesPerSec float64
	// WeightBytes are the bytes of weights every decode step reads,
	// whatever its batch: a dense model's weights but its input
	// embeddings; a mixture of experts' weights but those and its routed
	// experts.
	WeightBytes float64
	// Experts and ExpertsUsed are a mixture of experts' routed experts per
	// MoE layer (E) and the experts each token is routed to (k);
	// ExpertBytes one expert's weights over all the MoE layers. 0: dense.
	Experts, ExpertsUsed, ExpertBytes float64
	// KVBytesPerToken is what one token of context costs in the KV cache
	// of the full-attention layers.
	KVBytesPerToken float64
	// Window is the sliding window in tokens, and WindowBytesPerToken
	// what one token within it costs on the sliding-window layers.
	Window, WindowBytesPerToken float64
	// StateBytes is the constant state of a sequence on linear-attention
	// or state-space layers.
	StateBytes float64
}

// DistinctExperts is the expected number of distinct experts a batch of b
// tokens touches in one MoE layer when each token picks k of E experts and
// every expert is equally likely: E·(1 − (1 − k/E)^b). One expert is left
// untouched by one token with probability 1 − k/E, by b independent
// tokens with probability (1 − k/E)^b. b may be a fractional average.
func DistinctExperts(e, k, b float64) float64 {
	if e <= 0 || k <= 0 || k > e || b <= 0 {
		return 0
	}
	return e * (1 - math.Pow(1-k/e, b))
}

// StepWeightBytes is the weights a decode step of batch b reads: the dense
// part and the experts the batch touches.
func (in Inputs) StepWeightBytes(batch float64) float64 {
	return in.WeightBytes + in.ExpertBytes*DistinctExperts(in.Experts, in.ExpertsUsed, batch)
}

// SeqKVBytes is what one sequence of seq context tokens makes a step read
// of the KV cache: seq tokens on full-attention layers, at most the window
// on sliding-window layers, the constant state on linear-attention layers.
func (in Inputs) SeqKVBytes(seq float64) float64 {
	return seq*in.KVBytesPerToken + math.Min(seq, in.Window)*in.WindowBytesPerToken + in.StateBytes
}

// Limit is the most total tokens per second the bandwidth allows for a
// batch of batch sequences of seq context tokens each: bandwidth × batch /
// (weights read at batch + batch × a sequence's KV bytes). It is 0 when an
// input is not positive (batch and seq may be fractional averages; seq may
// be 0).
func (in Inputs) Limit(batch, seq float64) float64 {
	if in.BytesPerSec <= 0 || in.WeightBytes <= 0 || batch <= 0 || seq < 0 || in.KVBytesPerToken < 0 ||
		in.WindowBytesPerToken < 0 || in.StateBytes < 0 || in.ExpertBytes < 0 {
		return 0
	}
	return in.BytesPerSec * batch / (in.StepWeightBytes(batch) + batch*in.SeqKVBytes(seq))
}

// KVBytesPerToken is layers × kvHeads × headDim × (key + value bytes per
// element): a key and a value vector per KV head in every layer.
func KVBytesPerToken(layers, kvHeads, headDim int, keyBytes, valueBytes float64) float64 {
	return float64(layers) * float64(kvHeads) * float64(headDim) * (keyBytes + valueBytes)
}

// Figures is a decode cell against the limit: the limit at the cell's
// average active requests (batch) and mean sequence length (seq), and the
// cell's total tok/s as a share of it; nil when the limit is not known or
// the cell has no batch.
func (in Inputs) Figures(totalTokPerSec, batch, seq float64) *result.DecodeLimit {
	lim := in.Limit(batch, seq)
	if lim <= 0 {
		return nil
	}
	return &result.DecodeLimit{BandwidthLimitTokPerSec: lim, ShareOfBandwidthLimit: totalTokPerSec / lim, Batch: batch, SeqTokens: seq}
}

// FromResult is the inputs a result document kept; ok is false when they
// were incomplete.
func FromResult(b *result.Bandwidth) (Inputs, bool) {
	if b == nil || len(b.Missing) > 0 || b.GBPerSec <= 0 || b.WeightBytes <= 0 || (b.KVBytesPerToken <= 0 && b.WindowKVBytesPerToken <= 0 && b.StateBytesPerSequence <= 0) {
		return Inputs{}, false
	}
	in := Inputs{BytesPerSec: b.GBPerSec * 1e9, WeightBytes: float64(b.WeightBytes - b.InputEmbeddingBytes),
		KVBytesPerToken: b.KVBytesPerToken, Window: float64(b.SlidingWindow), WindowBytesPerToken: b.WindowKVBytesPerToken,
		StateBytes: b.StateBytesPerSequence}
	if m := b.MoE; m != nil && m.Experts > 0 && m.ExpertsPerToken > 0 && m.ExpertBytes > 0 {
		in.WeightBytes -= float64(m.ExpertBytes)
		in.Experts, in.ExpertsUsed, in.ExpertBytes = float64(m.Experts), float64(m.ExpertsPerToken), float64(m.ExpertBytes)/float64(m.Experts)
	}
	if in.WeightBytes <= 0 {
		return Inputs{}, false
	}
	return in, true
}
