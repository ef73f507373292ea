package runtime

import (
	"fmt"
	"math"
)

// refModel is an independent float64 implementation of the decoder in plain Go loops, used to
// check the GoMLX graphs. It shares nothing with model.go but the parameter names.
type refModel struct {
	c Config
	w map[string][]float64
}

func newRefModel(m *Model) (*refModel, error) {
	r := &refModel{c: m.Config, w: map[string][]float64{}}
	for _, p := range m.Params() {
		v, err := m.ParamValues(p.Name)
		if err != nil {
			return nil, err
		}
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		r.w[p.Name] = f
	}
	return r, nil
}

// matVec computes W·x for W stored [out, in].
func matVec(w []float64, out, in int, x []float64) []float64 {
	y := make([]float64, out)
	for o := range out {
		s := 0.0
		row := w[o*in : (o+1)*in]
		for i, xv := range x {
			s += row[i] * xv
		}
		y[o] = s
	}
	return y
}

func refRMSNorm(x, w []float64, eps float64) []float64 {
	ms := 0.0
	for _, v := range x {
		ms += v * v
	}
	ms /= float64(len(x))
	inv := 1 / math.Sqrt(ms+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * inv * w[i]
	}
	return y
}

// refFreq is the rotation frequency of pair i of a head of width d, with rope_scaling applied
// (linear: positions divided by the factor; llama3: long wavelengths divided by the factor,
// short ones kept, a linear blend in wavelength⁻¹ between).
func refFreq(c Config, i, d int) float64 {
	freq := math.Pow(c.RopeTheta, -float64(2*i)/float64(d))
	r := c.RopeScaling
	switch r.Type {
	case "linear":
		return freq / r.Factor
	case "llama3":
		// Position of the wavelength between the band edges, measured in cycles per original
		// context: ≤ low_freq_factor cycles is long (scaled), ≥ high_freq_factor is short (kept).
		cycles := float64(r.OriginalMaxPositions) * freq / (2 * math.Pi)
		switch {
		case cycles <= r.LowFreqFactor:
			return freq / r.Factor
		case cycles >= r.HighFreqFactor:
			return freq
		}
		w := (cycles - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
		return w*freq + (1-w)*freq/r.Factor
	}
	return freq
}

// refRope rotates one head vector at position pos (rotate-half convention).
func refRope(c Config, x []float64, pos int) []float64 {
	d := len(x)
	half := d / 2
	y := make([]float64, d)
	for i := range half {
		a := float64(pos) * refFreq(c, i, d)
		c, s := math.Cos(a), math.Sin(a)
		y[i] = x[i]*c - x[i+half]*s
		y[i+half] = x[i+half]*c + x[i]*s
	}
	return y
}

// logits returns the next-token logits at every position of one sequence.
func (r *refModel) logits(tokens []int32) [][]float64 {
	c := r.c
	head := r.w["lm_head.weight"]
	if c.TieEmbeddings {
		head = r.w["model.embed_tokens.weight"]
	}
	hidden := r.hidden(tokens)
	out := make([][]float64, len(hidden))
	for t, h := range hidden {
		out[t] = matVec(head, c.VocabSize, c.Hidden, h)
	}
	return out
}

// values returns the value head's output at every position.
func (r *refModel) values(tokens []int32) []float64 {
	var out []float64
	for _, h := range r.hidden(tokens) {
		out = append(out, matVec(r.w["score.weight"], 1, r.c.Hidden, h)[0])
	}
	return out
}

// hidden returns the final-normed hidden states of one sequence: causal attention, within the
// sliding window if the model has one, positions 0, 1, ….
func (r *refModel) hidden(tokens []int32) [][]float64 {
	positions := make([]int, len(tokens))
	for t := range positions {
		positions[t] = t
	}
	return r.maskedHidden(tokens, positions, func(q, k int) bool {
		return k <= q && (r.c.SlidingWindow <= 0 || k > q-r.c.SlidingWindow)
	})
}

// maskedHidden is hidden where token q attends to token k when visible(q, k), with RoPE at
// positions[q] (a packed row: several sequences, each seeing only its own earlier tokens).
func (r *refModel) maskedHidden(tokens []int32, positions []int, visible func(q, k int) bool) [][]float64 {
	c := r.c
	d, hd := c.Hidden, c.HeadDim()
	kvd, qd := c.KVHeads*hd, c.Heads*hd
	group := c.Heads / c.KVHeads
	n := len(tokens)
	x := make([][]float64, n)
	for t, tok := range tokens {
		x[t] = append([]float64(nil), r.w["model.embed_tokens.weight"][int(tok)*d:(int(tok)+1)*d]...)
	}
	for l := range c.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		qs, ks, vs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for t := range n {
			h := refRMSNorm(x[t], r.w[pre+"input_layernorm.weight"], c.RMSNormEps)
			q := matVec(r.w[pre+"self_attn.q_proj.weight"], qd, d, h)
			k := matVec(r.w[pre+"self_attn.k_proj.weight"], kvd, d, h)
			v := matVec(r.w[pre+"self_attn.v_proj.weight"], kvd, d, h)
			if c.AttentionBias {
				for i := range q {
					q[i] += r.w[pre+"self_attn.q_proj.bias"][i]
				}
				for i := range k {
					k[i] += r.w[pre+"self_attn.k_proj.bias"][i]
					v[i] += r.w[pre+"self_attn.v_proj.bias"][i]
				}
			}
			for hh := range c.Heads {
				head := q[hh*hd : (hh+1)*hd]
				if c.QKNorm {
					head = refRMSNorm(head, r.w[pre+"self_attn.q_norm.weight"], c.RMSNormEps)
				}
				copy(q[hh*hd:], refRope(c, head, positions[t]))
			}
			for hh := range c.KVHeads {
				head := k[hh*hd : (hh+1)*hd]
				if c.QKNorm {
					head = refRMSNorm(head, r.w[pre+"self_attn.k_norm.weight"], c.RMSNormEps)
				}
				copy(k[hh*hd:], refRope(c, head, positions[t]))
			}
			qs[t], ks[t], vs[t] = q, k, v
		}
		for t := range n {
			o := make([]float64, qd)
			for hh := range c.Heads {
				kv := hh / group
				w := make([]float64, n)
				mx := math.Inf(-1)
				for s := range n {
					if !visible(t, s) {
						continue
					}
					dot := 0.0
					for i := range hd {
						dot += qs[t][hh*hd+i] * ks[s][kv*hd+i]
					}
					w[s] = dot / math.Sqrt(float64(hd))
					mx = math.Max(mx, w[s])
				}
				sum := 0.0
				for s := range n {
					if visible(t, s) {
						w[s] = math.Exp(w[s] - mx)
						sum += w[s]
					}
				}
				for s := range n {
					if visible(t, s) {
						for i := range hd {
							o[hh*hd+i] += w[s] / sum * vs[s][kv*hd+i]
						}
					}
				}
			}
			attn := matVec(r.w[pre+"self_attn.o_proj.weight"], d, qd, o)
			if c.OutputBias {
				for i := range attn {
					attn[i] += r.w[pre+"self_attn.o_proj.bias"][i]
				}
			}
			for i := range d {
				x[t][i] += attn[i]
			}
			h := refRMSNorm(x[t], r.w[pre+"post_attention_layernorm.weight"], c.RMSNormEps)
			gate := matVec(r.w[pre+"mlp.gate_proj.weight"], c.Intermediate, d, h)
			up := matVec(r.w[pre+"mlp.up_proj.weight"], c.Intermediate, d, h)
			for i := range gate {
				gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			down := matVec(r.w[pre+"mlp.down_proj.weight"], d, c.Intermediate, gate)
			for i := range d {
				x[t][i] += down[i]
			}
		}
	}
	out := make([][]float64, n)
	for t := range n {
		out[t] = refRMSNorm(x[t], r.w["model.norm.weight"], c.RMSNormEps)
	}
	return out
}

// logProbs returns log p(tokens[t+1] | tokens[≤t]) for t < n−1, and the entropies.
func (r *refModel) logProbs(tokens []int32) (lp, ent []float64) {
	logits := r.logits(tokens)
	for t := 0; t+1 < len(tokens); t++ {
		row := logits[t]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(v - mx)
		}
		lse := mx + math.Log(sum)
		lp = append(lp, row[tokens[t+1]]-lse)
		e := 0.0
		for _, v := range row {
			l := v - lse
			e -= math.Exp(l) * l
		}
		ent = append(ent, e)
	}
	return lp, ent
}
