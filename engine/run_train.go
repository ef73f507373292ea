package engine

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations"
)

// trainer takes the optimizer steps of the trainable roles, as one train
// step per pass over a rollout's data.
type trainer struct {
	*env
	*roleSet
	g *Graph
	// state is the loop's: its step counter counts the steps taken here.
	state *loopState
	// rowsPerStep is the mini-batch of one optimizer step (loop.rowsPerStep).
	rowsPerStep func() int
	// rowAdv are the primary role's per-row advantages of the last step
	// (nil when it computes none).
	rowAdv []float64
	// slots and realTokens count the token positions the trained micro-batches computed
	// (padding included, packed or not) and the real tokens among them, for
	// perf/train_pad_frac, and microBatches the language-model micro-batches (see knobs.pack);
	// roles of different pools add to them concurrently.
	slots, realTokens, microBatches atomic.Int64
}

// trained is what train steps did: one metrics record per optimizer
// step, the time in syncs and in training, the tokens trained on.
type trained struct {
	records     []map[string]float64
	sync, train time.Duration
	tokens      int
	// slots are the token positions the micro-batches computed, padding included (0 when
	// no language model trained), of which realTokens held a real token, in microBatches.
	slots, realTokens, microBatches int64
}

// batchOptions are PrepareBatch's options for a role.
func (e *env) batchOptions(r *role, id int) specializations.BatchOptions {
	mbs := e.rec.Knobs.MicroBatchSize
	if u := kindOf(r.node.Contract.Data).unit; u > 1 {
		mbs = max(mbs/u, 1) // micro-batches of whole examples (pairs)
	}
	pad := int32(0)
	if r.model != nil {
		pad = int32(max(r.model.Config.PAD, 0))
	}
	// A role on several devices splits each micro-batch by rows (data parallel, fsdp): its
	// rows stay unpacked.
	pack := e.rec.Knobs.Pack && len(r.node.Role.Devices) <= 1
	return specializations.BatchOptions{MicroBatchSize: mbs, Pad: pad, Rollout: id, Seed: uint64(e.rec.Knobs.Seed) + uint64(id),
		Temperature: e.rec.Knobs.Temperature, Pack: pack, PackTokens: e.rec.Knobs.PackTokens}
}

// step is one train step of the outer loop: the inject syncs in dependency order,
// then every trainable role trains on the data (roles sharing a pool one
// after another, pools concurrently).
func (tr *trainer) step(id, pass int, d *rollout.Rollout) (trained, error) {
	tr.rowAdv = nil
	t := time.Now()
	d, err := d.Select(seq(d.Len())) // syncs write into a copy: pass 0's data stays as generated
	if err != nil {
		return trained{}, err
	}
	if err := tr.injectSyncs(id, d); err != nil {
		return trained{}, err
	}
	tSync := time.Since(t)

	t = time.Now()
	tr.slots.Store(0)
	tr.realTokens.Store(0)
	tr.microBatches.Store(0)
	outs := tr.trainPools(id, d)
	tTrain := time.Since(t)
	nsteps := -1
	for _, r := range tr.roles {
		if !r.trainable() {
			continue
		}
		o := outs[r.index]
		if o.err != nil {
			return trained{}, o.err
		}
		if nsteps < 0 || len(o.results) < nsteps {
			nsteps = len(o.results)
		}
	}
	recs, err := tr.stepRecords(id, pass, outs, max(nsteps, 0))
	if err != nil {
		return trained{}, err
	}
	ntok, nTrained := 0, 0
	for _, row := range d.Tokens {
		ntok += len(row)
	}
	for _, r := range tr.roles {
		if r.trainable() {
			nTrained++
		}
	}
	return trained{records: recs, sync: tSync, train: tTrain, tokens: ntok * nTrained,
		slots: tr.slots.Load(), realTokens: tr.realTokens.Load(), microBatches: tr.microBatches.Load()}, nil
}

// injectSyncs runs the inject syncs in dependency order: each source role produces its
// keys into d under the target's names.
func (tr *trainer) injectSyncs(id int, d *rollout.Rollout) error {
	for _, s := range tr.g.Syncs {
		src := tr.byName[s.Source]
		targets := s.TargetKeys
		if len(targets) == 0 {
			targets = s.Keys
		}
		if src.self == nil {
			return fmt.Errorf("sync %s → %s: role %q produces nothing", s.Source, s.Target, s.Source)
		}
		if err := produceInto(src.self, d, tr.batchOptions(src, id), s.Keys, targets); err != nil {
			return fmt.Errorf("sync %s → %s: %w", s.Source, s.Target, err)
		}
	}
	return nil
}

