package runtime

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"stx.dev/stx/runtime/cpu/blas"
)

// hostDecoder runs the sampler's one-token decode steps in plain Go on the CPU. With SimpleGo a
// decode step is a handful of [batch, in]·[out, in] products with batch ≈ 8, which SimpleGo
// executes with its small-matrix kernel at about 1 GFLOP/s and with a copy of every input;
// a matrix-times-few-vectors loop that streams each weight row once is several times faster.
// It computes exactly the model of forward (same weights, same RoPE, same masking), in float32,
// and is checked against the full forward in the tests. It is used for the CPU backends
// (SimpleGo and stx's cpu backend, where a decode step as a graph would pay a graph launch and
// a cache upload per token): on an accelerator the graph decode stays on the device.
type hostDecoder struct {
	c       Config
	w       map[string][]float32
	workers int
	// scratch, sized for one batch
	x, h, q, k, v, attn, gate, up, mlp []float32
	scores                             []float32
}

// newHostDecoder snapshots the model's current weights.
func newHostDecoder(m *Model) (*hostDecoder, error) {
	d := &hostDecoder{c: m.Config, w: map[string][]float32{}, workers: max(1, runtime.GOMAXPROCS(0))}
	for _, p := range m.Params() {
		v, err := m.ParamValues(p.Name)
		if err != nil {
			return nil, fmt.Errorf("host decoder: %w", err)
		}
		d.w[p.Name] = v
	}
	return d, nil
}

// matVecs computes out[r] = W·x[r] for rows r (W stored [outDim, inDim]): out = x·Wᵀ through
// OpenBLAS when it is loaded, else a Go loop that splits the output dimension across goroutines
// and reads each weight row once for all rows of x.
func (d *hostDecoder) matVecs(out []float32, w []float32, x []float32, rows, outDim, inDim int) {
	if blas.Available() {
		blas.Sgemm(false, true, rows, outDim, inDim, 1, x, inDim, w, inDim, 0, out, outDim)
		return
	}
	chunk := (outDim + d.workers - 1) / d.workers
	var wg sync.WaitGroup
	for start := 0; start < outDim; start += chunk {
		end := min(start+chunk, outDim)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := start; j < end; j++ {
				wr := w[j*inDim : (j+1)*inDim]
				r := 0
				for ; r+4 <= rows; r += 4 {
					x0 := x[r*inDim : (r+1)*inDim]
					x1 := x[(r+1)*inDim : (r+2)*inDim]
					x2 := x[(r+2)*inDim : (r+3)*inDim]
					x3 := x[(r+3)*inDim : (r+4)*inDim]
					var s0, s1, s2, s3 float32
					for i, wv := range wr {
						s0 += wv * x0[i]
						s1 += wv * x1[i]
						s2 += wv * x2[i]
						s3 += wv * x3[i]
					}
					out[r*outDim+j], out[(r+1)*outDim+j], out[(r+2)*outDim+j], out[(r+3)*outDim+j] = s0, s1, s2, s3
				}
				for ; r < rows; r++ {
					xr := x[r*inDim : (r+1)*inDim]
					var s float32
					for i, wv := range wr {
						s += wv * xr[i]
					}
					out[r*outDim+j] = s
				}
			}
		}()
	}
	wg.Wait()
}

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

func (d *hostDecoder) rmsNorm(out, x, w []float32, rows int) {
	n := d.c.Hidden
	for r := range rows {
		xr, or := x[r*n:(r+1)*n], out[r*n:(r+1)*n]
		var ms float32
		for _, v := range xr {
			ms += v * v
		}
		inv := float32(1 / math.Sqrt(float64(ms/float32(n))+d.c.RMSNormEps))
		for i, v := range xr {
			or[i] = v * inv * w[i]
		}
	}
}

// rope rotates heads [heads][hd] of one row at position pos (rotate-half).
func (d *hostDecoder) rope(x []float32, heads int, pos int32) {
	hd := d.c.HeadDim()
	half := hd / 2
	for i := range half {
		inv := 1 / math.Pow(d.c.RopeTheta, float64(2*i)/float64(hd))
		a := float64(float32(pos) * float32(inv)) // as the graph: float32 position × float32 frequency
		c, s := float32(math.Cos(a)), float32(math.Sin(a))
		for h := range heads {
			x1, x2 := x[h*hd+i], x[h*hd+half+i]
			x[h*hd+i] = x1*c - x2*s
			x[h*hd+half+i] = x2*c + x1*s
		}
	}
}

