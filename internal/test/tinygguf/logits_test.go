package tinygguf

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
)

// model is the default model's weights as read back from its file.
type model struct {
	c             Config
	n, nv, hd, ff int
	emb, out      []float32 // rows of n
	outNorm       []float32
	layers        []layer
	allowed       []bool // the tokens the construction means to let out
	tokens        []string
}

type layer struct {
	attnNorm, ffnNorm []float32
	wq, wk, wv, wo    []float32
	wgate, wup, wdown []float32
}

func loadModel(t *testing.T) *model {
	t.Helper()
	f := defaultFile(t)
	c := Default()
	m := &model{c: c, n: c.Embedding, hd: c.HeadDim(), ff: c.FFN}
	get := func(name string) []float32 {
		x, err := f.floats(name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	m.emb = get("token_embd.weight")
	m.out = get("output.weight")
	m.outNorm = get("output_norm.weight")
	m.nv = len(m.emb) / m.n
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		m.layers = append(m.layers, layer{
			attnNorm: get(p + "attn_norm.weight"), ffnNorm: get(p + "ffn_norm.weight"),
			wq: get(p + "attn_q.weight"), wk: get(p + "attn_k.weight"), wv: get(p + "attn_v.weight"),
			wo: get(p + "attn_output.weight"), wgate: get(p + "ffn_gate.weight"),
			wup: get(p + "ffn_up.weight"), wdown: get(p + "ffn_down.weight"),
		})
	}
	for _, x := range f.kv["tokenizer.ggml.tokens"].([]any) {
		m.tokens = append(m.tokens, x.(string))
	}
	words := map[string]bool{}
	for _, w := range c.WordList() {
		words[encodeBytes(" "+w)] = true
	}
	for _, tok := range m.tokens {
		m.allowed = append(m.allowed, words[tok])
	}
	return m
}

func norm2(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// opNormBound returns an upper bound on the spectral norm of the rows×cols
// matrix a (row-major): for the Gram matrix G, positive semidefinite,
// λmax(G)^8 ≤ tr(G^8) = ‖G^4‖²_F, so ‖a‖ ≤ ‖G^4‖_F^(1/8). The bound
// exceeds the norm by at most rank^(1/16), under 1.42 here, and by much
// less for a random matrix, whose top eigenvalues dominate.
func opNormBound(a []float32, rows, cols int) float64 {
	d, long := min(rows, cols), max(rows, cols)
	vecs := make([]float64, d*long) // the d vectors of the smaller side
	for r := range rows {
		for c := range cols {
			if rows > cols {
				vecs[c*long+r] = float64(a[r*cols+c])
			} else {
				vecs[r*long+c] = float64(a[r*cols+c])
			}
		}
	}
	g := make([]float64, d*d)
	for i := range d {
		vi := vecs[i*long : (i+1)*long]
		for j := 0; j <= i; j++ {
			var s float64
			for k, x := range vecs[j*long : (j+1)*long] {
				s += vi[k] * x
			}
			g[i*d+j], g[j*d+i] = s, s
		}
	}
	// Square twice; normalizing by the largest entry keeps it finite:
	// G^(2^s) = exp(logScale)·g.
	var logScale float64
	for range 2 {
		var m float64
		for _, x := range g {
			m = max(m, math.Abs(x))
		}
		if m == 0 {
			return 0
		}
		for i := range g {
			g[i] /= m
		}
		logScale = 2 * (logScale + math.Log(m))
		sq := make([]float64, d*d)
		for i := range d {
			gi := g[i*d : (i+1)*d]
			for j := 0; j <= i; j++ { // g is symmetric: row j is column j
				var s float64
				for k, x := range g[j*d : (j+1)*d] {
					s += gi[k] * x
				}
				sq[i*d+j], sq[j*d+i] = s, s
			}
		}
		g = sq
	}
	var f2 float64
	for _, x := range g {
		f2 += x * x
	}
	// ‖a‖² = λmax ≤ (exp(2·logScale)·f2)^(1/8).
	lambda := math.Exp((2*logScale + math.Log(f2)) / 8)
	return math.Sqrt(lambda) * (1 + 1e-9) // room for float64 rounding
}

func TestOpNormBound(t *testing.T) {
	// diag(3, 4) padded: norm 4; a rank-one matrix: norm exact.
	a := []float32{3, 0, 0, 0, 4, 0}
	if b := opNormBound(a, 2, 3); b < 4 || b > 4*1.05 {
		t.Errorf("bound %g for norm 4", b)
	}
	b := opNormBound([]float32{1, 2, 2, 4, 3, 6}, 3, 2) // u vᵀ, ‖u‖=√14, ‖v‖=√5
	if want := math.Sqrt(14 * 5); b < want || b > want*(1+1e-6) {
		t.Errorf("bound %g for norm %g", b, want)
	}
	// A random matrix: at least the norm of its image of any vector.
	g := newRNG(3, "op norm test")
	m := make([]float32, 40*30)
	for i := range m {
		m[i] = g.scaled(scaled{1000, 10})
	}
	b = opNormBound(m, 40, 30)
	x := make([]float64, 30)
	for c := range x {
		x[c] = 1
	}
	var low float64
	for range 50 { // power iteration: ‖Ax‖/‖x‖ never exceeds the norm
		y := make([]float64, 40)
		for r := range 40 {
			for c := range 30 {
				y[r] += float64(m[r*30+c]) * x[c]
			}
		}
		if low = norm64(y) / norm64(x); low > b {
			t.Fatalf("‖Ax‖/‖x‖ = %g above the bound %g", low, b)
		}
		for c := range x {
			x[c] = 0
			for r := range 40 {
				x[c] += float64(m[r*30+c]) * y[r]
			}
		}
	}
	if slack := math.Pow(30, 1.0/16); low < b/slack { // the promised tightness
		t.Errorf("norm about %g, bound %g: looser than %.2f", low, b, slack)
	}
}

func norm64(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

// TestForbiddenTokensUnreachable proves, from the weights in the file, that
// for every possible input the logit of each token the model must not emit
// sits far below that of each word token. The argument:
//
//  1. Every embedding holds the same value C on the marker dimension m, and
//     no layer writes to m (row m of attn_output and ffn_down is zero), so
//     the residual stream's marker is C at the end, whatever the input.
//  2. Each sublayer reads an RMS-normed input, of norm at most
//     max|gain|·√n, so what it adds to the residual is bounded by norms of
//     its weights alone: attention outputs convex mixtures of value
//     vectors, the FFN's |silu(a)| ≤ |a|. Hence the rest of the residual
//     has norm at most R = max embedding norm + the layers' bounds.
//  3. After the final norm (divide by ρ = √((C²+r²)/n + ε), r ≤ R the
//     non-marker norm), logit_allowed − logit_forbidden ≥
//     (Δ·g_m·C − W·r)/ρ, with Δ the marker-weight difference and W the
//     largest non-marker output-row norms (gain applied) of the two sets.
//     That falls as r grows, so its value at r = R is the least gap.
func TestForbiddenTokensUnreachable(t *testing.T) {
	m := loadModel(t)
	n, mk := m.n, m.n-1
	sqrtN := math.Sqrt(float64(n))

	// 1. The marker.
	C := m.emb[mk]
	if C <= 0 {
		t.Fatalf("marker value %g; want positive", C)
	}
	var embOther float64
	for tok := range m.nv {
		row := m.emb[tok*n : (tok+1)*n]
		if row[mk] != C {
			t.Fatalf("token %d: marker %g; want %g", tok, row[mk], C)
		}
		embOther = max(embOther, norm2(row[:mk]))
	}
	// 2. The layers' bounds, one goroutine each: the norms take a while.
	bounds := make([][2]float64, len(m.layers))
	var wg sync.WaitGroup
	for l, ly := range m.layers {
		q := m.c.Heads * m.hd
		for k := range q {
			if ly.wo[mk*q+k] != 0 {
				t.Fatalf("layer %d: attn_output writes to the marker", l)
			}
		}
		for k := range m.ff {
			if ly.wdown[mk*m.ff+k] != 0 {
				t.Fatalf("layer %d: ffn_down writes to the marker", l)
			}
		}
		wg.Go(func() {
			// Attention: each query head's output is a convex mixture of
			// its KV head's value vectors, each at most ‖Wv_kv‖·‖x̂‖.
			in := maxAbs(ly.attnNorm) * sqrtN
			var concat2 float64
			per := m.hd * n // one KV head's rows of attn_v
			for h := range m.c.Heads {
				kv := h / (m.c.Heads / m.c.KVHeads)
				v := opNormBound(ly.wv[kv*per:(kv+1)*per], m.hd, n) * in
				concat2 += v * v
			}
			attn := opNormBound(ly.wo, n, q) * math.Sqrt(concat2)
			// FFN: |silu(a_i)| ≤ |a_i| ≤ ‖gate row i‖‖x̂‖, so
			// ‖silu(a)⊙b‖ ≤ max_i ‖gate row i‖‖x̂‖ · ‖up‖‖x̂‖.
			in = maxAbs(ly.ffnNorm) * sqrtN
			var gmax float64
			for i := range m.ff {
				gmax = max(gmax, norm2(ly.wgate[i*n:(i+1)*n]))
			}
			ffn := opNormBound(ly.wdown, n, m.ff) * gmax * in * opNormBound(ly.wup, m.ff, n) * in
			bounds[l] = [2]float64{attn, ffn}
		})
	}
	wg.Wait()
	R := embOther
	for l, b := range bounds {
		t.Logf("layer %d adds at most %.1f (attention) + %.1f (FFN)", l, b[0], b[1])
		R += b[0] + b[1]
	}

	// 3. The output layer.
	gm := float64(m.outNorm[mk])
	if gm <= 0 {
		t.Fatalf("final norm gain on the marker %g; want positive", gm)
	}
	minAllowed, maxForbid := math.Inf(1), math.Inf(-1)
	var wAllowed, wForbid float64
	nAllowed := 0
	for tok := range m.nv {
		row := m.out[tok*n : (tok+1)*n]
		var w2 float64
		for j := range mk {
			x := float64(row[j]) * float64(m.outNorm[j])
			w2 += x * x
		}
		if m.allowed[tok] {
			nAllowed++
			minAllowed = min(minAllowed, float64(row[mk]))
			wAllowed = max(wAllowed, math.Sqrt(w2))
		} else {
			maxForbid = max(maxForbid, float64(row[mk]))
			wForbid = max(wForbid, math.Sqrt(w2))
		}
	}
	if nAllowed != len(m.c.WordList()) {
		t.Fatalf("%d word tokens in the vocabulary; want %d", nAllowed, len(m.c.WordList()))
	}
	delta := minAllowed - maxForbid
	W := wAllowed + wForbid
	gap := func(r float64) float64 {
		rho := math.Sqrt((float64(C)*float64(C)+r*r)/float64(n) + rmsEps)
		return (delta*gm*float64(C) - W*r) / rho
	}
	t.Logf("non-marker residual norm ≤ %.1f (embeddings %.1f); least logit gap %.0f (at r=0: %.0f)", R, embOther, gap(R), gap(0))
	const want = 100 // e^-100: nothing a sampler at any sane temperature picks
	if g := gap(R); !(g >= want) {
		t.Fatalf("least gap between allowed and forbidden logits %.1f; want at least %d", g, want)
	}
}

// forward runs the model the way llama.cpp's llama graph does (RMS norm,
// RoPE on adjacent pairs, grouped-query causal attention, SwiGLU) over
// tokens and returns the last position's logits. It is a second check, on
// real activations, of what TestForbiddenTokensUnreachable proves.
func (m *model) forward(tokens []int) []float64 {
	n, hd := m.n, m.hd
	nh, nkv := m.c.Heads, m.c.KVHeads
	T := len(tokens)
	x := make([][]float64, T)
	for p, tok := range tokens {
		x[p] = make([]float64, n)
		for j := range n {
			x[p][j] = float64(m.emb[tok*n+j])
		}
	}
	rms := func(v []float64, g []float32) []float64 {
		var s float64
		for _, a := range v {
			s += a * a
		}
		d := math.Sqrt(s/float64(len(v)) + rmsEps)
		o := make([]float64, len(v))
		for i, a := range v {
			o[i] = a / d * float64(g[i])
		}
		return o
	}
	matvec := func(w []float32, in []float64, rows int) []float64 {
		cols := len(in)
		o := make([]float64, rows)
		for r := range rows {
			var s float64
			for k, a := range in {
				s += float64(w[r*cols+k]) * a
			}
			o[r] = s
		}
		return o
	}
	rope := func(v []float64, pos int) {
		for h := 0; h < len(v)/hd; h++ {
			for i := 0; i < hd; i += 2 {
				th := float64(pos) * math.Pow(ropeBase, -float64(i)/float64(hd))
				a, b := v[h*hd+i], v[h*hd+i+1]
				v[h*hd+i] = a*math.Cos(th) - b*math.Sin(th)
				v[h*hd+i+1] = a*math.Sin(th) + b*math.Cos(th)
			}
		}
	}
	for _, ly := range m.layers {
		qs, ks, vs := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for p := range T {
			h := rms(x[p], ly.attnNorm)
			qs[p], ks[p], vs[p] = matvec(ly.wq, h, nh*hd), matvec(ly.wk, h, nkv*hd), matvec(ly.wv, h, nkv*hd)
			rope(qs[p], p)
			rope(ks[p], p)
		}
		for p := range T {
			cat := make([]float64, nh*hd)
			for h := range nh {
				kv := h / (nh / nkv)
				sc := make([]float64, p+1)
				mx := math.Inf(-1)
				for s := 0; s <= p; s++ {
					var d float64
					for i := range hd {
						d += qs[p][h*hd+i] * ks[s][kv*hd+i]
					}
					sc[s] = d / math.Sqrt(float64(hd))
					mx = max(mx, sc[s])
				}
				var z float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					z += sc[s]
				}
				for s := range sc {
					for i := range hd {
						cat[h*hd+i] += sc[s] / z * vs[s][kv*hd+i]
					}
				}
			}
			for j, a := range matvec(ly.wo, cat, n) {
				x[p][j] += a
			}
		}
		for p := range T {
			h := rms(x[p], ly.ffnNorm)
			g, u := matvec(ly.wgate, h, m.ff), matvec(ly.wup, h, m.ff)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			for j, a := range matvec(ly.wdown, g, n) {
				x[p][j] += a
			}
		}
	}
	return matvec(m.out, rms(x[T-1], m.outNorm), m.nv)
}

// TestForwardEmitsWords runs the model on prompts of every kind of token
// (bytes, word pieces, specials) and checks the logits: the best forbidden
// one far below the worst allowed one, and the allowed ones not all equal,
// so sampling picks among many words.
func TestForwardEmitsWords(t *testing.T) {
	if testing.Short() {
		t.Skip("slow reference forward pass")
	}
	m := loadModel(t)
	sp := m.c.Specials()
	g := newRNG(7, "forward test")
	prompts := [][]int{
		{sp.IMStart},
		{sp.IMStart, 'u', 's', 'e', 'r', '\n', 300, 301, 302, sp.IMEnd, '\n', sp.IMStart},
	}
	for range 2 {
		p := make([]int, 24)
		for i := range p {
			p[i] = int(g.next() % uint64(m.nv))
		}
		prompts = append(prompts, p)
	}
	for _, p := range prompts {
		logits := m.forward(p)
		minA, maxA, maxF := math.Inf(1), math.Inf(-1), math.Inf(-1)
		for tok, l := range logits {
			if m.allowed[tok] {
				minA, maxA = min(minA, l), max(maxA, l)
			} else {
				maxF = max(maxF, l)
			}
		}
		t.Logf("prompt of %d: allowed logits %.2f to %.2f, forbidden at most %.0f", len(p), minA, maxA, maxF)
		if minA-maxF < 100 {
			t.Errorf("prompt %v: worst allowed logit %.1f, best forbidden %.1f", p, minA, maxF)
		}
		if maxA-minA < 0.5 {
			t.Errorf("prompt %v: allowed logits all within %.2f", p, maxA-minA)
		}
	}
	for tok, ok := range m.allowed {
		if ok && !strings.HasPrefix(m.tokens[tok], "Ġ") {
			t.Errorf("allowed token %q lacks the leading space", m.tokens[tok])
		}
	}
}
