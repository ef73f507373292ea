package engine

import (
	"fmt"
	"math/rand/v2"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations/loss"
)

// teacherRows: the role samples every prompt, then the teacher executes
// each row instead with probability β of the rollout (the β schedule of the
// mixed CE/K3 loss, drawn per row from seed): those rows' completions come
// from the teacher's sampler, and executed_by is 1 (imitation data).
type teacherRows struct{}

func (teacherRows) sample(g *rolloutGen, id int, seed uint64, prompts [][]int32) (drawn, error) {
	student, err := g.sampler.Generate(prompts, g.sampleOptions(seed, false))
	if err != nil {
		return drawn{}, fmt.Errorf("sample: %w", err)
	}
	samples, executedBy, err := mixTeacher(g, id, seed, prompts, student)
	if err != nil {
		return drawn{}, err
	}
	return drawn{samples: samples, rows: map[string][]float64{rollout.KeyExecutedBy: executedBy}}, nil
}

// mixTeacher replaces each student row by the teacher's with probability β.
func mixTeacher(g *rolloutGen, id int, seed uint64, prompts [][]int32, student []runtime.Sample) ([]runtime.Sample, []float64, error) {
	if g.teacher == nil {
		return nil, nil, fmt.Errorf("imitation data needs a teacher role (init: teacher)")
	}
	k := g.rec.Knobs
	beta, err := loss.BetaAt(loss.BetaSchedule{Start: k.BetaStart, End: k.BetaEnd, DecayRollouts: k.BetaDecayRollouts}, id)
	if err != nil {
		return nil, nil, err
	}
	teacher, err := g.teacher.Generate(prompts, g.sampleOptions(seed^0x7eac4e7, false))
	if err != nil {
		return nil, nil, fmt.Errorf("teacher sample: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 0xe8ec))
	out := make([]runtime.Sample, len(student))
	exec := make([]float64, len(student))
	for i := range student {
		out[i] = student[i]
		if rng.Float64() < beta {
			out[i], exec[i] = teacher[i], 1
		}
	}
	return out, exec, nil
}