// step decodes one token per row: tokens and positions [rows]; the new keys/values are
// written at cache slot slot (kCache[l] [rows,kvh,capacity,hd], vCache[l] [rows,kvh,hd,capacity])
// and each row attends to slots [padCount[r], slot] (a left pad, slot < padCount[r], only to
// itself). The next-token logits go to logits [rows, vocab].
func (d *hostDecoder) step(tokens, positions []int32, kCache, vCache [][]float32, capacity int, padCount []int, slot int, logits []float32) {
	c := d.c
	rows, hid, hd, kvh := len(tokens), c.Hidden, c.HeadDim(), c.KVHeads
	kvd, group := kvh*hd, c.Heads/kvh
	d.x = grow(d.x, rows*hid)
	d.h = grow(d.h, rows*hid)
	d.q = grow(d.q, rows*hid)
	d.k = grow(d.k, rows*kvd)
	d.v = grow(d.v, rows*kvd)
	d.attn = grow(d.attn, rows*hid)
	d.gate = grow(d.gate, rows*c.Intermediate)
	d.up = grow(d.up, rows*c.Intermediate)
	d.mlp = grow(d.mlp, rows*hid)
	d.scores = grow(d.scores, slot+1)
	emb := d.w["model.embed_tokens.weight"]
	for r, tok := range tokens {
		copy(d.x[r*hid:(r+1)*hid], emb[int(tok)*hid:(int(tok)+1)*hid])
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	for l := range c.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		d.rmsNorm(d.h, d.x, d.w[pre+"input_layernorm.weight"], rows)
		d.matVecs(d.q, d.w[pre+"self_attn.q_proj.weight"], d.h, rows, hid, hid)
		d.matVecs(d.k, d.w[pre+"self_attn.k_proj.weight"], d.h, rows, kvd, hid)
		d.matVecs(d.v, d.w[pre+"self_attn.v_proj.weight"], d.h, rows, kvd, hid)
		if c.AttentionBias {
			addBias(d.q, d.w[pre+"self_attn.q_proj.bias"], rows)
			addBias(d.k, d.w[pre+"self_attn.k_proj.bias"], rows)
			addBias(d.v, d.w[pre+"self_attn.v_proj.bias"], rows)
		}
		kc, vc := kCache[l], vCache[l]
		for r := range rows {
			d.rope(d.q[r*hid:(r+1)*hid], c.Heads, positions[r])
			d.rope(d.k[r*kvd:(r+1)*kvd], kvh, positions[r])
			for g := range kvh {
				blk := r*kvh + g
				copy(kc[(blk*capacity+slot)*hd:(blk*capacity+slot+1)*hd], d.k[r*kvd+g*hd:r*kvd+(g+1)*hd])
				for i := range hd {
					vc[(blk*hd+i)*capacity+slot] = d.v[r*kvd+g*hd+i]
				}
			}
			first := min(padCount[r], slot)
			for h := range c.Heads {
				blk := r*kvh + h/group
				qh := d.q[r*hid+h*hd : r*hid+(h+1)*hd]
				sc := d.scores[:slot+1]
				mx := float32(math.Inf(-1))
				for s := first; s <= slot; s++ {
					ks := kc[(blk*capacity+s)*hd : (blk*capacity+s+1)*hd]
					var dot float32
					for i, qv := range qh {
						dot += qv * ks[i]
					}
					sc[s] = dot * scale
					mx = max(mx, sc[s])
				}
				var den float32
				for s := first; s <= slot; s++ {
					sc[s] = float32(math.Exp(float64(sc[s] - mx)))
					den += sc[s]
				}
				out := d.attn[r*hid+h*hd : r*hid+(h+1)*hd]
				for i := range hd {
					vrow := vc[(blk*hd+i)*capacity : (blk*hd+i+1)*capacity]
					var acc float32
					for s := first; s <= slot; s++ {
						acc += sc[s] * vrow[s]
					}
					out[i] = acc / den
				}
			}
		}
		d.matVecs(d.mlp, d.w[pre+"self_attn.o_proj.weight"], d.attn, rows, hid, hid)
		addInto(d.x, d.mlp)
		d.rmsNorm(d.h, d.x, d.w[pre+"post_attention_layernorm.weight"], rows)
		d.matVecs(d.gate, d.w[pre+"mlp.gate_proj.weight"], d.h, rows, c.Intermediate, hid)
		d.matVecs(d.up, d.w[pre+"mlp.up_proj.weight"], d.h, rows, c.Intermediate, hid)
		for i, g := range d.gate {
			d.gate[i] = g / (1 + float32(math.Exp(float64(-g)))) * d.up[i]
		}
		d.matVecs(d.mlp, d.w[pre+"mlp.down_proj.weight"], d.gate, rows, hid, c.Intermediate)
		addInto(d.x, d.mlp)
	}
	d.rmsNorm(d.h, d.x, d.w["model.norm.weight"], rows)
	head := d.w["lm_head.weight"]
	if c.TieEmbeddings {
		head = emb
	}
	d.matVecs(logits, head, d.h, rows, c.VocabSize, hid)
}

func addBias(x, b []float32, rows int) {
	n := len(b)
	for r := range rows {
		xr := x[r*n : (r+1)*n]
		for i, v := range b {
			xr[i] += v
		}
	}
}

func addInto(x, y []float32) {
	for i, v := range y {
		x[i] += v
	}
}
