package bandwidth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tokentap/tokentap/result"
)

// Told is what one source (the flags, a config.json, the engine) says of
// the model; zero fields say nothing. From names the source for each
// figure it gives.
type Told struct {
	Shape
	// WeightFrom names where WeightBytes (with EmbedBytes and MoE) came
	// from, ShapeFrom where the KV layout did.
	WeightFrom, ShapeFrom string
	// KeyDType and ValueDType are the KV cache's dtypes ("auto": the
	// model's DType); DTypeFrom says who said so.
	KeyDType, ValueDType, DTypeFrom string
}

// GPUBandwidth is the bandwidth the limit uses, or why there is none.
type GPUBandwidth struct {
	GBPerSec float64
	From     string
	// Missing says why there is none (Lookup's reason).
	Missing string
}

// Resolve takes every input from the first source that gives it (the
// order of told is the order they win: flags, then a config.json, then the
// engine) and returns the inputs with their sources for the result
// document. ok is false when an input is missing: doc.Missing names each
// one with what would give it, and no cell may then have a limit.
func Resolve(bw GPUBandwidth, told ...Told) (doc result.Bandwidth, in Inputs, ok bool) {
	if bw.GBPerSec > 0 {
		doc.GBPerSec, doc.GBPerSecSource = bw.GBPerSec, bw.From
	} else {
		why := bw.Missing
		if why == "" {
			why = "give --gpu-bandwidth, e.g. 360GB/s"
		}
		doc.Missing = append(doc.Missing, "GPU memory bandwidth: "+why)
	}

	var why []string
	for _, t := range told {
		why = append(why, t.Why...)
	}
	var notes []string
	for _, t := range told {
		if t.WeightBytes > 0 {
			doc.WeightBytes, doc.WeightSource = t.WeightBytes, t.WeightFrom
			if t.EmbedBytes > 0 && t.EmbedBytes < t.WeightBytes {
				doc.InputEmbeddingBytes = t.EmbedBytes
			}
			if m := t.MoE; m.IsMoE() && m.Bytes+doc.InputEmbeddingBytes < t.WeightBytes {
				doc.MoE = &result.MoELimit{Experts: m.Experts, ExpertsPerToken: m.Used, Layers: m.Layers, ExpertBytes: m.Bytes}
			}
			notes = append(notes, t.Notes...)
			break
		}
	}
	if doc.WeightBytes == 0 {
		doc.Missing = append(doc.Missing, "model weight bytes: "+or(pick(why, "weight"), "the engine does not say them (give --weight-bytes, or --model-config)"))
	}

	var shape Shape
	for _, t := range told {
		if t.HasKV() {
			shape, doc.ShapeSource = t.Shape, t.ShapeFrom
			kv := t.KV
			doc.Layers, doc.KVHeads, doc.HeadDim, doc.KVLayout = kv.Layers, kv.KVHeads, kv.HeadDim, kv.Layout
			if kv.KeyDim > 0 && kv.KeyDim != kv.ValueDim {
				doc.HeadDim = kv.KeyDim
				notes = append(notes, fmt.Sprintf("Keys have %d dimensions per head, values %d.", kv.KeyDim, kv.ValueDim))
			}
			if t.WeightBytes == 0 || doc.WeightSource != t.WeightFrom {
				notes = append(notes, t.Notes...)
			}
			break
		}
	}
	if !shape.HasKV() {
		doc.Missing = append(doc.Missing, "KV cache layout (layers, KV heads, head dim): "+or(pick(why, "KV"), "the engine does not say it (give --model-config, or --layers, --kv-heads and --head-dim)"))
	}
	doc.Note = strings.Join(dedupe(notes), " ")

	kt, vt, from, model, modelFrom := "", "", "", "", ""
	for _, t := range told {
		if kt == "" && t.KeyDType != "" {
			kt, vt, from = t.KeyDType, t.ValueDType, t.DTypeFrom
			if vt == "" {
				vt = kt
			}
		}
		if model == "" && t.DType != "" {
			model, modelFrom = t.DType, t.ShapeFrom
		}
	}
	resolve := func(d string) string {
		if strings.EqualFold(d, "auto") && model != "" {
			return model
		}
		return d
	}
	kb, kok := DTypeBytes(resolve(kt))
	vb, vok := DTypeBytes(resolve(vt))
	switch {
	case kt == "":
		doc.Missing = append(doc.Missing, "KV cache dtype: the engine does not say it (give --kv-dtype, e.g. f16, fp8, q8_0)")
	case !kok || !vok:
		what := kt
		if vt != kt {
			what = kt + "/" + vt
		}
		if strings.Contains(strings.ToLower(what), "auto") {
			doc.Missing = append(doc.Missing, fmt.Sprintf("KV cache dtype: %s says %q, the model's own dtype, which nothing told (give --model-config, or --kv-dtype)", from, what))
		} else {
			doc.Missing = append(doc.Missing, fmt.Sprintf("KV cache dtype: %q (from %s) is not one tokentap knows the size of; give --kv-dtype", what, from))
		}
	default:
		doc.KVDType = resolve(kt)
		if vt != kt {
			doc.KVDType += "/" + resolve(vt)
		}
		doc.KVDTypeSource = from
		if resolve(kt) != kt || resolve(vt) != vt {
			doc.KVDTypeSource = fmt.Sprintf("%s (\"auto\": the model's dtype, from %s)", from, modelFrom)
		}
		doc.KVBytesPerElem = (kb + vb) / 2
	}
	if shape.HasKV() && doc.KVBytesPerElem > 0 {
		doc.KVBytesPerToken = shape.KVBytesPerToken(kb, vb)
		if shape.KV.Window > 0 {
			doc.SlidingWindow, doc.WindowKVBytesPerToken = shape.KV.Window, shape.WindowBytesPerToken(kb, vb)
		}
		doc.StateBytesPerSequence = float64(shape.KV.StateBytes)
	}
	if len(doc.Missing) > 0 {
		return doc, Inputs{}, false
	}
	in, ok = FromResult(&doc)
	return doc, in, ok
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// pick returns the reasons that mention word, joined.
func pick(why []string, word string) string {
	var out []string
	for _, w := range why {
		if strings.Contains(w, word) {
			out = append(out, w)
		}
	}
	return strings.Join(out, "; ")
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