// roleOutcome is what one role's training on a rollout gave: a result per optimizer step,
// the rollout's extra metrics (advantages), or the error that stopped it.
type roleOutcome struct {
	results []runtime.StepResult
	extra   map[string]float64
	err     error
}

// trainPools trains every trainable role on d, indexed by role: the roles of a pool one
// after another, pools concurrently.
func (tr *trainer) trainPools(id int, d *rollout.Rollout) []roleOutcome {
	outs := make([]roleOutcome, len(tr.roles))
	var wg sync.WaitGroup
	for _, pool := range tr.g.Pools {
		var members []*role
		for _, name := range pool.Roles {
			if r := tr.byName[name]; r != nil && r.trainable() {
				members = append(members, r)
			}
		}
		if len(members) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range members {
				res, extra, err := tr.trainRole(r, d, id)
				outs[r.index] = roleOutcome{res, extra, err}
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return outs
}

// stepRecords turns the first nsteps optimizer steps of every trained role into one
// metrics record per step, counting the run's steps (total_batches ends them); a NaN or
// Inf loss or gradient stops the run naming the role and step.
func (tr *trainer) stepRecords(id, pass int, outs []roleOutcome, nsteps int) ([]map[string]float64, error) {
	var recs []map[string]float64
	for s := range nsteps {
		tr.state.Step++
		rec := map[string]float64{"step": float64(tr.state.Step), "pass": float64(pass)}
		for _, r := range tr.roles {
			if !r.trainable() {
				continue
			}
			res := outs[r.index].results[s]
			p := r.name() + "/"
			rec[p+"loss"], rec[p+"lr"], rec[p+"grad_norm"] = res.Loss, res.LR, res.GradNorm
			if res.Skipped {
				rec[p+"skipped"] = 1
			}
			for name, v := range res.Metrics {
				rec[p+name] = v
			}
			for name, v := range outs[r.index].extra {
				rec[name] = v
			}
			if bad := nonFinite(res); bad != "" {
				return nil, tr.nonFiniteStop(r, id, bad)
			}
		}
		recs = append(recs, rec)
		if tr.rec.Knobs.TotalBatches > 0 && tr.state.Step >= tr.rec.Knobs.TotalBatches {
			break
		}
	}
	return recs, nil
}

// nonFiniteStop records a NaN or Inf of role r's step in events.jsonl and returns the error
// that stops the run, naming the last good checkpoint.
func (tr *trainer) nonFiniteStop(r *role, id int, bad string) error {
	msg := fmt.Sprintf("role %q, step %d (rollout %d): %s", r.name(), tr.state.Step, id+1, bad)
	tr.dir.LogEvent(rundir.Event{Type: rundir.EventNaNDetected, Rollout: id, Message: msg})
	last := "none"
	if cp, ok, _ := tr.dir.Latest(); ok {
		last = cp.Path
	}
	return fmt.Errorf("%w: %s; the last good checkpoint is kept (%s)", ErrNonFinite, msg, last)
}

func nonFinite(res runtime.StepResult) string {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case bad(res.Loss):
		return fmt.Sprintf("the loss is %g", res.Loss)
	case bad(res.GradNorm):
		return fmt.Sprintf("the gradient norm is %g", res.GradNorm)
	}
	return ""
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// hasKey reports whether data holds key k (wide columns included).
func hasKey(d *rollout.Rollout, k string) bool {
	switch k {
	case rollout.KeyTokens:
		return d.Tokens != nil
	case rollout.KeyLossMask:
		return d.Mask != nil
	case rollout.KeyRewards:
		return d.Reward != nil
	}
	for _, name := range []string{k, specializations.WideName(k, 0)} {
		if _, ok := d.Tok[name]; ok {
			return true
		}
		if _, ok := d.Row[name]; ok {
			return true
		}
	}
	return false
}

// trainRole prepares a role's view of the data (its in-role reference's
// log-probs, its own rollout-time outputs, advantages over the whole rollout)
// and takes one optimizer step per mini-batch.
func (tr *trainer) trainRole(r *role, d *rollout.Rollout, id int) ([]runtime.StepResult, map[string]float64, error) {
	rd, err := d.Select(seq(d.Len()))
	if err != nil {
		return nil, nil, err
	}
	opts := tr.batchOptions(r, id)
	if r.ref != nil {
		if err := produceInto(r.ref, rd, opts, []string{rollout.KeyLogProbs}, []string{rollout.KeyRefLogProbs}); err != nil {
			return nil, nil, fmt.Errorf("role %q reference: %w", r.name(), err)
		}
	}
	for _, key := range r.node.Requires {
		if !hasKey(rd, key) && slices.Contains(r.node.Produces, key) && r.self != nil {
			if err := produceInto(r.self, rd, opts, []string{key}, []string{key}); err != nil {
				return nil, nil, fmt.Errorf("role %q: %w", r.name(), err)
			}
		}
	}
	var extra map[string]float64
	if ac, ok := r.spec.(specializations.AdvantageComputer); ok {
		warns, err := ac.ComputeAdvantages(rd)
		if err != nil {
			return nil, nil, fmt.Errorf("role %q advantages: %w", r.name(), err)
		}
		for _, w := range warns {
			tr.dir.LogEvent(rundir.Event{Type: rundir.EventWarning, Rollout: id, Message: fmt.Sprintf("role %q: %s", r.name(), w)})
		}
		extra = advantageMetrics(rd)
		if r == tr.primary && tr.rowAdv == nil { // pass 0: rows in generation order
			tr.rowAdv = rowAdvantages(rd)
		}
	}
	out, err := tr.stepMiniBatches(r, rd, opts, r.spec.PrepareBatch, r.trainer.Step)
	return out, extra, err
}

// stepMiniBatches cuts rd, in order, into the mini-batches of rowsPerStep rows (all of rd when
// that is 0), prepares each one's micro-batches with prepare and takes one optimizer step on
// them with step; it stops after a step whose loss or gradient is not finite.
func (tr *trainer) stepMiniBatches(r *role, rd *rollout.Rollout, opts specializations.BatchOptions,
	prepare func(*rollout.Rollout, specializations.BatchOptions) ([]map[string]*tensors.Tensor, error),
	step func([]map[string]*tensors.Tensor) (runtime.StepResult, error)) ([]runtime.StepResult, error) {
	per := tr.rowsPerStep()
	if per <= 0 {
		per = rd.Len()
	}
	var out []runtime.StepResult
	for lo := 0; lo < rd.Len(); lo += per {
		idx := seq(min(per, rd.Len()-lo))
		for i := range idx {
			idx[i] += lo
		}
		mb, err := rd.Select(idx)
		if err != nil {
			return nil, err
		}
		mbs, err := prepare(mb, opts)
		if err != nil {
			return nil, fmt.Errorf("role %q: %w", r.name(), err)
		}
		tr.countSlots(mb, mbs)
		res, err := step(mbs)
		if err != nil {
			return nil, fmt.Errorf("role %q step: %w", r.name(), err)
		}
		out = append(out, res)
		if nonFinite(res) != "" {
			break
		}
	}
	return out, nil
}

// countSlots adds the token positions of a mini-batch's language-model micro-batches (the
// packed rows when packed) and its real tokens to the step's padding count.
func (tr *trainer) countSlots(rd *rollout.Rollout, mbs []map[string]*tensors.Tensor) {
	var slots int64
	for _, mb := range mbs {
		t := mb[runtime.PackIndexKey]
		if t == nil {
			t = mb[rollout.KeyTokens]
		}
		if t == nil || t.Shape().Rank() != 2 {
			return // not a language model's batch
		}
		slots += int64(t.Shape().Size())
	}
	var real int64
	for _, row := range rd.Tokens {
		real += int64(len(row))
	}
	tr.slots.Add(slots)
	tr.realTokens.Add(real)
	tr.microBatches.Add(int64(len(mbs)))
}

// rowAdvantages is each row's advantage for the episode log: the mean over
// its trainable tokens (outcome estimators broadcast one value to them all).
func rowAdvantages(d *rollout.Rollout) []float64 {
	adv, ok := d.Tok[rollout.KeyAdvantages]
	if !ok {
		return nil
	}
	out := make([]float64, d.Len())
	for i, row := range adv {
		s, n := 0.0, 0.0
		for t, a := range row {
			if d.Mask[i][t] != 0 {
				s, n = s+float64(a), n+1
			}
		}
		if n > 0 {
			out[i] = s / n
		}
	}
	return out
}
